package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/cli"
)

// The README's "Your own API in five minutes", followed literally: its
// shop.yaml and refund.json as the README prints them, its two commands (the
// dev worker as the real binary with --tools shop.yaml, and `starter run
// --plan refund.json --wait`, with only the ports and data directory a
// shared machine needs added), against a small JSON API this test serves and
// the engine knows nothing of. The first run refunds once; then the API
// commits a refund and drops the connection before answering, the plan runs
// again under turn 2, the lookup settles the lost answer, and the API's own
// store holds one refund per turn, made by one POST each.
func TestREADMEYourOwnAPI(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	md, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	section := sectionOf(t, string(md), "## Your own API in five minutes")
	shopYAML := blockAfter(t, section, "`shop.yaml`", "```yaml")
	refundJSON := blockAfter(t, section, "`refund.json`", "```json")
	commands := blockAfter(t, section, "Run the dev stack", "```sh")
	require.Equal(t, []string{
		"SHOP_URL=http://127.0.0.1:9000 go run ./worker --dev --tools shop.yaml",
		"go run ./starter run --plan refund.json --wait",
	}, strings.Split(strings.TrimSpace(commands), "\n"), "the commands this test runs are the README's")

	shop := newShopAPI()
	srv := httptest.NewServer(shop)
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "shop.yaml"), []byte(shopYAML), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "refund.json"), []byte(refundJSON), 0o600))
	bin := buildWorkerBinary(ctx, t, dir)

	// SHOP_URL=... go run ./worker --dev --tools shop.yaml (run from dir,
	// where the README's files are; the API on this test's port).
	t.Setenv("SHOP_URL", srv.URL)
	t.Chdir(dir)
	w := startDevBinary(ctx, t, bin, []string{"--dev", "--tools", "shop.yaml",
		"--port", "0", "--ui-port", "-1", "--data-dir", filepath.Join(dir, "data")})
	require.Regexp(t, `(?m)^  tools +create_refund \(from shop\.yaml\)$`, w.out.String(), "the banner lists the catalogue's tool")
	addr := regexp.MustCompile(`(?m)^  Temporal +(\S+) \(namespace (\S+);`).FindStringSubmatch(w.out.String())
	require.NotNil(t, addr)

	// go run ./starter run --plan refund.json --wait
	run := func() string {
		t.Helper()
		var out, errOut bytes.Buffer
		args := []string{"run", "--plan", "refund.json", "--wait", "--address", addr[1], "--namespace", addr[2]}
		code := cli.Report(&errOut, cli.Run(ctx, args, nil, &out, cli.Config{}), false)
		require.Equal(t, 0, code, "starter run:\n%s%s", out.String(), errOut.String())
		return out.String()
	}
	out := run()
	require.Contains(t, out, "state succeeded")
	require.Contains(t, out, "first-hour:1:1:create_refund")
	require.Equal(t, 1, shop.count(), "one refund in the API's store")

	// The API commits the next refund and drops the connection before
	// answering; the plan runs again under "turn": 2, as the README says.
	shop.dropNext()
	turn2 := strings.Replace(refundJSON, `"turn": 1`, `"turn": 2`, 1)
	require.NotEqual(t, refundJSON, turn2, "the README's plan has \"turn\": 1")
	require.NoError(t, os.WriteFile("refund.json", []byte(turn2), 0o600))
	out = run()
	require.Contains(t, out, "state succeeded")
	require.Equal(t, 2, shop.count(), "one refund per turn in the API's store")
	require.Equal(t, 2, shop.posts(), "the lost answer was settled by the lookup, not by a second POST")
	require.Positive(t, shop.lookups("first-hour:2:1:create_refund"), "the worker looked the key up")
}

// shopAPI is the README's API: POST /refunds with an Idempotency-Key header
// and GET /refunds/by-key/{key}, numeric ids, its own store in memory.
type shopAPI struct {
	mu      sync.Mutex
	byKey   map[string]map[string]any
	nPosts  int
	looked  map[string]int
	drop    bool
	handler *http.ServeMux
}

func newShopAPI() *shopAPI {
	s := &shopAPI{byKey: map[string]map[string]any{}, looked: map[string]int{}, handler: http.NewServeMux()}
	s.handler.HandleFunc("POST /refunds", s.create)
	s.handler.HandleFunc("GET /refunds/by-key/{key}", s.find)
	return s
}

func (s *shopAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *shopAPI) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"code":"bad_json"}}`, http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.nPosts++
	refund := map[string]any{"id": len(s.byKey) + 10, "order_id": body["order_id"], "amount_minor": body["amount_minor"], "key": key}
	s.byKey[key] = refund
	drop := s.drop
	s.drop = false
	s.mu.Unlock()
	if drop { // committed; the answer is lost
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(refund)
}

func (s *shopAPI) find(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	s.mu.Lock()
	s.looked[key]++
	refund, ok := s.byKey[key]
	s.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":{"code":"not_found"}}`, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(refund)
}

func (s *shopAPI) dropNext() { s.mu.Lock(); s.drop = true; s.mu.Unlock() }
func (s *shopAPI) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byKey)
}
func (s *shopAPI) posts() int { s.mu.Lock(); defer s.mu.Unlock(); return s.nPosts }
func (s *shopAPI) lookups(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.looked[key]
}

// sectionOf is the README's text from heading to the next heading of the
// same level.
func sectionOf(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading+"\n")
	require.GreaterOrEqual(t, i, 0, "README has no %q", heading)
	rest := md[i+1+len(heading):]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// blockAfter is the first fenced block opened by fence after the text
// marker.
func blockAfter(t *testing.T, section, marker, fence string) string {
	t.Helper()
	i := strings.Index(section, marker)
	require.GreaterOrEqual(t, i, 0, "the section has no %q", marker)
	rest := section[i:]
	j := strings.Index(rest, fence+"\n")
	require.GreaterOrEqual(t, j, 0, "no %s block after %q", fence, marker)
	rest = rest[j+len(fence)+1:]
	k := strings.Index(rest, "```")
	require.GreaterOrEqual(t, k, 0)
	return rest[:k]
}

package mcptool_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/mcptool"
	"github.com/agentsaga/agentsaga/tool"
)

// An HTTP upstream that answers a call with a redirect to another host (two
// servers, two ports) after it acted: the other host never receives the
// upstream's bearer token, the call is UNKNOWN (a POST never follows a
// redirect), the lookup finds the entry, and the upstream holds one.
func TestRedirectingHTTPUpstreamKeepsItsTokenAndIsUnknown(t *testing.T) {
	var (
		mu    sync.Mutex
		seen  []http.Header
		paths []string
	)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		http.Error(w, "not an MCP server", http.StatusMethodNotAllowed)
	}))
	t.Cleanup(other.Close)
	l := &ledgerServer{entries: map[string]string{}}
	inner := l.handler(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Location", other.URL+"/stream")
			w.WriteHeader(http.StatusTemporaryRedirect)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"name":"add"`)) {
			inner.ServeHTTP(httptest.NewRecorder(), r) // the upstream acts
			w.Header().Set("Location", other.URL+"/receipt")
			w.WriteHeader(http.StatusFound)
			return
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s := &mcptool.Server{Name: "ledger", URL: hs.URL, Header: http.Header{"Authorization": {"Bearer s3cret-token"}}}
	t.Cleanup(func() { _ = s.Close() })
	add := mcptool.New(&mcptool.Tool{
		Def: tool.Spec{Name: "ledger_add", Class: tool.NonIdempotentWrite, Timeout: 10 * time.Second,
			Args: strArgs("text"), Match: []tool.MatchField{{Arg: "text", Result: "text"}}},
		Server: s, Upstream: "add", KeyArg: "idempotency_key", ExternalID: "/key",
		Lookup: &mcptool.Lookup{Upstream: "find", Args: template(t, `{"key":"{key}"}`),
			Found: mcptool.Test{NonEmpty: "/entries"}, Absent: mcptool.Test{Empty: "/entries"}, Authoritative: true,
			Item: "/entries/0", ExternalID: "/key"},
	})
	ctx := context.Background()
	const key = "s:1:1:ledger_add"
	_, err := add.Execute(ctx, call(key, map[string]string{"text": "one"}))
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("a call answered 302: %v (kind %s), want unknown", err, tool.KindOf(err))
	}
	look, err := add.(tool.CallReconciler).ReconcileCall(ctx, call(key, map[string]string{"text": "one"}))
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != key {
		t.Fatalf("reconcile after the redirect: %+v, %v; want found %s", look, err, key)
	}
	if n := l.posts.Load(); n != 1 {
		t.Errorf("%d add requests reached the upstream, want 1", n)
	}
	l.mu.Lock()
	if len(l.entries) != 1 {
		t.Errorf("the upstream holds %v, want one entry", l.entries)
	}
	l.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	for i, h := range seen {
		for name, vs := range h {
			if strings.EqualFold(name, "Authorization") || strings.EqualFold(name, "Referer") || strings.Contains(strings.Join(vs, " "), "s3cret") {
				t.Errorf("request %d at the other host carried %s: %q", i, name, vs)
			}
		}
	}
	for _, p := range paths {
		if strings.HasSuffix(p, "/receipt") {
			t.Errorf("the call's redirect was followed: the other host got %s", p)
		}
	}
	// The standalone event stream's GETs are redirected too; how many
	// arrived before the end depends on the SDK's timing, and each one is
	// checked above.
	t.Logf("the other host got %q", paths)
}

package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/sandbox"
)

// adminSend calls the admin API as sandbox.Client does: token and JSON.
func adminSend(t *testing.T, sb *sandbox.Sandbox, method, path string, body any) reply {
	t.Helper()
	return raw(t, method, sb.BaseURL()+path, body, map[string]string{sandbox.TokenHeader: sb.Token(), "Content-Type": "application/json"})
}

// raw does one request with the given headers.
func raw(t *testing.T, method, url string, body any, hdr map[string]string) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(b)}
	_ = json.Unmarshal(b, &r.body)
	return r
}

// The admin API needs the token; a web page of another origin reaches
// nothing; a text/plain POST (what a form can send) is refused.
func TestAdminNeedsTokenAndRefusesCrossOrigin(t *testing.T) {
	sb, c := start(t, sandbox.Options{})
	fault := map[string]any{"op": "refunds.create", "fault": "http_503", "count": 1}
	jsonCT := "application/json"

	for name, hdr := range map[string]map[string]string{
		"no token":    {"Content-Type": jsonCT},
		"wrong token": {"Content-Type": jsonCT, sandbox.TokenHeader: sb.Token() + "x"},
		"empty":       {"Content-Type": jsonCT, "Authorization": "Bearer "},
	} {
		if r := raw(t, "POST", sb.BaseURL()+"/admin/faults", fault, hdr); r.status != http.StatusUnauthorized {
			t.Errorf("%s: POST /admin/faults answered %d %s, want 401", name, r.status, r.raw)
		}
		if r := raw(t, "GET", sb.BaseURL()+"/admin/effects", nil, hdr); r.status != http.StatusUnauthorized {
			t.Errorf("%s: GET /admin/effects answered %d, want 401", name, r.status)
		}
	}
	if r := raw(t, "POST", sb.BaseURL()+"/admin/faults", fault, map[string]string{"Content-Type": "text/plain", sandbox.TokenHeader: sb.Token()}); r.status != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain POST with the token: %d %s, want 415", r.status, r.raw)
	}
	evil := map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", sandbox.TokenHeader: sb.Token()}
	if r := raw(t, "POST", sb.BaseURL()+"/admin/faults", fault, evil); r.status != http.StatusForbidden {
		t.Errorf("cross-origin admin POST: %d %s, want 403", r.status, r.raw)
	}
	if r := raw(t, "POST", sb.URLs().Payments+"/v1/refunds", refund, map[string]string{"Origin": "http://evil.example", "Idempotency-Key": "xo-1"}); r.status != http.StatusForbidden {
		t.Errorf("cross-origin provider POST: %d %s, want 403", r.status, r.raw)
	}
	if calls, err := c.Calls(context.Background()); err != nil || len(calls) != 0 {
		t.Errorf("a refused request reached an operation: %v %v", calls, err)
	}
	if faults, err := c.Faults(context.Background()); err != nil || len(faults) != 0 {
		t.Errorf("a refused request added a fault: %v %v", faults, err)
	}

	// The right token works in either header, and from the sandbox's own origin.
	if r := raw(t, "POST", sb.BaseURL()+"/admin/faults", fault, map[string]string{"Content-Type": jsonCT, "Authorization": "Bearer " + sb.Token(), "Origin": sb.BaseURL()}); r.status != http.StatusCreated {
		t.Errorf("bearer token, same origin: %d %s", r.status, r.raw)
	}
	if r := adminSend(t, sb, "DELETE", "/admin/faults", nil); r.status != http.StatusNoContent {
		t.Errorf("DELETE with X-Admin-Token: %d %s", r.status, r.raw)
	}
	// Providers need no token (the tools call them).
	if r := send(t, "GET", sb.URLs().Orders+"/v1/orders/ord_1001", "", nil); r.status != http.StatusOK {
		t.Errorf("provider GET without token: %d %s", r.status, r.raw)
	}
}

// A client finds the token of an in-process sandbox, else the env variable.
func TestClientFindsTheToken(t *testing.T) {
	sb, _ := start(t, sandbox.Options{Token: "fixed-token-for-this-test-000001"})
	if sb.Token() != "fixed-token-for-this-test-000001" {
		t.Fatalf("Token() = %q, want Options.Token", sb.Token())
	}
	ctx := context.Background()
	if _, err := sandbox.NewClient(sb.BaseURL()+"/", nil).Calls(ctx); err != nil {
		t.Errorf("NewClient of an in-process sandbox: %v", err)
	}
	_, err := sandbox.NewClient(sb.BaseURL(), nil).WithToken("nope").Calls(ctx)
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), sb.Token()) {
		t.Errorf("a wrong token: %v, want a 401 that does not show the token", err)
	}
	if s := sandbox.NewClient(sb.BaseURL(), nil).String(); strings.Contains(s, sb.Token()) {
		t.Errorf("the client prints its token: %s", s)
	}
	if sandbox.EnvToken != config.EnvSandboxToken {
		t.Errorf("sandbox.EnvToken %s != config.EnvSandboxToken %s", sandbox.EnvToken, config.EnvSandboxToken)
	}
	path := filepath.Join(t.TempDir(), sandbox.TokenFileName)
	if err := sandbox.WriteTokenFile(path, sb.Token()); err != nil {
		t.Fatal(err)
	}
	if got, err := sandbox.ReadTokenFile(path); err != nil || got != sb.Token() {
		t.Errorf("token file round trip: %q %v", got, err)
	}
}

// A client of a sandbox in another process sends $AGENTSAGA_SANDBOX_TOKEN.
func TestClientSendsTheEnvToken(t *testing.T) {
	var got string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get(sandbox.TokenHeader)
		_, _ = w.Write([]byte("{}"))
	}))
	defer hs.Close()
	t.Setenv(sandbox.EnvToken, "from-the-environment-0000000001")
	if _, err := sandbox.NewClient(hs.URL, nil).Calls(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got != "from-the-environment-0000000001" {
		t.Errorf("the client sent token %q, want the env value", got)
	}
}

// DNS rebinding: a request on the loopback listener naming a foreign Host
// (a web page whose name was rebound to 127.0.0.1, sending no Origin on a
// simple request) is refused on every route, and no refund is made.
func TestForeignHostIsRefused(t *testing.T) {
	sb, c := start(t, sandbox.Options{})
	r := raw(t, "POST", sb.URLs().Payments+"/v1/refunds", refund, map[string]string{"Host": "rebound.evil.example:8090", "Idempotency-Key": "rebind-1", "Content-Type": "application/json"})
	if r.status != http.StatusForbidden {
		t.Fatalf("refund with a foreign Host: %d %s, want 403", r.status, r.raw)
	}
	if e := effects(t, c, sandbox.Payments); len(e) != 0 {
		t.Fatalf("effects after a refused request: %+v", e)
	}
	if r := raw(t, "GET", sb.BaseURL()+"/admin/effects", nil, map[string]string{"Host": "rebound.evil.example", sandbox.TokenHeader: sb.Token()}); r.status != http.StatusForbidden {
		t.Fatalf("admin with a foreign Host: %d, want 403", r.status)
	}
	if r := raw(t, "POST", sb.URLs().Payments+"/v1/refunds", refund, map[string]string{"Host": "localhost", "Idempotency-Key": "rebind-2", "Content-Type": "application/json"}); r.status != http.StatusCreated {
		t.Fatalf("refund naming localhost: %d %s, want 201", r.status, r.raw)
	}
}

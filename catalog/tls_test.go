package catalog_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
)

// A system's ca_file is the CA its TLS connections trust: with it the call
// goes through, without it the handshake fails before anything is sent.
func TestSystemCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"x1"}`))
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		caLine string
		kind   tool.Kind
	}{
		{"    ca_file: " + ca + "\n", ""},
		{"", tool.KindNotSent},
	} {
		src := "version: 1\nsystems:\n  - name: a\n    base_url: " + srv.URL + "\n" + tc.caLine +
			"tools: [{name: t, description: T., system: a, class: READ, timeout: 5s, request: {path: /x}, response: {external_id: /id}}]\n"
		c, err := catalog.Parse("t.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Tools()[0].Execute(context.Background(), tool.Call{Key: "k", Args: []byte(`{}`), Attempt: 1})
		if tc.kind == "" && (err != nil || res.ExternalID != "x1") {
			t.Errorf("with the CA: %+v, %v", res, err)
		}
		if tc.kind != "" && tool.KindOf(err) != tc.kind {
			t.Errorf("without the CA: %v, want %s", err, tc.kind)
		}
	}
	_, err := catalog.Parse("t.yaml", []byte("version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\", ca_file: /nonexistent/ca.pem}]\n"))
	wantProblems(t, err, "systems[0].ca_file: cannot be read")
}

type recordingTransport struct{ got *http.Request }

func (r *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.got = req
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// Options.Transport is the base transport of every system (for a
// worker's instrumented transport): it gets each request with the system's
// headers set, the path's values path-escaped and the query's escaped.
func TestOptionsTransport(t *testing.T) {
	rt := &recordingTransport{}
	c, err := catalog.ParseWith(catalog.Options{Transport: rt, Getenv: func(string) (string, bool) { return "tok", true }}, catalog.Source{Name: "t.yaml", Data: []byte(`version: 1
systems: [{name: a, base_url: "https://a.example.com/api", headers: [{name: Authorization, prefix: "Bearer ", from_env: T}]}]
tools: [{name: t, description: T., system: a, class: READ, timeout: 5s, args: [{name: q, type: string}, {name: id, type: string, required: true}], request: {path: "/x/{id}", query: {q: "{q}", fixed: "1"}}}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tools()[0].Execute(context.Background(), tool.Call{Key: "k", Args: []byte(`{"q":"a b&c","id":"o/1 ?"}`)}); err != nil {
		t.Fatal(err)
	}
	if rt.got == nil || rt.got.Header.Get("Authorization") != "Bearer tok" || rt.got.URL.String() != "https://a.example.com/api/x/o%2F1%20%3F?fixed=1&q=a+b%26c" {
		t.Fatalf("request %v", rt.got)
	}
}

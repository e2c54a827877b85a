package catalog_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
)

// A bodiless keyed write whose answer is lost on a reused connection is
// sent once and is UNKNOWN: net/http would otherwise resend it on its own
// (it carries an Idempotency-Key and no body), hiding the lost answer and
// making a second effect at a provider that ignores the key.
func TestBodilessKeyedWriteIsNeverResentByTheTransport(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/warm" {
			w.Write([]byte(`{}`))
			return
		}
		hits.Add(1)
		if r.Header.Get("Idempotency-Key") == "" || r.ContentLength != 0 {
			t.Errorf("request without its key or with a body: %v %d", r.Header, r.ContentLength)
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer srv.Close()
	c, err := catalog.Parse("t.yaml", []byte(`version: 1
systems: [{name: a, base_url: "`+srv.URL+`"}]
tools:
  - {name: warm, description: W., system: a, class: READ, timeout: 5s, request: {path: /warm}}
  - name: capture
    description: Capture.
    system: a
    class: NON_IDEMPOTENT_WRITE
    timeout: 5s
    no_lookup: true
    request: {method: POST, path: /capture, key: {header: Idempotency-Key}}
    response: {external_id: /id}
`))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	warm, _ := reg.Tool("warm")
	capture, _ := reg.Tool("capture")
	// The first request leaves an idle keep-alive connection, which the
	// write then reuses.
	if _, err := warm.Execute(context.Background(), tool.Call{Key: "k0", Args: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	_, err = capture.Execute(context.Background(), tool.Call{Key: "s:1:1:capture", Args: []byte(`{}`), Attempt: 1})
	if k := tool.KindOf(err); k != tool.KindUnknown {
		t.Errorf("lost answer: kind %s (%v), want unknown", k, err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the provider received the write %d times, want 1", n)
	}
}

package mcptool_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/mcptool"
	"github.com/agentsaga/agentsaga/tool"
)

// ledgerServer is a streamable HTTP MCP server (the go-sdk's) that keeps
// entries by idempotency_key, as some servers do, and counts the tools/call
// requests that reach it.
type ledgerServer struct {
	mu      sync.Mutex
	entries map[string]string // key -> text
	posts   atomic.Int32      // tools/call of "add" received
	drop    atomic.Int32      // answers of "add" to lose
}

func (l *ledgerServer) handler(t *testing.T) http.Handler {
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "1"}, nil)
	type addIn struct {
		Text string `json:"text"`
		Key  string `json:"idempotency_key"`
	}
	type entry struct {
		Key  string `json:"key"`
		Text string `json:"text"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add"}, func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, entry, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.entries[in.Key]; !ok {
			l.entries[in.Key] = in.Text
		}
		return nil, entry{Key: in.Key, Text: l.entries[in.Key]}, nil
	})
	type findIn struct {
		Key string `json:"key"`
	}
	type found struct {
		Entries []entry `json:"entries"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find"}, func(_ context.Context, _ *mcp.CallToolRequest, in findIn) (*mcp.CallToolResult, found, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		out := found{Entries: []entry{}}
		if v, ok := l.entries[in.Key]; ok {
			out.Entries = append(out.Entries, entry{Key: in.Key, Text: v})
		}
		return nil, out, nil
	})
	inner := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret-token" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"tools/call"`)) && bytes.Contains(body, []byte(`"name":"add"`)) {
			l.posts.Add(1)
			if l.drop.Load() > 0 {
				l.drop.Add(-1)
				// The server acts; the answer is lost with the connection.
				inner.ServeHTTP(httptest.NewRecorder(), r)
				panic(http.ErrAbortHandler)
			}
		}
		inner.ServeHTTP(w, r)
	})
}

func TestStreamableHTTPUpstreamKeyArgAndLostAnswer(t *testing.T) {
	l := &ledgerServer{entries: map[string]string{}}
	hs := httptest.NewServer(l.handler(t))
	t.Cleanup(hs.Close)
	s := &mcptool.Server{Name: "ledger", URL: hs.URL, Header: http.Header{"Authorization": {"Bearer s3cret-token"}}}
	t.Cleanup(func() { _ = s.Close() })
	if strings.Contains(s.String()+s.GoString(), "s3cret") {
		t.Fatal("the server prints its header")
	}
	add := mcptool.New(&mcptool.Tool{
		Def: tool.Spec{Name: "ledger_add", Class: tool.NonIdempotentWrite, Timeout: 10 * time.Second,
			Args: strArgs("text"), Match: []tool.MatchField{{Arg: "text", Result: "text"}}},
		Server: s, Upstream: "add", KeyArg: "idempotency_key", ExternalID: "/key",
		Lookup: &mcptool.Lookup{Upstream: "find", Args: template(t, `{"key":"{key}"}`),
			Found: mcptool.Test{NonEmpty: "/entries"}, Absent: mcptool.Test{Empty: "/entries"}, Authoritative: true,
			Item: "/entries/0", ExternalID: "/key"},
	})
	ctx := context.Background()
	res, err := add.Execute(ctx, call("s:1:1:ledger_add", map[string]string{"text": "one"}))
	if err != nil || res.ExternalID != "s:1:1:ledger_add" {
		t.Fatalf("add: %+v, %v", res, err)
	}
	l.drop.Store(1)
	_, err = add.Execute(ctx, call("s:1:2:ledger_add", map[string]string{"text": "two"}))
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("lost answer over HTTP: %v (kind %s), want unknown", err, tool.KindOf(err))
	}
	if n := l.posts.Load(); n != 2 {
		t.Fatalf("%d add requests reached the server, want 2: the client must not resend on its own", n)
	}
	look, err := add.(tool.CallReconciler).ReconcileCall(ctx, call("s:1:2:ledger_add", map[string]string{"text": "two"}))
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != "s:1:2:ledger_add" {
		t.Fatalf("reconcile: %+v, %v", look, err)
	}
	if d := tool.Differences(add, call("", map[string]string{"text": "other"}).Args, look.Result); len(d) == 0 {
		t.Fatal("an entry made with other text matched")
	}
	// The retry the engine would send after an unknown outcome, with the
	// same key: the server keeps one entry.
	if _, err := add.Execute(ctx, call("s:1:2:ledger_add", map[string]string{"text": "two"})); err != nil {
		t.Fatal(err)
	}
	absent, err := add.(tool.CallReconciler).ReconcileCall(ctx, call("s:1:3:ledger_add", map[string]string{"text": "x"}))
	if err != nil || absent.Status != tool.Absent || !absent.Authoritative {
		t.Fatalf("a key never sent: %+v, %v", absent, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) != 2 {
		t.Fatalf("the server holds %v, want two entries", l.entries)
	}
}

func TestUnauthorizedHTTPUpstreamIsNotSent(t *testing.T) {
	l := &ledgerServer{entries: map[string]string{}}
	hs := httptest.NewServer(l.handler(t))
	t.Cleanup(hs.Close)
	s := &mcptool.Server{Name: "ledger", URL: hs.URL}
	t.Cleanup(func() { _ = s.Close() })
	add := mcptool.New(&mcptool.Tool{Def: tool.Spec{Name: "ledger_add", Class: tool.NonIdempotentWrite, Timeout: 10 * time.Second, NoLookup: true},
		Server: s, Upstream: "add", KeyArg: "idempotency_key"})
	_, err := add.Execute(context.Background(), call("s:1:1:ledger_add", map[string]string{"text": "one"}))
	if tool.KindOf(err) != tool.KindNotSent || l.posts.Load() != 0 {
		t.Fatalf("refused at initialize: %v (kind %s, %d adds), want not_sent and none", err, tool.KindOf(err), l.posts.Load())
	}
}

func TestTemplateKeepsTypesAndDropsAbsentValues(t *testing.T) {
	tp := template(t, `{"n":"{count}","s":"id-{count}","opt":"{note}","list":["{note}","{key}"],"fixed":true}`)
	if got := strings.Join(tp.Refs(), ","); got != "count,key,note" {
		t.Fatalf("refs %q", got)
	}
	// Rendered through a tool that passes the template to an upstream is
	// covered by the server tests; here the refusals.
	for _, bad := range []string{`{"a":"{"}`, `{"a":"}"}`, `{"a":"{}"}`, `{"a":"{x y}"}`} {
		var v any
		_ = json.Unmarshal([]byte(bad), &v)
		if _, err := mcptool.NewTemplate(v); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// bigServer answers "add" and "find" with structured content padded to
// pad bytes, the id first.
func bigServer(t *testing.T, pad int) *mcptool.Server {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
		Key  string `json:"idempotency_key"`
	}
	type entry struct {
		Key string `json:"key"`
		Pad string `json:"pad"`
	}
	type found struct {
		Pad     string  `json:"pad"`
		Entries []entry `json:"entries"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "add"}, func(_ context.Context, _ *mcp.CallToolRequest, in in) (*mcp.CallToolResult, entry, error) {
		return nil, entry{Key: in.Key, Pad: strings.Repeat("p", pad)}, nil
	})
	type findIn struct {
		Key string `json:"key,omitempty"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "find"}, func(_ context.Context, _ *mcp.CallToolRequest, _ findIn) (*mcp.CallToolResult, found, error) {
		// Nothing is found, but the answer is too long to keep whole: cut,
		// its "entries" would read as missing, so empty, so absent.
		return nil, found{Pad: strings.Repeat("q", pad), Entries: []entry{}}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: true}))
	t.Cleanup(hs.Close)
	srv := &mcptool.Server{Name: "big", URL: hs.URL}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// Only a whole answer is evidence: a lookup answer over MaxAnswerBytes is
// UNKNOWN (never absent, whatever its cut part holds), and a write's answer
// over it keeps the effect's id when the id can be read from the answer, and
// is UNKNOWN when what the engine needs of it (the id, Match's fields) is not
// in the part it keeps.
func TestAnswerOverTheLimitIsNoEvidence(t *testing.T) {
	srv := bigServer(t, mcptool.MaxAnswerBytes+10)
	lookup := &mcptool.Lookup{Upstream: "find", Found: mcptool.Test{NonEmpty: "/entries"}, Absent: mcptool.Test{Empty: "/entries"},
		Authoritative: true, Item: "/entries/0", ExternalID: "/key"}
	mk := func(match []tool.MatchField, id string) tool.Tool {
		return mcptool.New(&mcptool.Tool{Def: tool.Spec{Name: "big_add", Class: tool.NonIdempotentWrite, Timeout: 10 * time.Second,
			Args: strArgs("text"), Match: match}, Server: srv, Upstream: "add", KeyArg: "idempotency_key", ExternalID: id, Lookup: lookup})
	}
	ctx := context.Background()
	look, err := mk(nil, "/key").(tool.CallReconciler).ReconcileCall(ctx, call("s:1:1:big_add", map[string]string{"text": "a"}))
	if err != nil || look.Status != tool.Unknown {
		t.Fatalf("an oversized lookup answer: %+v, %v; want unknown (never absent)", look, err)
	}
	res, err := mk(nil, "/key").Execute(ctx, call("s:1:2:big_add", map[string]string{"text": "a"}))
	if err != nil || res.ExternalID != "s:1:2:big_add" {
		t.Fatalf("an oversized write answer whose id is readable: %+v, %v; want its id", res, err)
	}
	if len(res.Data) > mcptool.MaxAnswerBytes {
		t.Fatalf("the kept answer is %d bytes, over the limit", len(res.Data))
	}
	_, err = mk(nil, "/missing").Execute(ctx, call("s:1:3:big_add", map[string]string{"text": "a"}))
	if tool.KindOf(err) != tool.KindUnknown || tool.CodeOf(err) != mcptool.CodeTooLarge {
		t.Fatalf("an oversized write answer without its id: %v (kind %s); want unknown %s", err, tool.KindOf(err), mcptool.CodeTooLarge)
	}
	_, err = mk([]tool.MatchField{{Arg: "text", Result: "text"}}, "/key").Execute(ctx, call("s:1:4:big_add", map[string]string{"text": "a"}))
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("an oversized write answer that Match must read: %v (kind %s); want unknown", err, tool.KindOf(err))
	}
}

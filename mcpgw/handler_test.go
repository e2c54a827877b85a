package mcpgw_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/mcpgw"
)

func newServer(t *testing.T) *mcp.Server {
	t.Helper()
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	srv, err := mcpgw.New(newFake(), reg, mcpgw.Options{Calls: memory(t)})
	require.NoError(t, err)
	return srv
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// post sends an initialize (or body) to url with the headers and returns
// the status, body and session id.
func post(t *testing.T, url, body string, header map[string]string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b), res.Header.Get("Mcp-Session-Id")
}

func count(s *mcp.Server) int {
	n := 0
	for range s.Sessions() {
		n++
	}
	return n
}

func TestMCPHandlerChecksOrigin(t *testing.T) {
	h, err := mcpgw.NewHandler(newServer(t), mcpgw.HandlerOptions{AllowedOrigins: []string{"https://app.example"}})
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	for origin, want := range map[string]int{
		"":                                 http.StatusOK, // not a browser
		"http://localhost:3000":            http.StatusOK,
		"http://127.0.0.1:5173":            http.StatusOK,
		"https://app.example":              http.StatusOK,
		"http://evil.example":              http.StatusForbidden,
		"null":                             http.StatusForbidden,
		"https://app.example.evil.example": http.StatusForbidden,
	} {
		hdr := map[string]string{}
		if origin != "" {
			hdr["Origin"] = origin
		}
		code, body, _ := post(t, hs.URL, initialize, hdr)
		require.Equal(t, want, code, "Origin %q: %s", origin, body)
		if want == http.StatusForbidden {
			require.Contains(t, body, "Origin")
		}
	}
	_, err = mcpgw.NewHandler(newServer(t), mcpgw.HandlerOptions{AllowedOrigins: []string{"app.example"}})
	require.ErrorContains(t, err, "scheme://host")
}

// 2,000 initialize calls: the sessions held stay at the limit (the rest
// are refused, saying why), so memory stays bounded.
func TestMCPHandlerBoundsSessions(t *testing.T) {
	srv := newServer(t)
	h, err := mcpgw.NewHandler(srv, mcpgw.HandlerOptions{MaxSessions: 200, SessionIdle: time.Hour})
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ok, refused := 0, 0
	for i := range 2000 {
		code, body, id := post(t, hs.URL, initialize, nil)
		switch code {
		case http.StatusOK:
			require.NotEmpty(t, id, "initialize %d", i)
			ok++
		case http.StatusServiceUnavailable:
			require.Contains(t, body, "200 MCP sessions, its limit")
			refused++
		default:
			t.Fatalf("initialize %d: %d %s", i, code, body)
		}
		require.LessOrEqual(t, count(srv), 200)
	}
	require.Equal(t, 200, ok)
	require.Equal(t, 1800, refused)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	require.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(64<<20), "the heap grew by %d bytes", int64(after.HeapAlloc)-int64(before.HeapAlloc))
}

// Sessions without a request for SessionIdle end; then new ones are let
// in.
func TestMCPHandlerEndsIdleSessions(t *testing.T) {
	srv := newServer(t)
	h, err := mcpgw.NewHandler(srv, mcpgw.HandlerOptions{MaxSessions: 5, SessionIdle: 200 * time.Millisecond})
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	for range 5 {
		code, body, _ := post(t, hs.URL, initialize, nil)
		require.Equal(t, http.StatusOK, code, body)
	}
	require.Eventually(t, func() bool { return count(srv) == 0 }, 30*time.Second, 20*time.Millisecond, "idle sessions end")
	code, body, _ := post(t, hs.URL, initialize, nil)
	require.Equal(t, http.StatusOK, code, body)
}

// A line that is not JSON-RPC on stdio is answered with a parse error, and
// the gateway goes on serving the next line.
func TestMCPStdioAnswersAMalformedLineAndGoesOn(t *testing.T) {
	srv := newServer(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, mcpgw.NewStdioTransport(inR, outW)) }()
	lines := bufio.NewScanner(outR)
	next := func() map[string]any {
		t.Helper()
		require.True(t, lines.Scan(), "an answer")
		var m map[string]any
		require.NoError(t, json.Unmarshal(lines.Bytes(), &m), lines.Text())
		return m
	}
	send := func(s string) {
		_, err := fmt.Fprintln(inW, s)
		require.NoError(t, err)
	}
	send(initialize)
	require.Contains(t, next(), "result")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"` + "\x00not json")
	e := next()
	require.Contains(t, e, "error", "a parse error: %v", e)
	require.EqualValues(t, -32700, e["error"].(map[string]any)["code"])
	send(`{"id":4,"hello":"world"}`)
	e = next()
	require.EqualValues(t, -32600, e["error"].(map[string]any)["code"], "JSON but not JSON-RPC: %v", e)
	require.EqualValues(t, 4, e["id"])
	send(`{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}`)
	r := next()
	require.EqualValues(t, 3, r["id"])
	require.Contains(t, r, "result", "the gateway goes on after a malformed line")
	require.NoError(t, inW.Close())
	cancel()
	<-done
}

// Streams carry event ids, so a client that lost one can resume it with
// Last-Event-ID; EventStoreBytes < 0 turns that off.
func TestMCPHandlerStreamsAreResumable(t *testing.T) {
	for bytes, ids := range map[int]bool{0: true, -1: false} {
		h, err := mcpgw.NewHandler(newServer(t), mcpgw.HandlerOptions{EventStoreBytes: bytes})
		require.NoError(t, err)
		hs := httptest.NewServer(h)
		code, body, _ := post(t, hs.URL, initialize, nil)
		hs.Close()
		require.Equal(t, http.StatusOK, code, body)
		require.Equal(t, ids, strings.Contains(body, "\nid: "), "event store bytes %d: %q", bytes, body)
	}
}

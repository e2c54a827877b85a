package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// The console listens on loopback only.
func TestConsoleRefusesANonLoopbackListen(t *testing.T) {
	for _, bad := range []string{"0.0.0.0:8235", ":8235", "10.0.0.1:80", "example.com:80", "[::]:1", "localhost.evil.example:1", "127.0.0.1"} {
		_, err := loopbackListen(bad)
		require.Error(t, err, bad)
	}
	for in, want := range map[string]string{"127.0.0.1:0": "127.0.0.1:0", "localhost:8235": "127.0.0.1:8235", "[::1]:9": "[::1]:9", "127.0.0.2:1": "127.0.0.2:1"} {
		got, err := loopbackListen(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	err := run(t.Context(), []string{"console", "--listen", "0.0.0.0:8235", "--by", "alice"}, nil, io.Discard)
	require.ErrorContains(t, err, "is not a loopback address")
}

// consoleServer is a console over no Temporal (only its checks run) behind
// an httptest server, and a client that keeps no cookies.
func consoleServer(t *testing.T) (*console, *httptest.Server) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	c, err := newConsole(nil, "alice", true, nil, time.Second, func(id string) string { return "ui/" + id }, srv.Listener.Addr().String())
	require.NoError(t, err)
	srv.Config.Handler = c
	srv.Start()
	t.Cleanup(srv.Close)
	return c, srv
}

func consoleDo(t *testing.T, srv *httptest.Server, method, path string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return resp, string(b)
}

// The token, from the printed URL's fragment, is exchanged once (POST
// /api/session) for a session secret the page sends in a header; no cookie
// is ever set or read, so another local port gets nothing (issue 35); every
// request is checked for Host and Origin; every API call for the session;
// POSTs for Origin and JSON; every answer carries the strict CSP.
func TestConsoleSecurity(t *testing.T) {
	c, srv := consoleServer(t)
	token := c.token

	resp, page := consoleDo(t, srv, "GET", "/", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the page shell is public: it holds nothing secret")
	require.Empty(t, resp.Cookies(), "no cookie, ever")
	require.NotContains(t, page, token)
	require.Equal(t, consoleCSP, resp.Header.Get("Content-Security-Policy"))
	require.NotContains(t, consoleCSP, "unsafe-inline")
	require.NotContains(t, page, "<script>", "no inline script")
	require.NotContains(t, page, "style=", "no inline style")
	require.NotContains(t, page, "http", "no asset from anywhere else")
	resp, js := consoleDo(t, srv, "GET", "/static/console.js", nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, js, "innerHTML", "values go in as text")
	resp, _ = consoleDo(t, srv, "GET", "/api/questions", nil, "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no session, no questions")

	post := map[string]string{"Origin": srv.URL, "Content-Type": "application/json"}
	tokenBody := `{"token":"` + token + `"}`
	resp, body := consoleDo(t, srv, "POST", "/api/session", map[string]string{"Host": "evil.example:8235", "Origin": "http://evil.example:8235", "Content-Type": "application/json"}, tokenBody)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a rebound name is refused: %s", body)
	require.Contains(t, body, "is not this console's address")
	require.Equal(t, token, c.token, "a refused request does not spend the token")
	for name, hdr := range map[string]map[string]string{
		"cross-site":              {"Origin": srv.URL, "Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
		"same-site, another port": {"Origin": srv.URL, "Content-Type": "application/json", "Sec-Fetch-Site": "same-site"},
		"other origin":            {"Origin": "http://127.0.0.1:1", "Content-Type": "application/json"},
		"no origin":               {"Content-Type": "application/json"},
	} {
		resp, body := consoleDo(t, srv, "POST", "/api/session", hdr, tokenBody)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, body)
	}
	require.Equal(t, token, c.token)
	resp, body = consoleDo(t, srv, "POST", "/api/session", post, tokenBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Empty(t, resp.Cookies(), "the session is no cookie")
	var got struct{ Session string }
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.NotEmpty(t, got.Session)
	require.NotEqual(t, token, got.Session)
	resp, _ = consoleDo(t, srv, "POST", "/api/session", post, tokenBody)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "the token works once")

	resp, _ = consoleDo(t, srv, "GET", "/api/questions", map[string]string{"Cookie": "agentsaga_console=" + got.Session}, "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "the secret as a cookie is not a session")

	with := func(extra map[string]string) map[string]string {
		m := map[string]string{sessionHeader: got.Session, "Origin": srv.URL, "Content-Type": "application/json"}
		for k, v := range extra {
			if v == "" {
				delete(m, k)
			} else {
				m[k] = v
			}
		}
		return m
	}
	good := `{"workflow_id":"agent-plan:s:1","question_id":"q1-step1-approval","action":"approve","reason":"ok","card_digest":"` + workflows.CardDigest(workflows.Card{}) + `"}`
	for name, hdr := range map[string]map[string]string{
		"no origin":     with(map[string]string{"Origin": ""}),
		"other origin":  with(map[string]string{"Origin": "http://evil.example"}),
		"form post":     with(map[string]string{"Content-Type": "application/x-www-form-urlencoded"}),
		"no session":    with(map[string]string{sessionHeader: ""}),
		"wrong session": with(map[string]string{sessionHeader: strings.Repeat("x", len(got.Session))}),
		"cross-site":    with(map[string]string{"Sec-Fetch-Site": "cross-site"}),
		"foreign host":  with(map[string]string{"Host": "evil.example"}),
	} {
		resp, body := consoleDo(t, srv, "POST", "/api/decide", hdr, good)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, body)
	}
	resp, body = consoleDo(t, srv, "POST", "/api/decide", with(nil), strings.Replace(good, `"ok"`, `"`+strings.Repeat("r", workflows.MaxNoteLen+1)+`"`, 1))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "reason is 2001 bytes, the limit is 2000")
	resp, body = consoleDo(t, srv, "POST", "/api/decide", with(nil), strings.Repeat(" ", maxConsoleBody+1))
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, body)
	require.Contains(t, body, "limit of 16384 bytes")
}

// Every field of a decide body is bounded and named when it is not.
func TestParseDecideRequestNamesFieldAndLimit(t *testing.T) {
	digest := workflows.CardDigest(workflows.Card{})
	base := func(field, v string) string {
		m := map[string]string{"workflow_id": "agent-plan:s:1", "question_id": "q1-step1-approval", "action": "approve", "reason": "ok", "card_digest": digest}
		m[field] = v
		b, _ := json.Marshal(m)
		return string(b)
	}
	for field, want := range map[string][2]string{
		"workflow_id": {strings.Repeat("w", 513), "workflow_id is 513 bytes, the limit is 512"},
		"question_id": {strings.Repeat("q", 129), "question_id is 129 bytes, the limit is 128"},
		"reason":      {"", "reason is required (at most 2000 bytes)"},
		"card_digest": {"sha256:nothex", "card_digest is 13 bytes"},
		"action":      {"delete", `action "delete" is not one of`},
	} {
		_, err := parseDecideRequest([]byte(base(field, want[0])))
		require.ErrorContains(t, err, want[1], field)
		var fe *fieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, field, fe.field)
	}
	_, err := parseDecideRequest([]byte(`{"action":"approve","action":"reject"}`))
	require.Error(t, err, "a key twice")
	_, err = parseDecideRequest([]byte(`{"workflow_id":"a","extra":1}`))
	require.ErrorContains(t, err, "unknown field")
	_, err = parseDecideRequest([]byte(base("reason", "fine")))
	require.NoError(t, err)
}

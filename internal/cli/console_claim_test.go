package cli

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
)

// claimConsole is a console of operator on the ledger st (no Temporal: the
// claim API needs none), with its session spent; it returns the server and
// the headers of a good POST.
func claimConsole(t *testing.T, operator string, st ledger.Store) (*console, *httptest.Server, map[string]string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	c, err := newConsole(nil, operator, true, []string{"approve", "resolve"}, 5*time.Second, func(id string) string { return "ui/" + id }, srv.Listener.Addr().String())
	require.NoError(t, err)
	c.ledger = st
	srv.Config.Handler = c
	srv.Start()
	t.Cleanup(srv.Close)
	post := map[string]string{"Origin": srv.URL, "Content-Type": "application/json"}
	resp, body := consoleDo(t, srv, "POST", "/api/session", post, `{"token":"`+c.token+`"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var s struct{ Session string }
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	post[sessionHeader] = s.Session
	return c, srv, post
}

// Two consoles (two processes' worth: two handles) on one ledger: alice
// claims a question, bob sees who holds it and since when and cannot take
// or release it; bob's decision would carry whose claim it overrides;
// alice releases it and bob may claim it. The API sits behind the session
// and Origin checks and names the field of a bad request.
func TestConsoleClaimsAreShared(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "ledger.db")
	open := func() ledger.Store {
		st, err := ledgersqlite.Open(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	_, asrv, apost := claimConsole(t, "alice", open())
	bob, bsrv, bpost := claimConsole(t, "bob", open())
	q := `{"workflow_id":"agent-plan:s:1","question_id":"q1-step1-approval"}`

	before := time.Now().UTC()
	resp, body := consoleDo(t, asrv, "POST", "/api/claim", apost, q)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var got struct {
		Claim *consoleClaim
		Error string
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, "alice", got.Claim.By)
	require.True(t, got.Claim.Mine)
	require.WithinDuration(t, got.Claim.Since.Add(defaultClaimFor), got.Claim.Until, time.Millisecond, "a claim lasts 15 minutes by default")
	require.False(t, got.Claim.Since.Before(before.Truncate(time.Microsecond)))

	resp, body = consoleDo(t, bsrv, "POST", "/api/claim", bpost, q)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	got.Claim = nil
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, "alice", got.Claim.By, "bob is told who holds it")
	require.False(t, got.Claim.Mine)
	require.Contains(t, got.Error, "alice holds question q1-step1-approval")
	resp, body = consoleDo(t, bsrv, "POST", "/api/release", bpost, q)
	require.Equal(t, http.StatusConflict, resp.StatusCode, "bob cannot release alice's claim: %s", body)

	claims, err := bob.claims(ctx)
	require.NoError(t, err)
	held := claims["agent-plan:s:1\x00q1-step1-approval"]
	require.Equal(t, "alice", held.By, "bob's console sees alice's claim")
	note := overrideNote(held, "bob")
	require.Contains(t, note, "overrides the claim of alice, held since "+held.Since.UTC().Format("2006-01-02 15:04 UTC"))
	require.Empty(t, overrideNote(held, "alice"), "deciding one's own claim overrides nothing")

	resp, body = consoleDo(t, asrv, "POST", "/api/release", apost, q)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	resp, body = consoleDo(t, bsrv, "POST", "/api/claim", bpost, q)
	require.Equal(t, http.StatusOK, resp.StatusCode, "released: bob may claim it: %s", body)

	// Behind the same checks as a decision.
	noSession := map[string]string{"Origin": bsrv.URL, "Content-Type": "application/json"}
	resp, _ = consoleDo(t, bsrv, "POST", "/api/claim", noSession, q)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no session")
	foreign := map[string]string{sessionHeader: bpost[sessionHeader], "Origin": "http://evil.example", "Content-Type": "application/json"}
	resp, _ = consoleDo(t, bsrv, "POST", "/api/release", foreign, q)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin")

	for body, field := range map[string]string{
		`{"workflow_id":"","question_id":"q"}`:                                 "workflow_id",
		`{"workflow_id":"w","question_id":"` + strings.Repeat("q", 129) + `"}`: "question_id",
		`{"workflow_id":"w","question_id":"q","by":"mallory"}`:                 "body",
		`{"workflow_id":"w","question_id":"q"}{}`:                              "body",
		strings.Repeat(" ", maxClaimBody+1):                                    "body",
	} {
		resp, out := consoleDo(t, bsrv, "POST", "/api/claim", bpost, body)
		require.NotEqual(t, http.StatusOK, resp.StatusCode, out)
		var e struct{ Field string }
		require.NoError(t, json.Unmarshal([]byte(out), &e), out)
		require.Equal(t, field, e.Field, out)
	}
}

// A console without a ledger says claims need one.
func TestConsoleClaimNeedsTheLedger(t *testing.T) {
	_, srv, post := claimConsole(t, "alice", nil)
	resp, body := consoleDo(t, srv, "POST", "/api/claim", post, `{"workflow_id":"w","question_id":"q"}`)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "start it with --ledger")
}

// FuzzParseClaimRequest: whatever the body, a claim request is refused
// naming a field or accepted within its limits.
func FuzzParseClaimRequest(f *testing.F) {
	for _, s := range []string{`{"workflow_id":"w","question_id":"q"}`, `{"workflow_id":"w","workflow_id":"x","question_id":"q"}`,
		`{"workflow_id":"\u0000","question_id":"q"}`, `[]`, `null`, `{"workflow_id":1}`, "\xff", `{"question_id":"` + strings.Repeat("q", 200) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseClaimRequest(b)
		if err != nil {
			var fe *fieldError
			if !errors.As(err, &fe) || fe.field == "" {
				t.Fatalf("error names no field: %v", err)
			}
			return
		}
		if r.WorkflowID == "" || len(r.WorkflowID) > maxConsoleWorkflowID || r.QuestionID == "" || len(r.QuestionID) > 128 {
			t.Fatalf("accepted out of bounds: %q", r)
		}
	})
}

package activities_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
)

// secretPath is the credential part of a Slack-style webhook URL.
const secretPath = "/services/T0AAAAAAA/B0BBBBBBB/xoxSecretWebhookToken123"

// A Slack-style webhook URL is itself the secret: whether the receiver is
// down or answers with an error that echoes its URL, Notify's error (the
// activity failure in history, the worker's log line) and the ledger row
// hold no part of its path or query.
func TestNotifyErrorsNeverShowTheWebhookURL(t *testing.T) {
	down, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	downURL := "http://" + down.Addr().String() + secretPath + "?token=q-secret-987"
	require.NoError(t, down.Close())
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"code":"no_service","message":"no webhook at `+r.URL.String()+` (http://`+r.Host+r.URL.String()+`)"}}`, http.StatusNotFound)
	}))
	t.Cleanup(echo.Close)

	for name, u := range map[string]string{"down": downURL, "echoing": echo.URL + secretPath + "?token=q-secret-987"} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			var logs bytes.Buffer
			var suite testsuite.WorkflowTestSuite
			suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			te := suite.NewTestActivityEnvironment()
			e.a.Webhook = &activities.Webhook{URL: u, Secret: []byte("webhook-secret-0123456789"), Client: &http.Client{Timeout: 5 * time.Second}}
			te.RegisterActivity(e.a)
			req := activities.NotifyRequest{Key: "agent-plan:s:1:q1-step1-approval:opened", Event: activities.NotifyOpened,
				WorkflowID: "agent-plan:s:1", QuestionID: "q1-step1-approval", Kind: "approval", Step: 1, Summary: "refund"}
			_, err := te.ExecuteActivity(e.a.Notify, req)
			require.Error(t, err)
			for _, leak := range []string{"xoxSecretWebhookToken123", "B0BBBBBBB", "q-secret-987"} {
				require.NotContains(t, err.Error(), leak, "the activity error")
				require.NotContains(t, logs.String(), leak, "the worker's log")
			}
			require.Contains(t, err.Error(), "did not acknowledge", "the error still says what happened")
			op, gerr := e.store.Get(context.Background(), req.Key)
			require.NoError(t, gerr)
			require.Equal(t, ledger.Unknown, op.Status, "not acknowledged: posted again")
			require.NotContains(t, op.ErrorCode+op.Summary, "xoxSecret")
		})
	}
}

func FuzzMaskURLsIn(f *testing.F) {
	for _, seed := range []struct{ s, u string }{
		{`Post "https://hooks.slack.com/services/T0/B0/xyzSECRET": dial tcp: refused`, "https://hooks.slack.com/services/T0/B0/xyzSECRET"},
		{`Post "https://HOOKS.slack.com/services/T0/B0/xyzSECRET?x=1"`, "https://hooks.slack.com/services/T0/B0/xyzSECRET"},
		{`no webhook at /services/T0/B0/xyzSECRET`, "https://hooks.slack.com/services/T0/B0/xyzSECRET"},
		{`Post "https://outlook.office.com/webhook/a%2Fb/IncomingWebhook/c?sig=abc123def"`, "https://outlook.office.com/webhook/a%2Fb/IncomingWebhook/c?sig=abc123def"},
		{`https://user:pw@hooks.example/p/secretpathvalue`, "https://hooks.example/p/secretpathvalue"},
		{"", "::not a url"},
	} {
		f.Add(seed.s, seed.u)
	}
	f.Fuzz(func(t *testing.T, s, u string) {
		out := activities.MaskURLsIn(s+" "+u+" "+s, u)
		p, err := parseURL(u)
		if err != nil || p.Host == "" || len(p.Path) < 8 || strings.Contains(p.Host, p.Path) || strings.Contains("/…", p.Path) {
			return
		}
		if strings.Contains(out, p.Path) {
			t.Fatalf("MaskURLsIn(%q, %q) = %q: the path %q is still there", s, u, out, p.Path)
		}
	})
}

func parseURL(u string) (*url.URL, error) { return url.Parse(u) }

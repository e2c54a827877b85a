package integration

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demo"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
)

// TestDemo runs the demo's four stories on a fresh stack: the report must be
// OK, and every count it reports must equal what the providers' stores and
// call counters say when read here, independently of the demo.
func TestDemo(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	st, err := devstack.Start(ctx, devstack.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	rep, err := demo.Run(ctx, st)
	require.NoError(t, err)
	require.Len(t, rep.Stories, 4)
	for _, s := range rep.Stories {
		for _, c := range s.Checks {
			require.True(t, c.OK, "story %s (%s): %s: want %s, got %s", s.Name, s.Title, c.What, c.Want, c.Got)
		}
	}
	require.True(t, rep.OK)

	sb := sandbox.NewClient(st.SandboxURL, nil)
	effects := allEffects(ctx, t, sb)
	calls := allCalls(ctx, t, sb)
	mail, err := sb.Effects(ctx, sandbox.Mail)
	require.NoError(t, err)
	want := map[string]int{"refund": 1, "invoice": 1, "invoice_storno": 1, "payment": 1, "payment_reversal": 1, "ticket": 0}
	for kind, n := range want {
		require.Equal(t, n, countKind(effects, kind), "%s rows in the providers' stores", kind)
	}
	require.Len(t, mail, 1, "emails in the mail relay's store")
	require.Equal(t, 1, calls["refunds.create"])
	require.Equal(t, 1, calls["mail.send"])

	// Every count the report claims, against the stores read here.
	independent := map[string]int{
		"refunds in the acquirer's store":            countKind(effects, "refund"),
		"refund requests sent":                       calls["refunds.create"],
		"emails in the mail relay's store":           len(mail),
		"email requests sent (never resent blindly)": calls["mail.send"],
	}
	for _, kind := range []string{"invoice", "invoice_storno", "payment", "payment_reversal", "ticket"} {
		independent[kind+" rows in the providers' stores"] = countKind(effects, kind)
	}
	matched := map[string]bool{}
	for _, s := range rep.Stories {
		for _, c := range s.Checks {
			n, ok := independent[c.What]
			if !ok {
				continue
			}
			require.Equal(t, strconv.Itoa(n), c.Got, "story %s reports %q as %s; the stores say %d", s.Name, c.What, c.Got, n)
			matched[c.What] = true
		}
	}
	for what := range independent {
		require.True(t, matched[what], "the report has no check %q", what)
	}

	// The external ids the report shows are the providers' rows.
	ids := map[string]string{}
	for _, e := range effects {
		ids[e.ID] = e.Kind
	}
	refund := rep.Stories[0]
	require.Len(t, refund.Steps, 3)
	require.Equal(t, "refund", ids[refund.Steps[2].ExternalID], "story a's refund id %q is a refund in the acquirer's store", refund.Steps[2].ExternalID)
	email := rep.Stories[2]
	require.Len(t, email.Steps, 2)
	require.Equal(t, mail[0].ID, email.Steps[1].ExternalID, "story c's resolved email is the relay's message")
}

// TestUIAnswers checks that the Temporal Web UI of the running stack serves
// its start page.
func TestUIAnswers(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, 30*time.Second)
	require.NotEmpty(t, st.Server.UIURL(), "the stack runs a Web UI")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.Server.UIURL()+"/", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s/: %s", st.Server.UIURL(), body)
	require.NotEmpty(t, body)
}

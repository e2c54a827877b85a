package integration

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/agentsaga/agentsaga/workflows"
)

// A plan started by name from any Temporal client is checked as strictly as
// the CLI checks it: a key named twice (in args or at the top level), bytes
// that are not UTF-8, or a workflow ID that is not agent-plan:{session}:{turn}
// of its own content end the plan at once with InvalidPlan naming the
// problem; a plan sent without the codec keys to a worker that has them ends
// naming how to configure the client. Nothing reaches the providers.
func TestOutsideClientPlansAreCheckedStrictly(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, 2*time.Minute)
	before := allCalls(ctx, t, st.Sandbox.Client())
	refund := func(order string) string {
		return `{"tool":"apply_refund","args":{"order_id":"` + order + `","amount_minor":1200,"currency":"EUR","reason":"r"}}`
	}
	plain, err := client.Dial(client.Options{HostPort: st.Server.FrontendAddr(), Namespace: st.Server.Namespace(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	require.NoError(t, err)
	defer plain.Close()
	for _, c := range []struct {
		name, id, raw string
		via           client.Client
		want          string
	}{
		{"duplicate top-level key", "agent-plan:it-strict-o08:1",
			`{"session_id":"it-strict-o08","session_id":"it-strict-o08x","turn":1,"steps":[` + refund("ord_it_strict_1") + `]}`, st.Client, "session_id: appears twice"},
		{"duplicate arg key", "agent-plan:it-strict-dup:1",
			`{"session_id":"it-strict-dup","turn":1,"steps":[{"tool":"apply_refund","args":{"order_id":"ord_it_strict_2","order_id":"ord_it_strict_3","amount_minor":1200,"currency":"EUR","reason":"r"}}]}`,
			st.Client, "steps[1].args.order_id: appears twice"},
		{"invalid UTF-8", "agent-plan:it-strict-utf8:1",
			"{\"session_id\":\"it-strict-utf8\",\"turn\":1,\"steps\":[{\"tool\":\"apply_refund\",\"args\":{\"order_id\":\"ord_it_strict_4\",\"amount_minor\":1200,\"currency\":\"EUR\",\"reason\":\"r\xff\"}}]}",
			st.Client, "not valid UTF-8"},
		{"foreign workflow ID", "not-an-agent-plan-id",
			`{"session_id":"victim23","turn":1,"steps":[` + refund("ord_it_strict_5") + `]}`, st.Client,
			`runs only under the workflow ID "agent-plan:victim23:1", not "not-an-agent-plan-id"`},
		{"plaintext to a worker with keys", "agent-plan:it-strict-plain:1",
			`{"session_id":"it-strict-plain","turn":1,"steps":[` + refund("ord_it_strict_6") + `]}`, plain, "not encrypted"},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, err := c.via.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: c.id, TaskQueue: workflows.TaskQueue}, workflows.WorkflowName, json.RawMessage(c.raw))
			require.NoError(t, err)
			var out workflows.Status
			err = run.Get(ctx, &out)
			require.Error(t, err)
			require.Contains(t, err.Error(), "InvalidPlan")
			if c.via == plain {
				// A client without the keys reads the type only; the
				// message is encrypted: read it with the keys.
				require.Contains(t, err.Error(), workflows.ErrPlaintextRefused)
				err = st.Client.GetWorkflow(ctx, c.id, "").Get(ctx, &out)
			}
			require.Contains(t, err.Error(), c.want)
		})
	}
	require.Empty(t, callsDelta(before, allCalls(ctx, t, st.Sandbox.Client())), "nothing reached the providers")
	// The victim's own plan still runs under its keys.
	v, err := st.Plans.Start(ctx, newPlan("victim23", step(t, "create_ticket", map[string]any{"subject": "victim23's own plan"})))
	require.NoError(t, err)
	final, err := st.Plans.Wait(ctx, v.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "victim's plan: %s", final.Error)
}

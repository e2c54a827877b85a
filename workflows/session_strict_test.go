package workflows_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/workflows"
)

// sendRaw sends the bytes of a turn as they are, under updateID.
func sendRaw(env *testsuite.TestWorkflowEnvironment, updateID string, raw string) *turnAnswer {
	a := &turnAnswer{}
	env.UpdateWorkflow(workflows.UpdateTurn, updateID, &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { a.rejected, a.done = err, true },
		OnComplete: func(v any, err error) { a.done, a.err = true, err },
	}, json.RawMessage(raw))
	return a
}

// A turn is checked as strictly as the CLI checks a plan, and runs only
// under the Update ID of its own number: a key named twice, an unknown
// field, bytes a worker with codec keys got in the clear, or an Update ID
// that is not {session}:{turn} are refused, naming the problem, and nothing
// reaches the provider.
func TestSessionTurnsAreCheckedStrictly(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	answers := map[string]*turnAnswer{}
	at := func(d time.Duration, f func()) { env.RegisterDelayedCallback(f, d) }
	charge := `{"tool":"charge","args":{"order_id":"o1","amount_minor":100}}`
	at(time.Second, func() {
		answers["duplicate arg key"] = sendRaw(env, "st1:1", `{"turn":1,"steps":[{"tool":"charge","args":{"order_id":"o1","order_id":"o2","amount_minor":100}}]}`)
		answers["duplicate top key"] = sendRaw(env, "st1:2", `{"turn":2,"turn":2,"steps":[`+charge+`]}`)
		answers["unknown field"] = sendRaw(env, "st1:3", `{"turn":3,"model_key":"x","steps":[`+charge+`]}`)
		answers["plaintext"] = sendRaw(env, "st1:4", `{"agentsaga/refused":"plaintext payload"}`)
		answers["foreign update id"] = sendRaw(env, "tss:10", `{"turn":99,"steps":[`+charge+`]}`)
	})
	at(2*time.Second, func() { endSession(env, "succeeded") })
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflows.SessionWorkflowID("st1")})
	env.ExecuteWorkflow(workflows.SessionWorkflowName, workflows.SessionStart{SessionID: "st1"})
	require.NoError(t, env.GetWorkflowError())
	for name, want := range map[string]string{
		"duplicate arg key": "steps[1].args.order_id",
		"duplicate top key": "turn",
		"unknown field":     "model_key",
		"plaintext":         "not encrypted",
		"foreign update id": `turn 99 was sent with Update ID "tss:10"; a turn runs only under the Update ID "st1:99"`,
	} {
		a := answers[name]
		require.True(t, a.done, name)
		require.Error(t, a.rejected, "%s: refused by the validator", name)
		require.Contains(t, a.rejected.Error(), want, name)
	}
	require.Zero(t, h.p.count("charge"), "nothing reached the provider")
}

// A session runs only under its own workflow ID: one started under another
// ID fails at once, naming both, and takes no key.
func TestSessionRunsOnlyUnderItsOwnID(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "not-a-session-id"})
	env.ExecuteWorkflow(workflows.SessionWorkflowName, workflows.SessionStart{SessionID: "victim23"})
	err := env.GetWorkflowError()
	require.Error(t, err)
	require.Contains(t, err.Error(), `session "victim23" runs only under the workflow ID "agent-session:victim23", not "not-a-session-id"`)
}

package workflows_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// A decision is read as strictly as a plan: a key named twice (the check
// would see one value, history both), an unknown field, bytes a worker with
// codec keys got in the clear, or an oversize payload are refused before any
// field is looked at, as Updates and as signals; the proper decision then
// applies.
func TestDecisionsAreReadStrictly(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("r-strict", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var refusedUpdates []*answer
	var between workflows.Status
	bad := []string{
		fmt.Sprintf(`{"step":1,"fingerprint":%q,"by":"bob","by":"alice","approved":true}`, fp),
		fmt.Sprintf(`{"step":1,"fingerprint":%q,"by":"bob","approved":true,"model_key":"x"}`, fp),
		`{"agentsaga/refused":"plaintext payload"}`,
		fmt.Sprintf(`{"step":1,"fingerprint":%q,"by":"bob","approved":true,"reason":%q}`, fp, strings.Repeat("a", workflows.MaxDecisionBytes)),
	}
	env.RegisterDelayedCallback(func() {
		for i, raw := range bad {
			refusedUpdates = append(refusedUpdates, update(env, workflows.UpdateApprove, fmt.Sprintf("bad-%d", i), json.RawMessage(raw)))
			env.SignalWorkflow(workflows.SignalApprove, json.RawMessage(raw))
		}
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		update(env, workflows.UpdateApprove, "ok", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
	}, 2*time.Minute)
	st := run(t, env, p)
	for i, want := range []string{"appears twice", "unknown field", "not encrypted", "the limit is 16384"} {
		a := refusedUpdates[i]
		require.Error(t, a.rejected, "update %d", i)
		require.Contains(t, a.rejected.Error(), want, "update %d", i)
	}
	require.Equal(t, len(bad), between.RefusedSignals, "each bad signal refused and counted")
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("refund"), "one refund, after the proper approval")
}

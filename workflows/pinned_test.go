package workflows_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// redeployed is a tool whose spec a deploy changed; its calls go to the
// same provider.
type redeployed struct {
	*fakeTool
	spec tool.Spec
}

func (r redeployed) Spec() tool.Spec { return r.spec }

// A plan started when its refund needed no approval is not changed by a
// deploy that lowered the threshold (and dropped the guard) while it ran:
// the activity takes approval, guard, class and lease from the specs the
// plan pinned, so the refund runs without a question and without a
// no_permit refusal, under the pinned guard.
func TestLoweredThresholdLeavesRunningPlansAlone(t *testing.T) {
	h := newHarness(t)
	started := h.reg.Specs() // what the plan pins
	var live []tool.Tool
	for _, tl := range tools(h.p) {
		if ft, ok := tl.(*fakeTool); ok && ft.spec.Name == "refund" {
			sp := ft.spec
			sp.Approval = &tool.Approval{Field: "amount_minor", AboveMinor: 100} // 1.00
			sp.Guard = nil
			tl = redeployed{fakeTool: ft, spec: sp}
		}
		live = append(live, tl)
	}
	reg, err := tool.NewRegistry(live...)
	require.NoError(t, err)
	env := h.NewTestWorkflowEnvironment()
	h.acts = &activities.Activities{Tools: reg, Ledger: h.ledger}
	sagaworker.Register(env, &workflows.Saga{Specs: started}, h.acts)

	st := run(t, env, newPlan("pin1", step("read_order", "o1", 1), step("refund", "o1", 20000)))
	require.Equal(t, workflows.SagaSucceeded, st.State, "%s", st.Error)
	require.Empty(t, st.Questions)
	for _, s := range st.Steps {
		require.Empty(t, s.Decisions, "nobody was asked")
	}
	require.Equal(t, 1, h.p.count("refund"))
	op, err := h.ledger.Get(context.Background(), "pin1:1:2:refund")
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, `refund-per-order:["o1"]`, op.GuardScope, "the pinned guard was claimed")
}

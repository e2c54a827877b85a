package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// A second decision that arrives while the first is applied but not yet
// acted on (two signals in one workflow task: the listener takes both
// before the step wakes) is refused, never applied over the first. The
// testsuite runs each signal in a task of its own, so the pending state is
// set up here directly.
func TestDecisionWhileTheFirstIsPendingIsRefused(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	for _, validating := range []bool{true, false} {
		env := ts.NewTestWorkflowEnvironment()
		env.RegisterWorkflowWithOptions(func(ctx workflow.Context) ([]string, error) {
			r := newRunState(&Saga{}, tool.Specs{}, plan.Plan{SessionID: "s", Turn: 1})
			r.st.Steps = []StepStatus{{Step: 1, Fingerprint: "fp"}}
			q := &question{Question: Question{ID: "q1-step1-approval", Kind: QuestionApproval, Step: 1, Fingerprint: "fp", OpenedAt: workflow.Now(ctx).Add(-time.Minute)}}
			q.decision = &Decision{Kind: SignalApprove, QuestionID: q.ID, By: "alice", Approved: true, At: workflow.Now(ctx)}
			r.qs[1] = q
			var out []string
			for _, a := range []ApproveSignal{
				{Step: 1, QuestionID: q.ID, Fingerprint: "fp", By: "bob", Approved: false},
				{Step: 1, Fingerprint: "fp", By: "bob", Approved: false},
			} {
				got, _, err := r.approveTarget(ctx, a, validating)
				switch {
				case err != nil:
					out = append(out, err.Error())
				case got != nil:
					out = append(out, "applied")
				default:
					out = append(out, "duplicate")
				}
			}
			out = append(out, q.decision.By)
			return out, nil
		}, workflow.RegisterOptions{Name: "pending"})
		env.ExecuteWorkflow("pending")
		require.NoError(t, env.GetWorkflowError())
		var out []string
		require.NoError(t, env.GetWorkflowResult(&out))
		require.Len(t, out, 3)
		for _, o := range out[:2] {
			require.Contains(t, o, "already answered by alice", "validating %v", validating)
		}
		require.Equal(t, "alice", out[2])
	}
}

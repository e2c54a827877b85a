package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/workflows"
)

// Item 14 of issue 16, on the real server: a double-clicked approval is one
// Update ID, so Temporal answers the second click with the first one's
// result; the client reports it as applied false (the README's promise),
// and the refund is made once. A decision of another person for the closed
// question is refused.
func TestDoubleClickedApprovalReportsNotApplied(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-double-click",
		step(t, "apply_refund", map[string]any{"order_id": "ord_it_double_1", "amount_minor": 60000, "currency": "EUR", "reason": "double click"}),
		step(t, "apply_refund", map[string]any{"order_id": "ord_it_double_2", "amount_minor": 60000, "currency": "EUR", "reason": "double click"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	q := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval)).Questions[0]
	click := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "bob", Approved: true, Reason: "ok"}
	first, err := st.Plans.Approve(ctx, run.WorkflowID, click)
	require.NoError(t, err)
	require.True(t, first.Applied)
	q2 := waitStatus(ctx, t, st, run.WorkflowID, questionOn(2, workflows.QuestionApproval)).Questions[0]

	second, err := st.Plans.Approve(ctx, run.WorkflowID, click)
	require.NoError(t, err)
	require.False(t, second.Applied, "the second click: %+v", second)
	require.Contains(t, second.Message, "already applied")
	_, err = st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "carol", Approved: false})
	require.ErrorContains(t, err, "already answered by bob")

	_, err = st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 2, QuestionID: q2.ID, Fingerprint: q2.Fingerprint, By: "bob", Approved: true})
	require.NoError(t, err)
	final, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.Equal(t, 1, countKind(effectsUnder(ctx, t, sb, p.Key(1)), "refund"), "one refund for the double click")
}

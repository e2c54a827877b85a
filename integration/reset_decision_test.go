package integration

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// firstWorkflowTask returns the id of the first WorkflowTaskCompleted event
// of a run: `temporal workflow reset --type FirstWorkflowTask` resets there.
func firstWorkflowTask(ctx context.Context, t *testing.T, st *devstack.Stack, id, runID string) int64 {
	t.Helper()
	it := st.Client.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return e.GetEventId()
		}
	}
	require.FailNow(t, "no completed workflow task in "+id)
	return 0
}

// Item 9 of issue 16, on a real server with an operators file: alice signs
// an approval of q1-step1-approval and it is applied; the plan is reset to
// its first workflow task; the new run asks the same question id with the
// same fingerprint, and her payload sent again unchanged (as an Update and
// as a signal) is refused: the signature named the first run. The refund
// happened once, at the provider.
func TestSignedApprovalDoesNotReplayAfterAReset(t *testing.T) {
	alice, err := operators.NewKey("alice", rand.Reader)
	require.NoError(t, err)
	file, err := json.Marshal(operators.File{Operators: []operators.Operator{alice.Entry()}})
	require.NoError(t, err)
	ring, err := operators.Parse(file)
	require.NoError(t, err)
	ctx := testContext(t, 3*time.Minute)
	st, err := devstack.Start(ctx, devstack.Options{Operators: ring, DataDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	sb := sandbox.NewClient(st.SandboxURL, nil)
	signer := sagaclient.New(st.Client, sagaclient.Options{Key: alice})

	p := newPlan("it-reset-signed", step(t, "apply_refund", map[string]any{"order_id": "ord_it_reset_signed", "amount_minor": 60000, "currency": "EUR", "reason": "reset test"}))
	run1, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	s1 := waitStatus(ctx, t, st, run1.WorkflowID, questionOn(1, workflows.QuestionApproval))
	require.Equal(t, run1.RunID, s1.RunID, "the status names its run")
	q1 := s1.Questions[0]
	signed := workflows.ApproveSignal{Step: 1, QuestionID: q1.ID, RunID: s1.RunID, Fingerprint: q1.Fingerprint, By: "alice", Approved: true, Reason: "checked", SentAt: time.Now().UTC()}
	signed.Signature = operators.Sign(alice, signed.SigningBytes(run1.WorkflowID))
	require.NoError(t, rawUpdate(ctx, st.Client, run1.WorkflowID, workflows.UpdateApprove, signed))
	done, err := st.Plans.WaitRun(ctx, run1)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, done.State, "plan error: %s", done.Error)
	refunds := countKind(effectsUnder(ctx, t, sb, p.Key(1)), "refund")
	require.Equal(t, 1, refunds)

	reset, err := st.Client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 st.Server.Namespace(),
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: run1.WorkflowID, RunId: run1.RunID},
		Reason:                    "issue 16 item 9",
		WorkflowTaskFinishEventId: firstWorkflowTask(ctx, t, st, run1.WorkflowID, run1.RunID),
		RequestId:                 uuid.NewString(),
	})
	require.NoError(t, err)
	run2 := reset.GetRunId()
	require.NotEqual(t, run1.RunID, run2)
	s2 := waitStatus(ctx, t, st, run1.WorkflowID, func(s workflows.Status) bool {
		return s.RunID == run2 && questionOn(1, workflows.QuestionApproval)(s)
	})
	require.Equal(t, q1.ID, s2.Questions[0].ID, "the new run asks the same question id")
	require.Equal(t, q1.Fingerprint, s2.Questions[0].Fingerprint, "with the same fingerprint")

	err = rawUpdate(ctx, st.Client, run1.WorkflowID, workflows.UpdateApprove, signed)
	require.ErrorContains(t, err, "is not this plan's run")
	require.NoError(t, st.Client.SignalWorkflow(ctx, run1.WorkflowID, "", workflows.SignalApprove, signed))
	s3 := waitStatus(ctx, t, st, run1.WorkflowID, func(s workflows.Status) bool { return s.RefusedSignals >= 1 })
	require.Equal(t, workflows.SagaWaitingApproval, s3.State, "the replayed signature changed nothing")
	last := s3.Steps[0].Decisions[len(s3.Steps[0].Decisions)-1]
	require.Contains(t, last.Refused, "is not this plan's run")

	// Signed anew for the run that asks, it is applied; the refund is not
	// made twice (the ledger holds the key).
	res, err := signer.Approve(ctx, run1.WorkflowID, workflows.ApproveSignal{Step: 1, Approved: true, Reason: "checked again"})
	require.NoError(t, err)
	require.True(t, res.Applied)
	require.True(t, res.Verified)
	_, err = st.Plans.Wait(ctx, run1.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, refunds, countKind(effectsUnder(ctx, t, sb, p.Key(1)), "refund"), "one refund at the provider")

}

package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// A reset to the first workflow task (`temporal workflow reset --type
// FirstWorkflowTask`) of a plan that compensated replays to the same end
// state: the new run ends compensated, and the providers see no call: one
// payment, one reversal.
func TestResetOfACompensatedPlanEndsCompensatedWithoutCalls(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-reset-compensated",
		step(t, "create_payment", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1001", "amount_minor": 4300, "currency": "EUR", "payment_method": "tok_visa"}),
		step(t, "create_ticket", map[string]any{"subject": "reset test", "order_id": "ord_1001"}))
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "tickets.create", Fault: sandbox.Reject, Count: 1, Status: 403, Code: "crm_queue_closed", Message: "closed"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	first, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaCompensated, first.State, "error: %s", first.Error)
	before := allCalls(ctx, t, sb)

	// The first WorkflowTaskCompleted event, as the CLI's FirstWorkflowTask
	// picks it.
	var firstTask int64
	it := st.Client.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() && firstTask == 0 {
		ev, err := it.Next()
		require.NoError(t, err)
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			firstTask = ev.GetEventId()
		}
	}
	require.NotZero(t, firstTask)
	resp, err := st.Client.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 st.Server.Namespace(),
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: run.WorkflowID, RunId: run.RunID},
		Reason:                    "integration test: reset to the first workflow task",
		WorkflowTaskFinishEventId: firstTask,
		RequestId:                 "it-reset-compensated-1",
	})
	require.NoError(t, err)
	require.NotEqual(t, run.RunID, resp.GetRunId())
	reset := run
	reset.RunID = resp.GetRunId()
	again, err := st.Plans.WaitRun(ctx, reset)
	require.NoError(t, err)

	require.Equal(t, workflows.SagaCompensated, again.State, "error: %s", again.Error)
	require.Contains(t, again.Error, "compensated by an earlier run")
	require.Equal(t, ledger.Compensated, again.Steps[0].State)
	require.Empty(t, callsDelta(before, allCalls(ctx, t, sb)), "the reset run called no provider")
	payments := effectsUnder(ctx, t, sb, p.Key(1))
	require.Len(t, payments, 1, "one payment under the key")
	reversals := 0
	for _, e := range allEffects(ctx, t, sb) {
		if e.Reverses == payments[0].ID {
			reversals++
		}
	}
	require.Equal(t, 1, reversals, "the payment was reversed once")
	op, err := st.Ledger.Get(ctx, p.Key(1))
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, op.Status)
}

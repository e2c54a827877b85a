package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// A session on the real server: turns by Update-with-Start, a lost response
// reconciled, a turn resent after the session continued as new answered
// from the session without a call, and `end failed` reversing its writes,
// all counted at the providers.
func TestSessionAcrossContinueAsNew(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	const session = "it-session-1"
	opts := sagaclient.SessionOptions{TurnsPerRun: 2}
	pay := step(t, "create_payment", map[string]any{"customer_id": "cus_ana", "order_id": "ord_it_session", "amount_minor": 1200, "currency": "EUR", "payment_method": "tok_visa"})
	invoice := step(t, "create_invoice", map[string]any{"customer_id": "cus_ana", "order_id": "ord_it_session", "amount_minor": 1200, "currency": "EUR", "description": "session test"})
	read := step(t, "query_order", map[string]any{"order_id": "ord_1001"})
	turn := func(n int, steps ...plan.Step) workflows.TurnResult {
		res, err := st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: n, RequestID: "it-session", Steps: steps}, opts)
		require.NoError(t, err)
		return res
	}
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.CommitThenDrop, Count: 1}))
	callsBefore := allCalls(ctx, t, sb)

	t1 := turn(1, read, pay)
	require.Equal(t, workflows.TurnSucceeded, t1.State, "%+v", t1)
	require.Equal(t, session+":1:2:create_payment", t1.Steps[1].Key)
	t2 := turn(2, invoice)
	require.Equal(t, workflows.TurnSucceeded, t2.State)
	t3 := turn(3, read) // the session continued as new after two turns
	require.Equal(t, workflows.TurnSucceeded, t3.State)
	d, err := st.Client.DescribeWorkflowExecution(ctx, workflows.SessionWorkflowID(session), "")
	require.NoError(t, err)
	require.NotEqual(t, d.GetWorkflowExecutionInfo().GetFirstRunId(), d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "the session continued as new")

	// Turn 4 needs an approval: the turn returns its open question with
	// the card; once approved, sending the turn again returns its result.
	refund := step(t, "apply_refund", map[string]any{"order_id": "ord_it_session_refund", "amount_minor": 60000, "currency": "EUR", "reason": "session test"})
	t4 := turn(4, refund)
	require.Equal(t, workflows.TurnWaiting, t4.State, "%+v", t4)
	require.NotNil(t, t4.Question)
	require.Equal(t, "600.00 EUR", t4.Question.Card.Amount)
	_, err = st.Plans.Approve(ctx, workflows.SessionWorkflowID(session), workflows.ApproveSignal{
		Step: t4.Question.Step, QuestionID: t4.Question.ID, Fingerprint: t4.Question.Fingerprint, By: "bob", Approved: true})
	require.NoError(t, err)
	var t4done workflows.TurnResult
	require.Eventually(t, func() bool {
		t4done = turn(4, refund)
		return t4done.State != workflows.TurnWaiting && t4done.State != workflows.TurnRunning
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, workflows.TurnSucceeded, t4done.State, "%+v", t4done)
	t5 := turn(5, read)
	require.Equal(t, workflows.TurnSucceeded, t5.State)

	again := turn(1, read, pay)
	require.Equal(t, t1.Steps[1].ExternalID, again.Steps[1].ExternalID, "turn 1 resent after continue-as-new returns its first result")
	_, err = st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: 2, Steps: []plan.Step{read}}, opts)
	require.ErrorContains(t, err, "conflict", "another payload under turn 2 is refused")

	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 1, delta["payments.create"], "one payment request: the lost response was reconciled, the resend called nothing; calls %v", delta)
	require.Equal(t, 1, delta["invoices.create"])
	require.Equal(t, 1, delta["refunds.create"], "one refund for turn 4, approved once; calls %v", delta)
	require.Len(t, effectsUnder(ctx, t, sb, t1.Steps[1].Key), 1)

	final, err := st.Plans.EndSession(ctx, session, "failed", "agent")
	require.NoError(t, err)
	require.Equal(t, workflows.SagaCompensated, final.State, "error: %s", final.Error)
	reversed := 0
	for _, e := range allEffects(ctx, t, sb) {
		if e.Reverses == t1.Steps[1].ExternalID || e.Reverses == t2.Steps[0].ExternalID || e.Reverses == t4done.Steps[0].ExternalID {
			reversed++
		}
	}
	require.Equal(t, 3, reversed, "end failed reversed the payment, the invoice and the refund")
	_, err = st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: 6, Steps: []plan.Step{read}}, opts)
	require.ErrorIs(t, err, sagaclient.ErrSessionEnded, "an ended session is not started again under its ID")
}

// Three reads of one turn run at once: their activity intervals overlap in
// the session's history.
func TestParallelReadsOverlapInHistory(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, time.Minute)
	const session = "it-session-parallel"
	var steps []plan.Step
	for _, o := range []string{"ord_1001", "ord_1002", "ord_1003"} {
		steps = append(steps, step(t, "query_order", map[string]any{"order_id": o}))
	}
	res, err := st.Plans.Turn(ctx, session, workflows.TurnRequest{Turn: 1, Parallel: true, Steps: steps}, sagaclient.SessionOptions{})
	require.NoError(t, err)
	require.Equal(t, workflows.TurnSucceeded, res.State, "%+v", res)

	started := map[int64]time.Time{} // scheduled event id -> started time
	var starts, ends []time.Time
	it := st.Client.GetWorkflowHistory(ctx, workflows.SessionWorkflowID(session), "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		require.NoError(t, err)
		switch {
		case ev.GetActivityTaskStartedEventAttributes() != nil:
			started[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = ev.GetEventTime().AsTime()
		case ev.GetActivityTaskCompletedEventAttributes() != nil:
			a := ev.GetActivityTaskCompletedEventAttributes()
			starts = append(starts, started[a.GetScheduledEventId()])
			ends = append(ends, ev.GetEventTime().AsTime())
		}
	}
	require.Len(t, starts, 3, "three read activities")
	latestStart, earliestEnd := starts[0], ends[0]
	for i := range starts {
		if starts[i].After(latestStart) {
			latestStart = starts[i]
		}
		if ends[i].Before(earliestEnd) {
			earliestEnd = ends[i]
		}
	}
	require.True(t, latestStart.Before(earliestEnd), "every read started before any finished: %v / %v", starts, ends)
}

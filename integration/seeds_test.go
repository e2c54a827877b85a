package integration

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// TestRefundSeeds runs the seeds' refund story on the shared stack: a lost
// response after commit reconciled to one refund, then the same plan again
// (replay) and the plan with a changed amount (conflict). The subtests build
// on each other and stop at the first failure.
func TestRefundSeeds(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	const session, order, amount = "it-seed-refund", "ord_1001", 12900
	p := refundPlan(t, session, order, amount)
	refundKey := p.Key(3)
	var first sagaclient.Run
	var firstRefund sandbox.Effect

	ok := t.Run("lost_response_after_commit_reconciles_to_one_refund", func(t *testing.T) {
		ctx := testContext(t, 2*time.Minute)
		callsBefore := allCalls(ctx, t, sb)
		require.Empty(t, effectsUnder(ctx, t, sb, refundKey), "no refund may exist under %s before the plan runs", refundKey)
		require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop, Count: 1}))

		var err error
		first, err = st.Plans.Start(ctx, p)
		require.NoError(t, err)
		final, err := st.Plans.Wait(ctx, first.WorkflowID)
		require.NoError(t, err)

		pending, err := sb.Faults(ctx)
		require.NoError(t, err)
		require.Empty(t, pending, "the commit_then_drop fault must have been consumed by the refund request")

		require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
		require.Len(t, final.Steps, 3)
		refundStep := final.Steps[2]
		require.Equal(t, refundKey, refundStep.Key)
		require.Equal(t, ledger.Succeeded, refundStep.State, "last error: %s", refundStep.LastError)

		rows := effectsUnder(ctx, t, sb, refundKey)
		require.Len(t, rows, 1, "exactly one row under the refund's key in the acquirer's store")
		firstRefund = rows[0]
		require.Equal(t, "refund", firstRefund.Kind)
		require.Equal(t, order, firstRefund.OrderID)
		require.EqualValues(t, amount, firstRefund.AmountMinor)
		require.Equal(t, firstRefund.ID, refundStep.ExternalID, "the step's external id is the provider's refund id")

		delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
		require.Equal(t, 1, delta["refunds.create"], "the refund was sent once and never re-sent; calls: %v", delta)
		require.GreaterOrEqual(t, delta["refunds.lookup"], 1, "the lost response was settled by looking the refund up by key; calls: %v", delta)
	})
	if !ok {
		return
	}

	ok = t.Run("replay_attaches_to_the_same_run_and_returns_the_same_refund", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		effectsBefore, callsBefore := allEffects(ctx, t, sb), allCalls(ctx, t, sb)

		again, err := st.Plans.Start(ctx, refundPlan(t, session, order, amount))
		require.NoError(t, err)
		require.Equal(t, first, again, "the same plan attaches to the same workflow run")
		final, err := st.Plans.Wait(ctx, again.WorkflowID)
		require.NoError(t, err)
		require.Equal(t, workflows.SagaSucceeded, final.State)
		require.Equal(t, firstRefund.ID, final.Steps[2].ExternalID, "the replay returns the same external id")

		require.Equal(t, effectsBefore, allEffects(ctx, t, sb), "a replay commits nothing")
		require.Empty(t, callsDelta(callsBefore, allCalls(ctx, t, sb)), "a replay calls no provider")
	})
	if !ok {
		return
	}

	t.Run("changed_amount_under_the_same_turn_is_a_conflict_without_a_call", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		effectsBefore, callsBefore := allEffects(ctx, t, sb), allCalls(ctx, t, sb)
		changed := refundPlan(t, session, order, amount-100)
		require.Equal(t, refundKey, changed.Key(3), "the changed plan reuses the refund's operation key")

		_, err := st.Plans.Start(ctx, changed)
		var conflict *sagaclient.ConflictError
		require.True(t, errors.As(err, &conflict), "want *sagaclient.ConflictError, got %v", err)
		require.Equal(t, p.WorkflowID(), conflict.WorkflowID)
		require.Equal(t, fingerprint(t, p), conflict.Existing)
		require.Equal(t, fingerprint(t, changed), conflict.Requested)
		require.NotEqual(t, conflict.Existing, conflict.Requested)
		require.Contains(t, err.Error(), conflict.Existing)
		require.Contains(t, err.Error(), conflict.Requested)

		d, err := st.Client.DescribeWorkflowExecution(ctx, p.WorkflowID(), "")
		require.NoError(t, err)
		require.Equal(t, first.RunID, d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), "no new run was started")
		require.Equal(t, effectsBefore, allEffects(ctx, t, sb), "a refused plan commits nothing")
		require.Empty(t, callsDelta(callsBefore, allCalls(ctx, t, sb)), "a refused plan calls no provider")
	})
}

// TestTwoIdenticalPlansAtOnce starts the same refund twice at the same
// moment: one run, one refund request, one refund.
func TestTwoIdenticalPlansAtOnce(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-seed-twice",
		step(t, demotools.ApplyRefund, map[string]any{"order_id": "ord_1002", "amount_minor": 3900, "currency": "EUR", "reason": "sleeve missing"}))
	callsBefore := allCalls(ctx, t, sb)

	runs := startConcurrently(t, st.Plans, p, 2)
	require.Equal(t, runs[0], runs[1], "both starts attach to one run")
	final, err := st.Plans.Wait(ctx, runs[0].WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)

	rows := effectsUnder(ctx, t, sb, p.Key(1))
	require.Len(t, rows, 1, "one refund under the key in the acquirer's store")
	require.Equal(t, rows[0].ID, final.Steps[0].ExternalID)
	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, map[string]int{"refunds.create": 1}, delta, "exactly one provider call")
}

// TestOneCommandDeliveredTwentyTimes starts one plan of four steps from 20
// goroutines at once: one workflow run, one call and one effect per step.
func TestOneCommandDeliveredTwentyTimes(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	const order = "ord_1003"
	p := newPlan("it-seed-twenty",
		step(t, demotools.QueryOrder, map[string]any{"order_id": order}),
		step(t, demotools.CreateInvoice, map[string]any{"customer_id": "cus_cleo", "order_id": order, "amount_minor": 8900, "currency": "EUR", "description": "keyboard"}),
		step(t, demotools.CreatePayment, map[string]any{"customer_id": "cus_cleo", "order_id": order, "amount_minor": 8900, "currency": "EUR", "payment_method": "tok_visa"}),
		step(t, demotools.CreateTicket, map[string]any{"subject": "Ship the keyboard", "order_id": order, "priority": "normal"}),
	)
	callsBefore := allCalls(ctx, t, sb)

	runs := startConcurrently(t, st.Plans, p, 20)
	for i, r := range runs {
		require.Equal(t, runs[0], r, "start %d attached to another run", i)
	}
	final, err := st.Plans.Wait(ctx, p.WorkflowID())
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)

	// One execution under the workflow ID, as the server's visibility store
	// lists them (eventually consistent: wait until the run shows up).
	query := "WorkflowId = '" + p.WorkflowID() + "'"
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := st.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		require.NoError(t, err)
		if n.GetCount() > 0 {
			require.EqualValues(t, 1, n.GetCount(), "workflow executions under %s", p.WorkflowID())
			break
		}
		require.True(t, time.Now().Before(deadline), "the run never appeared in visibility")
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	d, err := st.Client.DescribeWorkflowExecution(ctx, p.WorkflowID(), "")
	require.NoError(t, err)
	require.Equal(t, runs[0].RunID, d.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, d.GetWorkflowExecutionInfo().GetStatus())

	for n, kind := range map[int]string{2: "invoice", 3: "payment", 4: "ticket"} {
		rows := effectsUnder(ctx, t, sb, p.Key(n))
		require.Len(t, rows, 1, "step %d (%s): one row under its key", n, kind)
		require.Equal(t, kind, rows[0].Kind)
		require.Equal(t, rows[0].ID, final.Steps[n-1].ExternalID)
	}
	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, map[string]int{"orders.get": 1, "invoices.create": 1, "payments.create": 1, "tickets.create": 1}, delta,
		"one provider call per step")
}

// startConcurrently starts p from n goroutines released together and
// returns every Run; each start must succeed.
func startConcurrently(t *testing.T, c *sagaclient.Client, p plan.Plan, n int) []sagaclient.Run {
	t.Helper()
	ctx := testContext(t, time.Minute)
	type result struct {
		i   int
		run sagaclient.Run
		err error
	}
	gate := make(chan struct{})
	results := make(chan result, n)
	var ready sync.WaitGroup
	for i := range n {
		ready.Add(1)
		go func() {
			ready.Done()
			<-gate
			r, err := c.Start(ctx, p)
			results <- result{i, r, err}
		}()
	}
	ready.Wait()
	close(gate)
	runs := make([]sagaclient.Run, n)
	var errs []string
	for range n {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err.Error())
		}
		runs[r.i] = r.run
	}
	require.Empty(t, errs, "every start attaches without error:\n%s", strings.Join(errs, "\n"))
	return runs
}

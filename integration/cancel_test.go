package integration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// Cancelling a plan during a slow payment lets the payment finish, then
// reverses it: the acquirer holds the payment and its reversal, the ledger
// says compensated, and nothing is lost.
func TestCancelDuringASlowPaymentReversesIt(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 2*time.Minute)
	p := newPlan("it-cancel-slow",
		step(t, "create_invoice", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1001", "amount_minor": 4200, "currency": "EUR", "description": "cancel test"}),
		step(t, "create_payment", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1001", "amount_minor": 4200, "currency": "EUR", "payment_method": "tok_visa"}),
		step(t, "create_ticket", map[string]any{"subject": "never opened", "order_id": "ord_1001"}))
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.Delay, Delay: 1500 * time.Millisecond, Count: 1}))

	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waitStatus(ctx, t, st, run.WorkflowID, func(s workflows.Status) bool { return s.Steps[1].State == ledger.InProgress })
	require.NoError(t, st.Plans.Cancel(ctx, run.WorkflowID))
	_, err = st.Plans.Wait(ctx, run.WorkflowID)
	require.ErrorContains(t, err, "canceled", "the plan ends cancelled")
	final, err := st.Plans.Status(ctx, run.WorkflowID)
	require.NoError(t, err)

	require.Equal(t, workflows.SagaCompensated, final.State, "error: %s", final.Error)
	require.Equal(t, ledger.Compensated, final.Steps[1].State, "the payment in flight finished and was reversed")
	require.Equal(t, ledger.Compensated, final.Steps[0].State)
	require.Equal(t, ledger.Pending, final.Steps[2].State, "nothing new started after the cancel")

	payments := effectsUnder(ctx, t, sb, p.Key(2))
	require.Len(t, payments, 1, "one payment under the key")
	reversals := 0
	for _, e := range allEffects(ctx, t, sb) {
		if e.Reverses == payments[0].ID {
			reversals++
		}
	}
	require.Equal(t, 1, reversals, "the payment was reversed once")
	op, err := st.Ledger.Get(ctx, p.Key(2))
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, op.Status, "ledger and acquirer agree")
	require.Empty(t, effectsUnder(ctx, t, sb, p.Key(3)), "the ticket was never opened")
}

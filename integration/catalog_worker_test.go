package integration

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/workflows"
)

// The shipped worker runs tools declared in a catalogue file, with no Go:
// `worker --tools catalog/examples/sandbox.yaml` (the seven sandbox tools and
// their reversals as YAML) takes a refund above the approval threshold that
// waits for a person, whose answer is then lost after the acquirer committed
// (settled by the catalogue's lookup), and an invoice whose payment is
// refused for good (reversed by the catalogue's storno). Effects are counted
// in the sandbox's own stores: one refund, one invoice and one storno.
func TestWorkerRunsACatalogue(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	bin := buildWorkerBinary(ctx, t, dir)
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	admin := sb.Client()
	st, err := devstack.Start(ctx, devstack.Options{
		NoWorker: true, UIPort: -1, SandboxURL: sb.BaseURL(), Ledger: "sqlite:" + filepath.Join(dir, "ledger.db"),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	catalogue, err := filepath.Abs(filepath.Join("..", "catalog", "examples", "sandbox.yaml"))
	require.NoError(t, err)
	t.Setenv("AGENTSAGA_SANDBOX_URL", sb.BaseURL()) // the catalogue's ${AGENTSAGA_SANDBOX_URL}
	w := startWorkerBinary(ctx, t, bin, "catalogue", []string{
		"--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(), "--task-queue", workflows.TaskQueue,
		"--ledger", st.LedgerDSN, "--tools", catalogue, "--data-dir", filepath.Join(dir, "worker"), "--allow-unverified-decisions",
	})
	require.Contains(t, w.out.String(), "apply_refund", "the banner lists the catalogue's tools")

	// A refund of 600.00 EUR waits for approval; its answer is lost after commit.
	require.NoError(t, admin.Fault(ctx, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop, Count: 1}))
	refund := newPlan("it-catalog-refund", step(t, demotools.ApplyRefund, map[string]any{
		"order_id": "ord_1001", "amount_minor": 60000, "currency": "EUR", "reason": "arrived damaged",
	}))
	run, err := st.Plans.Start(ctx, refund)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	q := waiting.Questions[0]
	_, err = st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "catalog-approver", Approved: true})
	require.NoError(t, err)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "refund plan: %s", final.Error)
	require.Equal(t, 1, countKind(effectsUnder(ctx, t, admin, refund.Key(1)), "refund"), "one refund at the acquirer")

	// An invoice, then a payment the acquirer refuses for good: the invoice
	// is reversed by the catalogue's storno.
	require.NoError(t, admin.Fault(ctx, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.Reject, Count: 1}))
	saga := newPlan("it-catalog-saga",
		step(t, demotools.CreateInvoice, map[string]any{"customer_id": "cus_ana", "order_id": "ord_1002", "amount_minor": 1200, "currency": "EUR", "description": "handling fee"}),
		step(t, demotools.CreatePayment, map[string]any{"customer_id": "cus_ana", "order_id": "ord_1002", "amount_minor": 1200, "currency": "EUR", "payment_method": "tok_visa"}),
	)
	run, err = st.Plans.Start(ctx, saga)
	require.NoError(t, err)
	final, err = st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaCompensated, final.State, "saga plan: %s", final.Error)
	all := allEffects(ctx, t, admin)
	require.Equal(t, 1, countKind(effectsUnder(ctx, t, admin, saga.Key(1)), "invoice"), "one invoice")
	require.Equal(t, 1, countKind(all, "invoice_storno"), "one storno, under the reversal's own key: %+v", all)
	require.Zero(t, countKind(all, "payment"), "no payment")
}

package workflows_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// runCancelled runs p and expects it to end cancelled, returning its status.
func runCancelled(t *testing.T, env *testsuite.TestWorkflowEnvironment, p plan.Plan) workflows.Status {
	t.Helper()
	executePlan(env, p)
	require.True(t, env.IsWorkflowCompleted())
	var ce *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &ce, "%v", env.GetWorkflowError())
	return status(t, env)
}

// Cancelling a plan while a write is in flight lets the call finish, and the
// effect it made is reversed like the others: none is dropped.
func TestCancelWhileAWriteIsInFlightReversesItsEffect(t *testing.T) {
	h := newHarness(t)
	h.p.slow["c1:1:2:invoice"] = true
	env := h.env()
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityID == "c1:1:2:invoice" {
			env.CancelWorkflow()
		}
	})
	st := runCancelled(t, env, newPlan("c1", step("charge", "o1", 100), step("invoice", "o1", 100), step("ship", "o1", 100)))
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, ledger.Compensated, st.Steps[1].State, "the call in flight finished and was reversed")
	require.Equal(t, ledger.Compensated, st.Steps[0].State)
	require.Equal(t, ledger.Pending, st.Steps[2].State, "never run")
	require.Contains(t, st.Steps[2].LastError, "cancelled")
	require.Empty(t, h.p.callsOf("ship"), "nothing new starts after the cancel")
	require.Equal(t, 1, h.p.count("invoice_storno"))
	require.Equal(t, 1, h.p.count("charge_reverse"))
	op, err := h.ledger.Get(context.Background(), "c1:1:2:invoice")
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, op.Status, "ledger and provider agree")
}

// A cancel while a step's outcome is unknown does not decide it: the step
// waits for reconcile or a person, and only then does the plan compensate.
func TestCancelWhileUnknownKeepsItUnknown(t *testing.T) {
	h := newHarness(t)
	h.p.setLookupDown(true)
	h.p.fail("invoice", "commit_then_drop")
	env := h.env()
	var afterCancel workflows.Status
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, time.Hour)
	env.RegisterDelayedCallback(func() {
		afterCancel = status(t, env)
		h.p.setLookupDown(false)
		q := openQuestion(t, afterCancel)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 2, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded, By: "ops", Note: "found in the ERP"})
	}, 2*time.Hour)
	st := runCancelled(t, env, newPlan("c2", step("charge", "o1", 100), step("invoice", "o1", 100)))

	require.Equal(t, ledger.NeedsHuman, afterCancel.Steps[1].State, "unknown stays unknown after a cancel")
	require.Equal(t, ledger.Succeeded, afterCancel.Steps[0].State, "nothing was compensated while the outcome was open")
	for _, d := range afterCancel.Steps[1].Decisions {
		require.NotEqual(t, workflows.System, d.By, "the saga never decides an unknown outcome")
	}
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, 1, h.p.count("invoice_storno"), "the effect the person confirmed was reversed")
	require.Equal(t, 1, h.p.count("charge_reverse"))
}

// A persistent 503 on a non-idempotent write is bounded: each call is
// reconciled, the next waits longer, and after maxCalls the step fails and
// the plan compensates.
func TestPersistentOutageIsBoundedAndBacksOff(t *testing.T) {
	h := newHarness(t)
	for range 100 {
		h.p.fail("refund", "unavailable")
	}
	env := h.env()
	start := env.Now()
	st := run(t, env, newPlan("c3", step("charge", "o1", 100), step("refund", "o1", 100)))
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Len(t, h.p.callsOf("refund"), 5, "bounded: five calls, not hundreds")
	require.Contains(t, st.Steps[1].LastError, "gave up after 5 calls")
	require.GreaterOrEqual(t, env.Now().Sub(start), 30*time.Second, "the calls backed off (2+4+8+16 s at least)")
	op, err := h.ledger.Get(context.Background(), "c3:1:2:refund")
	require.NoError(t, err)
	require.Equal(t, ledger.FailedFinal, op.Status, "the given-up row no longer holds the order's guard")
}

// A person's "retry" of a rejected reversal reaches the provider.
func TestResolveRetryOfARejectedReversalCallsAgain(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject")
	h.p.fail("charge_reverse", "reject")
	env := h.env()
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("c4", step("charge", "o1", 100), step("ship", "o1", 100)))
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Len(t, h.p.callsOf("charge_reverse"), 2)
	require.Equal(t, 1, h.p.count("charge_reverse"))
}

// Machine transitions (compensated) keep the person's decision on the row.
func TestCompensationKeepsTheHumanRecord(t *testing.T) {
	h := newHarness(t)
	h.p.setLookupDown(true)
	h.p.fail("charge", "commit_then_drop")
	h.p.fail("ship", "reject")
	env := h.env()
	env.RegisterDelayedCallback(func() {
		h.p.setLookupDown(false)
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded, By: "ops", Note: "seen at the acquirer"})
	}, time.Hour)
	st := run(t, env, newPlan("c5", step("charge", "o1", 100), step("ship", "o1", 100)))
	require.Equal(t, workflows.SagaCompensated, st.State)
	op, err := h.ledger.Get(context.Background(), "c5:1:1:charge")
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, op.Status)
	require.Equal(t, "ops", op.ResolvedBy, "the operator's name survives the machine transition")
}

// An activity that timed out (the worker hung or died after the provider
// committed) is UNKNOWN, reconciled, and never an ordinary failure.
func TestWriteTimeoutIsUnknownNotFailed(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	timedOut := false
	env.OnActivity(activities.ExecuteToolName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, req activities.Request) (activities.Output, error) {
			out, err := h.acts.ExecuteTool(ctx, req)
			if req.Key == "c6:1:1:charge" {
				// Every attempt times out after the provider committed:
				// the workflow must reconcile, never fail the step.
				timedOut = true
				return activities.Output{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)
			}
			return out, err
		})
	st := run(t, env, newPlan("c6", step("charge", "o1", 100), step("ship", "o1", 100)))
	require.True(t, timedOut)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("charge"))
	require.Len(t, h.p.callsOf("charge"), 1)
	require.Empty(t, h.p.callsOf("charge_reverse"))
}

// A provider's error text carrying a card number and tokens is masked in the
// status (error, last_error, error_code) exactly as in the ledger.
func TestProviderErrorTextIsMasked(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject_leaky")
	st := run(t, h.env(), newPlan("c8", step("ship", "o1", 100)))
	require.Equal(t, workflows.SagaFailed, st.State)
	b, err := json.Marshal(st)
	require.NoError(t, err)
	for _, secret := range []string{"4111 1111 1111 1111", "4111111111111111", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "sk_live_51HxYzABCDEFGHIJKLMNOP"} {
		require.NotContains(t, string(b), secret)
	}
	require.Contains(t, st.Steps[0].LastError, "declined card", "the message stays readable")
	op, err := h.ledger.Get(context.Background(), "c8:1:1:ship")
	require.NoError(t, err)
	require.NotContains(t, op.ErrorCode, "4111111111111111")
}

// A provider key conflict (422) is never adopted: the failed step's
// reconcile finds an effect made with other arguments under its key, and a
// person is asked; nothing of it is reversed.
func TestProviderConflictIsNeverAdopted(t *testing.T) {
	h := newHarness(t)
	h.p.fail("pay", "conflict")
	h.p.fail("pay.lookup", "lookup_other")
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 2, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops", Note: "not ours"})
	}, time.Hour)
	st := run(t, env, newPlan("c9", step("charge", "o1", 100), step("pay", "o1", 100)))
	q := openQuestion(t, seen)
	require.Equal(t, workflows.QuestionOutcome, q.Kind)
	require.Contains(t, q.Card.Rule, "other arguments")
	require.Equal(t, []string{"succeeded", "failed"}, q.Answers, "a person may adopt it, naming it; the engine never does")
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, ledger.FailedFinal, st.Steps[1].State, "the other effect was not adopted")
	require.Equal(t, []string{"c9:1:1:charge:compensate"}, h.p.callsOf("charge_reverse"), "only this plan's own effect was reversed")
}

// A lagging lookup (absent, not on the provider's word) never counts as
// "not done": the non-idempotent write is not sent again.
func TestNonAuthoritativeAbsentIsNotAbsent(t *testing.T) {
	h := newHarness(t)
	h.p.fail("refund", "commit_then_drop")
	h.p.fail("refund.lookup", "lookup_lag", "lookup_lag", "lookup_lag")
	st := run(t, h.env(), newPlan("c10", step("refund", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, h.p.callsOf("refund"), 1, "never resent on a lagging index")
	require.Equal(t, 1, h.p.count("refund"))
}

// The workflow's own backoff honours the provider's Retry-After.
func TestRetryAfterIsHonouredBetweenCalls(t *testing.T) {
	h := newHarness(t)
	h.p.fail("refund", "throttled_90s")
	env := h.env()
	start := env.Now()
	st := run(t, env, newPlan("c11", step("refund", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, h.p.callsOf("refund"), 2)
	require.GreaterOrEqual(t, env.Now().Sub(start), 90*time.Second, "the second call waited the 90 s the provider asked for")
}

// A step refused before anything was sent (here: by a guard that refuses)
// leaves no ledger row behind: no phantom row holds the scope.
func TestRefusedStepLeavesNoPhantomRow(t *testing.T) {
	h := newHarness(t)
	first := newPlan("c12a", step("refund", "o12", 100))
	require.Equal(t, workflows.SagaSucceeded, run(t, h.env(), first).State)
	second := newPlan("c12b", step("refund", "o12", 200))
	env := h.env()
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateApprove, "no", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "ops", Approved: false, Reason: "one refund per order"})
	}, time.Minute)
	st := run(t, env, second)
	require.Equal(t, workflows.SagaFailed, st.State)
	op, err := h.ledger.Get(context.Background(), "c12b:1:1:refund")
	require.NoError(t, err, "the ledger held the second refund")
	require.Equal(t, ledger.FailedFinal, op.Status, "a held row the person rejected is released, not left pending")
	ops, err := h.ledger.InScope(context.Background(), op.GuardScope, 10)
	require.NoError(t, err)
	require.Len(t, ops, 2)
	for _, o := range ops {
		require.NotEqual(t, ledger.Pending, o.Status, "no pending row left in the scope: %+v", o)
	}
}

// A call a guard refused never reached a provider: the failed step is not
// reconciled into a phantom ledger row that would hold the scope.
func TestGuardRefusedStepLeavesNoRow(t *testing.T) {
	h := newHarness(t)
	require.Equal(t, workflows.SagaSucceeded, run(t, h.env(), newPlan("c13a", step("deposit", "o13", 100))).State)
	st := run(t, h.env(), newPlan("c13b", step("deposit", "o13", 200)))
	require.Equal(t, workflows.SagaFailed, st.State)
	require.Contains(t, st.Steps[0].LastError, "guard")
	_, err := h.ledger.Get(context.Background(), "c13b:1:1:deposit")
	require.ErrorIs(t, err, ledger.ErrNotFound, "no row for a call that was never sent")
	require.Len(t, h.p.callsOf("deposit"), 1)
}

// A provider key conflict (422) for a tool that declares no Match (charge)
// is never adopted either: the effect found under the key cannot be shown
// to be this step's, so a person is asked and nothing of it is reversed.
func TestProviderConflictWithoutMatchIsNeverAdopted(t *testing.T) {
	h := newHarness(t)
	h.p.fail("charge", "conflict")
	h.p.fail("charge.lookup", "lookup_other")
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 2, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops", Note: "not ours"})
	}, time.Hour)
	st := run(t, env, newPlan("c14", step("invoice", "o1", 100), step("charge", "o1", 100)))
	q := openQuestion(t, seen)
	require.Equal(t, workflows.QuestionOutcome, q.Kind)
	require.Contains(t, q.Card.Rule, "declares no Match")
	require.Equal(t, []string{"succeeded", "failed"}, q.Answers, "a person may adopt it, naming it; the engine never does")
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, ledger.FailedFinal, st.Steps[1].State, "the other effect was not adopted")
	require.Empty(t, h.p.callsOf("charge_reverse"), "someone else's effect was not reversed")
	require.Equal(t, []string{"c14:1:1:invoice:compensate"}, h.p.callsOf("invoice_storno"), "this plan's own effect was reversed")
}

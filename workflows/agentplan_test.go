package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

type harness struct {
	testsuite.WorkflowTestSuite
	t      *testing.T
	p      *provider
	ledger ledger.Store
	reg    *tool.Registry
	acts   *activities.Activities
	// operators, when set, makes the saga verify signed decisions.
	operators workflows.Verifier
	// current is the environment env made last (the ledger's clock).
	current atomic.Pointer[testsuite.TestWorkflowEnvironment]
	// refused, when set, is the saga's Refused.
	refused func(ledger.DecisionRecord)
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	p := newProvider()
	reg, err := tool.NewRegistry(tools(p)...)
	require.NoError(t, err)
	h := &harness{t: t, p: p, reg: reg}
	// The ledger's clock is the test environment's: the in-flight horizon
	// (ledger.Operation.SentAt + settle) passes as the workflow's timers
	// skip time, as it would on a real server in real time.
	store, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"), ledgersqlite.WithClock(h.now))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	h.ledger = store
	return h
}

// now is the current test environment's time, or the wall clock before
// one exists.
func (h *harness) now() time.Time {
	if env := h.current.Load(); env != nil {
		return env.Now()
	}
	return time.Now()
}

func (h *harness) env() *testsuite.TestWorkflowEnvironment {
	h.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := h.NewTestWorkflowEnvironment()
	h.current.Store(env)
	h.acts = &activities.Activities{Tools: h.reg, Ledger: h.ledger}
	sagaworker.Register(env, &workflows.Saga{Specs: h.reg.Specs(), Operators: h.operators, Refused: h.refused}, h.acts)
	return env
}

func step(toolName, order string, amount int) plan.Step {
	return plan.Step{Tool: toolName, Args: json.RawMessage(fmt.Sprintf(`{"order_id":%q,"amount_minor":%d}`, order, amount))}
}

func newPlan(session string, steps ...plan.Step) plan.Plan {
	return plan.Plan{SessionID: session, Turn: 1, Steps: steps}
}

func run(t *testing.T, env *testsuite.TestWorkflowEnvironment, p plan.Plan) workflows.Status {
	t.Helper()
	executePlan(env, p)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.Status
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Empty(t, st.LedgerErrors, "every ledger write of the workflow succeeded")
	return st
}

func status(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.Status {
	t.Helper()
	v, err := env.QueryWorkflow(workflows.QueryStatus)
	require.NoError(t, err)
	var st workflows.Status
	require.NoError(t, v.Get(&st))
	return st
}

func TestLostResponseAfterCommitReconcilesToOneEffect(t *testing.T) {
	for _, name := range []string{"charge", "refund"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.p.fail(name, "commit_then_drop")
			st := run(t, h.env(), newPlan("s1", step("read_order", "o1", 1), step(name, "o1", 12900)))

			require.Equal(t, workflows.SagaSucceeded, st.State)
			s := st.Steps[1]
			require.Equal(t, ledger.Succeeded, s.State)
			require.Equal(t, "s1:1:2:"+name, s.Key)
			require.NotEmpty(t, s.ExternalID)
			require.Equal(t, 1, h.p.count(name), "exactly one effect in the provider")
			require.Len(t, h.p.callsOf(name), 1, "the write was never sent twice")
			require.Contains(t, h.p.looks, "s1:1:2:"+name, "the outcome was reconciled by key")

			op, err := h.ledger.Get(context.Background(), s.Key)
			require.NoError(t, err)
			require.Equal(t, ledger.Succeeded, op.Status, "ledger and workflow agree")
			require.Equal(t, s.ExternalID, op.ExternalID)
		})
	}
}

func TestRetryAfter503ReconcilesFirstAndFindsCommit(t *testing.T) {
	h := newHarness(t)
	// The first attempt commits and then the provider answers 503: the
	// retry must reconcile, find it, and not call again.
	h.p.fail("charge", "commit_then_drop")
	h.p.fail("charge.lookup", "lookup_unknown")
	st := run(t, h.env(), newPlan("s2", step("charge", "o1", 500)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("charge"))
	require.Len(t, h.p.callsOf("charge"), 1)
	require.GreaterOrEqual(t, len(h.p.looks), 2, "reconciled again after the lookup could not tell")
}

func TestSameKeyDifferentAmountIsConflictAndNeverCalled(t *testing.T) {
	h := newHarness(t)
	first := run(t, h.env(), newPlan("s3", step("charge", "o1", 12900)))
	require.Equal(t, workflows.SagaSucceeded, first.State)

	// Another run under the same session and turn (a reset, another
	// client) with a changed amount: the ledger refuses the key.
	second := run(t, h.env(), newPlan("s3", step("charge", "o1", 129)))
	require.Equal(t, workflows.SagaFailed, second.State)
	s := second.Steps[0]
	require.Equal(t, ledger.FailedFinal, s.State)
	require.Contains(t, s.LastError, "conflict")
	require.Contains(t, s.LastError, first.Steps[0].Fingerprint, "the error names the stored fingerprint")
	require.Len(t, h.p.callsOf("charge"), 1, "the tool was never called for the conflicting request")
	require.Equal(t, 1, h.p.count("charge"))
}

func TestFinalFailureCompensatesInReverseWithStornoKeys(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject")
	st := run(t, h.env(), newPlan("s4", step("invoice", "o1", 100), step("charge", "o1", 100), step("ship", "o1", 100)))

	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, ledger.FailedFinal, st.Steps[2].State)
	require.Contains(t, h.p.looks, "s4:1:3:ship", "the failed step was reconciled before compensating")
	require.Equal(t, ledger.Compensated, st.Steps[1].State)
	require.Equal(t, ledger.Compensated, st.Steps[0].State)

	// Step 2 is reversed before step 1, each with its storno key.
	var order []string
	for _, c := range h.p.calls {
		var name, key string
		fmt.Sscan(c, &name, &key)
		if name == "charge_reverse" || name == "invoice_storno" {
			order = append(order, key)
		}
	}
	require.Equal(t, []string{"s4:1:2:charge:compensate", "s4:1:1:invoice:compensate"}, order)
	require.Equal(t, "s4:1:2:charge:compensate", st.Steps[1].Compensation.Key)
	// Undo is a new entry: the original effects are still there.
	require.Equal(t, 1, h.p.count("charge"))
	require.Equal(t, 1, h.p.count("charge_reverse"))

	op, err := h.ledger.Get(context.Background(), "s4:1:2:charge")
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, op.Status)
}

func TestFailedStepFoundByReconcileIsCompensatedToo(t *testing.T) {
	h := newHarness(t)
	// invoice reports a rejection, but the provider did commit it: the
	// reconcile of the failed step finds it, and it is reversed like the
	// steps before it.
	h.p.fail("invoice", "commit_then_reject")
	st := run(t, h.env(), newPlan("s4b", step("charge", "o1", 100), step("invoice", "o1", 100)))
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Contains(t, st.Steps[1].LastError, "provider has the effect")
	require.Equal(t, 1, h.p.count("invoice_storno"))
	require.Equal(t, ledger.Compensated, st.Steps[1].State, "the found effect was reversed")
	require.Equal(t, ledger.Compensated, st.Steps[0].State)
}

func TestFailedCompensationNeedsHumanAndIsVisible(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject")
	h.p.fail("charge_reverse", "reject")
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 1, Outcome: workflows.OutcomeSucceeded, ExternalID: "manual-1", By: "ops", Note: "reversed by hand"})
	}, time.Hour)
	st := run(t, env, newPlan("s5", step("charge", "o1", 100), step("ship", "o1", 100)))

	require.Equal(t, workflows.SagaNeedsHuman, seen.State)
	require.Equal(t, ledger.CompensationFailed, seen.Steps[0].State)
	require.Equal(t, "resolve", seen.Steps[0].Waiting)
	require.Contains(t, seen.Steps[0].Compensation.LastError, "insufficient_funds")

	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, ledger.Compensated, st.Steps[0].State)
	require.Equal(t, "ops", st.Steps[0].Decisions[0].By)
}

func TestUnknownWithoutLookupWaitsForResolve(t *testing.T) {
	t.Run("succeeded continues", func(t *testing.T) {
		h := newHarness(t)
		h.p.fail("email", "commit_then_drop")
		env := h.env()
		var seen workflows.Status
		var seenRow ledger.Operation
		env.RegisterDelayedCallback(func() {
			seen = status(t, env)
			var err error
			seenRow, err = h.ledger.Get(context.Background(), "s6:1:2:email")
			require.NoError(t, err)
			env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: "msg-9", By: "bob", Note: "seen in the mail log"})
		}, time.Hour)
		st := run(t, env, newPlan("s6", step("charge", "o1", 100), step("email", "o1", 1)))
		require.Equal(t, ledger.NeedsHuman, seen.Steps[1].State)
		require.Equal(t, ledger.NeedsHuman, seenRow.Status, "the ledger lists it as needs_human while the question is open")
		require.Equal(t, workflows.SagaNeedsHuman, seen.State)
		require.Equal(t, workflows.SagaSucceeded, st.State)
		require.Equal(t, "msg-9", st.Steps[1].ExternalID)
		require.Equal(t, "bob", st.Steps[1].Decisions[0].By)
		require.Len(t, h.p.callsOf("email"), 1, "an email with unknown outcome is never resent blindly")
		op, err := h.ledger.Get(context.Background(), "s6:1:2:email")
		require.NoError(t, err)
		require.Equal(t, ledger.Succeeded, op.Status)
		require.Equal(t, "bob", op.ResolvedBy)
	})
	t.Run("failed compensates", func(t *testing.T) {
		h := newHarness(t)
		h.p.fail("email", "commit_then_drop")
		env := h.env()
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeFailed, By: "bob", Note: "bounced"})
		}, time.Hour)
		st := run(t, env, newPlan("s7", step("charge", "o1", 100), step("email", "o1", 1)))
		require.Equal(t, workflows.SagaCompensated, st.State)
		require.Equal(t, ledger.FailedFinal, st.Steps[1].State)
		require.Equal(t, ledger.Compensated, st.Steps[0].State)
	})
	t.Run("unknown past the window goes to a human, retry calls again", func(t *testing.T) {
		h := newHarness(t)
		h.p.fail("charge", "commit_then_drop")
		for range 40 {
			h.p.fail("charge.lookup", "lookup_unknown")
		}
		env := h.env()
		var seen workflows.Status
		env.RegisterDelayedCallback(func() {
			seen = status(t, env)
			env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 1, Outcome: workflows.OutcomeRetry, By: "ops"})
		}, time.Hour)
		st := run(t, env, newPlan("s8", step("charge", "o1", 100)))
		require.Equal(t, ledger.NeedsHuman, seen.Steps[0].State)
		require.Contains(t, seen.Steps[0].LastError, "outcome unknown: reconciled")
		require.Contains(t, seen.Steps[0].LastError, "over 15m0s")
		require.Equal(t, workflows.SagaSucceeded, st.State)
		// charge is an idempotent write: the provider kept one effect.
		require.Equal(t, 1, h.p.count("charge"))
	})
}

func TestApprovalWithStaleFingerprintIsRefused(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("s9", step("refund", "o1", 90000))
	fp, err := p.StepFingerprint(1)
	require.NoError(t, err)
	stale, err := plan.Fingerprint("refund", json.RawMessage(`{"order_id":"o1","amount_minor":9000}`))
	require.NoError(t, err)

	var afterStale workflows.Status
	var callsAfterStale []string
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: stale, By: "eve", Approved: true})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		afterStale = status(t, env)
		callsAfterStale = h.p.callsOf("refund")
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "alice", Approved: true, Reason: "verified"})
	}, 2*time.Minute)
	st := run(t, env, p)

	require.Equal(t, workflows.SagaWaitingApproval, afterStale.State)
	require.Equal(t, "approval", afterStale.Steps[0].Waiting)
	require.Len(t, afterStale.Steps[0].Decisions, 1)
	require.Contains(t, afterStale.Steps[0].Decisions[0].Refused, "fingerprint")
	require.Empty(t, callsAfterStale, "nothing ran on the stale approval")

	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, h.p.callsOf("refund"), 1)
	require.Equal(t, "alice", st.Steps[0].Decisions[1].By)
}

func TestRejectedApprovalFailsTheStep(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("s10", step("charge", "o1", 100), step("refund", "o1", 90000))
	fp, err := p.StepFingerprint(2)
	require.NoError(t, err)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 2, Fingerprint: fp, By: "alice", Approved: false, Reason: "too much"})
	}, time.Minute)
	st := run(t, env, p)
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Contains(t, st.Steps[1].LastError, "rejected by alice")
	require.Empty(t, h.p.callsOf("refund"))
}

func TestNonIdempotentWriteIsNotRetriedOn503(t *testing.T) {
	h := newHarness(t)
	// refund answers 503 (it may have processed): UNKNOWN, reconcile finds
	// nothing authoritative-absent, so it is called again with the same key
	// only after the provider said it has no such refund.
	h.p.fail("refund", "unavailable")
	st := run(t, h.env(), newPlan("s11", step("refund", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("refund"))
	require.Equal(t, []string{"s11:1:1:refund", "s11:1:1:refund"}, h.p.callsOf("refund"))
	require.Equal(t, []string{"s11:1:1:refund"}, h.p.looks[:1], "reconciled before the second call")
}

func TestNotSentIsRetriedForEveryClass(t *testing.T) {
	h := newHarness(t)
	h.p.fail("email", "not_sent")
	st := run(t, h.env(), newPlan("s12", step("email", "o1", 1)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, h.p.callsOf("email"), 2)
	require.Equal(t, 2, st.Steps[0].Attempts)
}

func TestResultsAreSanitized(t *testing.T) {
	h := newHarness(t)
	st := run(t, h.env(), newPlan("s13", step("charge", "o1", 100)))
	require.NotContains(t, string(st.Steps[0].Result), "4111")
	op, err := h.ledger.Get(context.Background(), "s13:1:1:charge")
	require.NoError(t, err)
	require.NotContains(t, string(op.Result), "4111")
}

func TestActivityOptionsFollowTheClass(t *testing.T) {
	for _, c := range tool.Classes {
		spec := tool.Spec{Name: "x", Class: c, Timeout: 7 * time.Second}
		o := workflows.ActivityOptions(spec, "k:1:1:x", "")
		want := tool.DefaultRetry(c)
		require.Equal(t, "k:1:1:x", o.ActivityID)
		require.Equal(t, 7*time.Second, o.StartToCloseTimeout)
		require.Equal(t, want.MaxAttempts, o.RetryPolicy.MaximumAttempts, c)
		require.Equal(t, want.InitialInterval, o.RetryPolicy.InitialInterval, c)
	}
	require.EqualValues(t, 3, workflows.ActivityOptions(tool.Spec{Class: tool.Read}, "k", "").RetryPolicy.MaximumAttempts)
	require.Equal(t, 200*time.Millisecond, workflows.ActivityOptions(tool.Spec{Class: tool.Read}, "k", "").RetryPolicy.InitialInterval)
	require.Equal(t, 500*time.Millisecond, workflows.ActivityOptions(tool.Spec{Class: tool.IdempotentWrite}, "k", "").RetryPolicy.InitialInterval)
	override := tool.Spec{Class: tool.IdempotentWrite, Retry: &tool.RetryPolicy{MaxAttempts: 5, InitialInterval: time.Second, BackoffCoefficient: 3}}
	require.EqualValues(t, 5, workflows.ActivityOptions(override, "k", "").RetryPolicy.MaximumAttempts)
}

// executePlan runs AgentPlan for p under its own workflow ID (a plan runs
// only there).
func executePlan(env *testsuite.TestWorkflowEnvironment, p plan.Plan) {
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: p.WorkflowID()})
	env.ExecuteWorkflow(workflows.WorkflowName, p)
}

package workflows_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// A person's `retry` of a refund whose answer was lost, given while the
// lookup is back, reconciles first: the provider has the refund, so it is
// adopted and never sent again.
func TestPersonsRetryReconcilesFirst(t *testing.T) {
	h := newHarness(t)
	h.p.fail("refund", "commit_then_drop")
	h.p.setLookupDown(true)
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		h.p.setLookupDown(false)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("rt1", step("refund", "o1", 100)))
	require.Equal(t, ledger.NeedsHuman, seen.Steps[0].State, "the window closed with the lookup down")
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("refund"), "one refund at the provider")
	require.Len(t, h.p.callsOf("refund"), 1, "the retry found the refund by key and sent nothing")
	require.NotEmpty(t, st.Steps[0].ExternalID)
	op, err := h.ledger.Get(context.Background(), "rt1:1:1:refund")
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status)
}

// A person's `retry` while the lookup is still down (or answers only a
// lagging absent) sends nothing: the step is unknown again, reconciled for
// the tool's window, and the person is asked again. Only an authoritative
// absent sends the same key again.
func TestPersonsRetryWithoutAnAnswerAsksAgain(t *testing.T) {
	h := newHarness(t)
	h.p.fail("refund", "commit_then_drop")
	h.p.setLookupDown(true)
	env := h.env()
	var first, second workflows.Status
	env.RegisterDelayedCallback(func() {
		first = status(t, env)
		q := openQuestion(t, first)
		update(env, workflows.UpdateResolve, "r1", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		second = status(t, env)
		h.p.setLookupDown(false)
		q := openQuestion(t, second)
		update(env, workflows.UpdateResolve, "r2", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, 2*time.Hour)
	st := run(t, env, newPlan("rt2", step("refund", "o1", 100)))
	require.Len(t, h.p.callsOf("refund"), 1, "no retry was sent while the provider could not say")
	require.Equal(t, 1, h.p.count("refund"))
	q1, q2 := openQuestion(t, first), openQuestion(t, second)
	require.NotEqual(t, q1.ID, q2.ID, "the person was asked again")
	require.Equal(t, workflows.QuestionOutcome, q2.Kind)
	require.Equal(t, workflows.SagaSucceeded, st.State)
}

// A person's `retry` of a write that is provably not done at the provider
// (authoritative absent) sends the same key again: one effect in all.
func TestPersonsRetryOfAnAbsentEffectSendsAgain(t *testing.T) {
	h := newHarness(t)
	h.p.fail("refund", "lost_request")
	h.p.setLookupDown(true)
	env := h.env()
	env.RegisterDelayedCallback(func() {
		h.p.setLookupDown(false)
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("rt3", step("refund", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, []string{"rt3:1:1:refund", "rt3:1:1:refund"}, h.p.callsOf("refund"), "sent again with the same key")
	require.Equal(t, 1, h.p.count("refund"))
	require.Contains(t, h.p.looks, "rt3:1:1:refund")
}

// The same on the sandbox card acquirer, effects counted in its own store:
// the refund commits, its answer is lost, the lookup is down for the whole
// window; the person's retry comes when the lookup is back, and the refund
// is found, not made again.
func TestPersonsRetryReconcilesFirstAtTheAcquirer(t *testing.T) {
	ctx := context.Background()
	sb, err := sandbox.Start(ctx, sandbox.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	reg, err := demotools.Registry(demotools.SandboxConfig(sb.BaseURL()))
	require.NoError(t, err)
	h := newHarness(t)
	h.reg = reg
	c := sb.Client()
	require.NoError(t, c.Fault(ctx, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop, Count: 1}))
	require.NoError(t, c.Fault(ctx, sandbox.FaultSpec{Op: "refunds.lookup", Fault: sandbox.LookupUnavailable, Count: 1000}))
	env := h.env()
	env.RegisterDelayedCallback(func() {
		require.NoError(t, c.ClearFaults(ctx))
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	p := newPlan("rt4", plan.Step{Tool: demotools.ApplyRefund, Args: json.RawMessage(`{"order_id":"ord_1001","amount_minor":2500,"currency":"EUR","reason":"damaged"}`)})
	st := run(t, env, p)
	require.Equal(t, workflows.SagaSucceeded, st.State, "error: %s", st.Error)
	effects, err := c.Effects(ctx, sandbox.Payments)
	require.NoError(t, err)
	n := 0
	for _, e := range effects {
		if e.Key == p.Key(1) {
			n++
		}
	}
	require.Equal(t, 1, n, "one refund at the acquirer")
	calls, err := c.Calls(ctx, "refunds.create")
	require.NoError(t, err)
	require.Equal(t, 1, calls["refunds.create"], "the retry sent nothing")
}

package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// storedAnswers is a provider that stores its answer by key, as Stripe
// does: a key it answered with an error gets the same error again.
type storedAnswers struct {
	*fakeTool
	mu     sync.Mutex
	stored map[string]error
}

func (s *storedAnswers) Execute(ctx context.Context, c tool.Call) (tool.Result, error) {
	s.mu.Lock()
	err, ok := s.stored[c.Key]
	s.mu.Unlock()
	if ok {
		s.p.mu.Lock()
		s.p.calls = append(s.p.calls, s.spec.Name+" "+c.Key)
		s.p.mu.Unlock()
		return tool.Result{}, err
	}
	res, err := s.fakeTool.Execute(ctx, c)
	if err != nil {
		s.mu.Lock()
		s.stored[c.Key] = err
		s.mu.Unlock()
	}
	return res, err
}

// withStoredReversals is the harness with charge_reverse replaced by a
// provider that stores its answers by key.
func withStoredReversals(t *testing.T) *harness {
	h := newHarness(t)
	var ts []tool.Tool
	for _, tl := range tools(h.p) {
		if ft, ok := tl.(*fakeTool); ok && ft.spec.Name == "charge_reverse" {
			tl = &storedAnswers{fakeTool: ft, stored: map[string]error{}}
		}
		ts = append(ts, tl)
	}
	reg, err := tool.NewRegistry(ts...)
	require.NoError(t, err)
	h.reg = reg
	return h
}

// A person's retry of a reversal the provider rejected for good is a new
// request under a new derived key (the old key would only replay the stored
// rejection), after the provider was asked about the old one. The card says
// what the provider answered and that the retry is a new request.
func TestRetryOfARejectedReversalIsANewRequest(t *testing.T) {
	h := withStoredReversals(t)
	h.p.fail("ship", "reject")
	h.p.fail("charge_reverse", "reject")
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("rv1", step("charge", "o1", 100), step("ship", "o1", 100)))
	q := openQuestion(t, seen)
	require.Equal(t, workflows.QuestionReversal, q.Kind)
	require.Contains(t, q.Card.Rule, "the provider rejected the reversal rv1:1:1:charge:compensate")
	require.Contains(t, q.Card.ProviderAnswered, "insufficient_funds", "what the provider answered")
	require.Contains(t, doesOf(q.Card, "retry"), "new reversal request goes out under key rv1:1:1:charge:compensate:2")

	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, []string{"rv1:1:1:charge:compensate", "rv1:1:1:charge:compensate:2"}, h.p.callsOf("charge_reverse"))
	require.Equal(t, 1, h.p.count("charge_reverse"), "one reversal at the provider")
	require.Contains(t, h.p.looks, "rv1:1:1:charge:compensate", "the rejected reversal was looked up first")
	require.Equal(t, "rv1:1:1:charge:compensate:2", st.Steps[0].Compensation.Key)
	for key, want := range map[string]ledger.Status{
		"rv1:1:1:charge":              ledger.Compensated,
		"rv1:1:1:charge:compensate":   ledger.FailedFinal,
		"rv1:1:1:charge:compensate:2": ledger.Succeeded,
	} {
		op, err := h.ledger.Get(context.Background(), key)
		require.NoError(t, err)
		require.Equal(t, want, op.Status, key)
	}
}

// A provider that committed a reversal and answered "rejected" is found by
// the lookup the retry makes first: nothing new is sent.
func TestRetryOfARejectedReversalFindsItDoneAfterAll(t *testing.T) {
	h := withStoredReversals(t)
	h.p.fail("ship", "reject")
	h.p.fail("charge_reverse", "commit_then_reject")
	env := h.env()
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("rv2", step("charge", "o1", 100), step("ship", "o1", 100)))
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Equal(t, []string{"rv2:1:1:charge:compensate"}, h.p.callsOf("charge_reverse"), "nothing new was sent")
	require.Equal(t, 1, h.p.count("charge_reverse"))
	op, err := h.ledger.Get(context.Background(), "rv2:1:1:charge:compensate")
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status, "the ledger learned the reversal happened")
}

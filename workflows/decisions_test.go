package workflows_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/workflows"
)

// answer collects what an Update returned.
type answer struct {
	rejected error
	result   workflows.DecisionResult
	err      error
	done     bool
}

func update(env *testsuite.TestWorkflowEnvironment, name, id string, payload any) *answer {
	a := &answer{}
	env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { a.rejected, a.done = err, true },
		OnComplete: func(v any, err error) {
			a.done, a.err = true, err
			if r, ok := v.(workflows.DecisionResult); ok {
				a.result = r
			}
		},
	}, payload)
	return a
}

func openQuestion(t *testing.T, st workflows.Status) workflows.Question {
	t.Helper()
	require.Len(t, st.Questions, 1, "one open question")
	return st.Questions[0]
}

// A resolve sent while its step is still pending changes nothing: the step
// later lost its request, and the early "succeeded" must not settle it (the
// plan would claim an email nobody sent), nor may an early "retry" send one
// twice.
func TestEarlyResolveChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.p.fail("email", "lost_request")
	env := h.env()
	p := newPlan("e1", step("refund", "o1", 90000), step("email", "o1", 1))
	fp, err := p.StepFingerprint(1)
	require.NoError(t, err)
	var early *answer
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: "msg_bogus", By: "mallory"})
		env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeRetry, By: "mallory"})
		early = update(env, workflows.UpdateResolve, "early", workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: "msg_bogus", By: "mallory"})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateApprove, "ok", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: "alice", Approved: true})
	}, 2*time.Minute)
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "retry", workflows.ResolveSignal{Step: 2, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "bob", Note: "relay log shows nothing"})
	}, time.Hour)
	st := run(t, env, p)

	require.True(t, early.done)
	require.ErrorContains(t, early.rejected, "step 2 has no open question")
	require.Equal(t, ledger.NeedsHuman, seen.Steps[1].State, "the early decisions were not kept for later")
	require.Len(t, seen.Steps[1].Decisions, 2, "both early signals are recorded as refused")
	for _, d := range seen.Steps[1].Decisions {
		require.NotEmpty(t, d.Refused)
		require.True(t, d.At.Before(seen.Steps[0].Decisions[0].At), "refused at the time it arrived, before step 1 was approved")
	}
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.NotEqual(t, "msg_bogus", st.Steps[1].ExternalID)
	require.Equal(t, 1, h.p.count("email"), "exactly one email at the relay")
	require.Len(t, h.p.callsOf("email"), 2, "the lost request and the one retry the person asked for")
}

// A double-clicked resolve is applied once and never closes a later
// question of the same step (here: its failed reversal).
func TestDoubleClickedResolveDoesNotCloseALaterQuestion(t *testing.T) {
	h := newHarness(t)
	h.p.setLookupDown(true)
	h.p.fail("charge", "lost_request")
	h.p.fail("ship", "reject")
	h.p.fail("charge_reverse", "reject")
	env := h.env()
	var first, second *answer
	var later workflows.Status
	env.RegisterDelayedCallback(func() {
		h.p.setLookupDown(false)
		q := openQuestion(t, status(t, env))
		msg := workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"}
		first = update(env, workflows.UpdateResolve, "click-1", msg)
		second = update(env, workflows.UpdateResolve, "click-2", msg)
		env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 1, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		// The same click, a little later, without a question id: the
		// reversal question is open by now.
		env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 1, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour+30*time.Second)
	env.RegisterDelayedCallback(func() {
		later = status(t, env)
		q := openQuestion(t, later)
		update(env, workflows.UpdateResolve, "stay", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops", Note: "left unreversed"})
	}, 3*time.Hour)
	st := run(t, env, newPlan("e2", step("charge", "o1", 100), step("ship", "o1", 100)))

	require.NoError(t, first.err)
	require.True(t, first.result.Applied)
	require.NoError(t, second.rejected)
	require.False(t, second.result.Applied, "the second click is the same decision, applied once")
	q := openQuestion(t, later)
	require.Equal(t, workflows.QuestionReversal, q.Kind, "the later question stayed open")
	require.Equal(t, ledger.CompensationFailed, later.Steps[0].State)
	require.Equal(t, workflows.SagaCompensationFailed, st.State)
	require.Len(t, h.p.callsOf("charge"), 2, "one retry, not three")
}

func TestApprovalByTheRequesterIsRefused(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("e3", step("refund", "o1", 90000))
	p.RequestedBy = "alice"
	fp, err := p.StepFingerprint(1)
	require.NoError(t, err)
	var self, other *answer
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		self = update(env, workflows.UpdateApprove, "self", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "Alice ", Approved: true})
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "alice", Approved: true})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		other = update(env, workflows.UpdateApprove, "other", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
	}, 2*time.Minute)
	st := run(t, env, p)
	require.ErrorContains(t, self.rejected, "four eyes")
	require.Equal(t, workflows.SagaWaitingApproval, between.State)
	require.Contains(t, between.Steps[0].Decisions[0].Refused, "four eyes")
	require.Empty(t, between.Steps[0].ExternalID)
	require.NoError(t, other.err)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("refund"))
}

// A refund above the threshold on an order already refunded shows the clash
// and the earlier refund on its card, and runs only after an explicit,
// recorded override.
func TestGuardClashIsOnTheCardAndNeedsOverride(t *testing.T) {
	h := newHarness(t)
	first := newPlan("h-1", step("refund", "o7", 150000))
	fp1, _ := first.StepFingerprint(1)
	env := h.env()
	env.RegisterDelayedCallback(func() {
		update(env, workflows.UpdateApprove, "a", workflows.ApproveSignal{Step: 1, Fingerprint: fp1, By: "bob", Approved: true})
	}, time.Minute)
	st1 := run(t, env, first)
	require.Equal(t, workflows.SagaSucceeded, st1.State, "%+v", st1)

	second := newPlan("h-2", step("refund", "o7", 339900))
	fp2, _ := second.StepFingerprint(1)
	env = h.env()
	var card workflows.Card
	var plain, override *answer
	var callsBefore int
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		card = q.Card
		callsBefore = len(h.p.callsOf("refund"))
		plain = update(env, workflows.UpdateApprove, "plain", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp2, By: "carol", Approved: true})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		override = update(env, workflows.UpdateApprove, "override", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp2, By: "carol", Approved: true, Override: true, Reason: "second line item"})
	}, 2*time.Minute)
	st := run(t, env, second)

	require.NotEmpty(t, card.Clash, "the guard clash is on the card")
	require.Contains(t, card.Clash, "h-1:1:1:refund")
	require.Len(t, card.AlreadyRan, 1)
	require.Contains(t, card.AlreadyRan[0], "h-1:1:1:refund")
	require.Equal(t, "order_id o7", card.Object)
	require.EqualValues(t, 339900, card.AmountMinor)
	require.Equal(t, "3,399.00", card.Amount)
	require.Contains(t, card.Rule, "amount_minor above 500.00")
	require.Equal(t, "h-2", card.Session)
	require.ErrorContains(t, plain.rejected, "override")
	require.Equal(t, 1, callsBefore, "nothing ran before the override")
	require.NoError(t, override.err)
	require.Equal(t, workflows.SagaSucceeded, st.State, "%+v", st.Steps)
	require.Equal(t, 2, h.p.count("refund"))

	trail, err := h.ledger.Decisions(context.Background(), "h-2:1:1:refund")
	require.NoError(t, err)
	require.NotEmpty(t, trail)
	last := trail[len(trail)-1]
	require.Equal(t, "override", last.Kind)
	require.Equal(t, "carol", last.By)
	require.False(t, last.Verified)
	require.Contains(t, string(last.Card), "h-1:1:1:refund")
}

// A person's "succeeded" for a tool that can look itself up is checked with
// the provider.
func TestResolveSucceededIsCheckedWithTheProvider(t *testing.T) {
	h := newHarness(t)
	h.p.setLookupDown(true)
	h.p.fail("charge", "commit_then_drop")
	env := h.env()
	var bogus, real *answer
	env.RegisterDelayedCallback(func() {
		h.p.setLookupDown(false)
		q := openQuestion(t, status(t, env))
		bogus = update(env, workflows.UpdateResolve, "bogus", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded, ExternalID: "ch_DOES_NOT_EXIST", By: "ops"})
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		real = update(env, workflows.UpdateResolve, "real", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded, By: "ops"})
	}, 2*time.Hour)
	st := run(t, env, newPlan("e5", step("charge", "o1", 100)))
	require.True(t, bogus.done)
	require.Error(t, bogus.err, "a made-up external id is refused")
	require.Contains(t, bogus.err.Error(), "not ch_DOES_NOT_EXIST")
	require.NoError(t, real.err)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, "charge_1", st.Steps[0].ExternalID, "the provider's id, not a typed one")

	t.Run("no effect at all", func(t *testing.T) {
		h := newHarness(t)
		h.p.setLookupDown(true)
		h.p.fail("charge", "lost_request")
		env := h.env()
		var claim *answer
		env.RegisterDelayedCallback(func() {
			h.p.setLookupDown(false)
			q := openQuestion(t, status(t, env))
			claim = update(env, workflows.UpdateResolve, "claim", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded, By: "ops"})
		}, time.Hour)
		env.RegisterDelayedCallback(func() {
			q := openQuestion(t, status(t, env))
			update(env, workflows.UpdateResolve, "fail", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops"})
		}, 2*time.Hour)
		st := run(t, env, newPlan("e6", step("charge", "o1", 100)))
		require.ErrorContains(t, claim.err, "no effect")
		require.Equal(t, workflows.SagaFailed, st.State)
	})
}

func TestApprovalExpiresAndCompensates(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	start := env.Now()
	st := run(t, env, newPlan("e7", step("charge", "o1", 100), step("refund", "o1", 90000)))
	took := env.Now().Sub(start)
	require.True(t, took >= 24*time.Hour && took < 25*time.Hour, "expired after the 24 h window, took %s", took)
	require.Equal(t, workflows.SagaCompensated, st.State)
	require.Contains(t, st.Steps[1].LastError, "expired after 24h0m0s")
	require.Equal(t, "expire", st.Steps[1].Decisions[0].Kind)
	require.Empty(t, h.p.callsOf("refund"))
	require.Equal(t, ledger.Compensated, st.Steps[0].State)
	trail, err := h.ledger.Decisions(context.Background(), "e7:1:2:refund")
	require.NoError(t, err)
	require.Len(t, trail, 1)
	require.Equal(t, "expire", trail[0].Kind)
	require.Equal(t, workflows.System, trail[0].By)
}

func TestDecisionValidation(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("e8", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	big := make([]byte, workflows.MaxByLen+1)
	for i := range big {
		big[i] = 'a'
	}
	cases := map[string]workflows.ApproveSignal{
		"by is required":           {Step: 1, Fingerprint: fp, Approved: true},
		"limit is 128":             {Step: 1, Fingerprint: fp, By: string(big), Approved: true},
		"control character":        {Step: 1, Fingerprint: fp, By: "al\x1b[2Jice", Approved: true},
		"is not step 1's":          {Step: 1, Fingerprint: "nope", By: "bob", Approved: true},
		"is not open":              {Step: 1, QuestionID: "q9-step1-approval", Fingerprint: fp, By: "bob", Approved: true},
		"step 2 has no open":       {Step: 2, Fingerprint: fp, By: "bob", Approved: true},
		"note is 2001 bytes":       {},
		"outcome \"maybe\" is not": {},
	}
	got := map[string]*answer{}
	env.RegisterDelayedCallback(func() {
		for want, a := range cases {
			switch want {
			case "note is 2001 bytes":
				got[want] = update(env, workflows.UpdateResolve, want, workflows.ResolveSignal{Step: 1, Outcome: workflows.OutcomeFailed, By: "bob", Note: string(make([]byte, 2001))})
			case "outcome \"maybe\" is not":
				got[want] = update(env, workflows.UpdateResolve, want, workflows.ResolveSignal{Step: 1, Outcome: "maybe", By: "bob"})
			default:
				got[want] = update(env, workflows.UpdateApprove, want, a)
			}
		}
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		update(env, workflows.UpdateApprove, "reject", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: false, Reason: "no"})
	}, 2*time.Minute)
	st := run(t, env, p)
	for want, a := range got {
		require.Error(t, a.rejected, want)
		require.Contains(t, a.rejected.Error(), want)
	}
	require.Equal(t, workflows.SagaFailed, st.State)
	require.Empty(t, h.p.callsOf("refund"))
}

// keyring returns an operators keyring in which alice may approve, and her
// key; bob has a key but is not in the file.
func keyring(t *testing.T) (*operators.Keyring, *operators.Key, *operators.Key) {
	t.Helper()
	alice, err := operators.NewKey("alice", rand.Reader)
	require.NoError(t, err)
	bob, err := operators.NewKey("bob", rand.Reader)
	require.NoError(t, err)
	file, err := json.Marshal(operators.File{Operators: []operators.Operator{alice.Entry(operators.ActionApprove)}})
	require.NoError(t, err)
	ring, err := operators.Parse(file)
	require.NoError(t, err)
	return ring, alice, bob
}

func TestSignedDecisions(t *testing.T) {
	h := newHarness(t)
	ring, alice, bob := keyring(t)
	h.operators = ring
	env := h.env()
	p := newPlan("e9", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var unsigned, tampered, stranger, resolver, good *answer
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		unsigned = update(env, workflows.UpdateApprove, "u", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: "alice", Approved: true})
		st := status(t, env)
		id := st.WorkflowID
		a := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Fingerprint: fp, By: "alice", Approved: true, SentAt: env.Now()}
		a.Signature = operators.Sign(alice, a.SigningBytes(id))
		bad := a
		bad.Override = true // not what was signed
		tampered = update(env, workflows.UpdateApprove, "t", bad)
		b := a
		b.By = "bob"
		b.Signature = operators.Sign(bob, b.SigningBytes(id))
		stranger = update(env, workflows.UpdateApprove, "s", b)
		r := workflows.ResolveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Outcome: workflows.OutcomeFailed, By: "alice", SentAt: env.Now()}
		r.Signature = operators.Sign(alice, r.SigningBytes(id))
		resolver = update(env, workflows.UpdateResolve, "r", r)
		good = update(env, workflows.UpdateApprove, "g", a)
	}, time.Minute)
	st := run(t, env, p)
	require.ErrorContains(t, unsigned.rejected, "sign the decision")
	require.ErrorContains(t, tampered.rejected, "not verified")
	require.ErrorContains(t, stranger.rejected, "not verified", "an operator not in the file")
	require.Error(t, resolver.rejected, "alice may approve, not resolve (and no outcome question is open)")
	require.NoError(t, good.err)
	require.True(t, good.result.Verified)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.True(t, st.Steps[0].Decisions[0].Verified)
	trail, err := h.ledger.Decisions(context.Background(), "e9:1:1:refund")
	require.NoError(t, err)
	require.True(t, trail[len(trail)-1].Verified)
	require.False(t, trail[len(trail)-1].SentAt.IsZero())
}

// A step with a hold reason asks a person first, with the reason on the
// card; rejected, nothing runs.
func TestHeldStepAsksAPersonFirst(t *testing.T) {
	for _, approve := range []bool{true, false} {
		h := newHarness(t)
		env := h.env()
		s := step("charge", "o1", 100)
		s.Hold = "suspected duplicate of e10:1:1:charge (same tool and arguments 30s earlier, sent without a key)"
		p := newPlan("e10", s)
		var q workflows.Question
		env.RegisterDelayedCallback(func() {
			q = openQuestion(t, status(t, env))
			update(env, workflows.UpdateApprove, "d", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "ops", Approved: approve})
		}, time.Minute)
		st := run(t, env, p)
		require.Equal(t, workflows.QuestionApproval, q.Kind)
		require.Contains(t, q.Card.Rule, "suspected duplicate")
		if approve {
			require.Equal(t, workflows.SagaSucceeded, st.State)
			require.Equal(t, 1, h.p.count("charge"))
		} else {
			require.Equal(t, workflows.SagaFailed, st.State)
			require.Empty(t, h.p.callsOf("charge"), "a rejected hold runs nothing")
		}
	}
}

// Issue 35, item 8: a decision Update refused by its validator (bob is not
// in the operators file; alice has no resolve right) leaves no history, and
// is still in the audit trail through Saga.Refused: who, the question, the
// step's key, when, and why. alice then rejects: the key has no operation
// row (nothing ran) and its trail holds the refused attempts and the
// rejection.
func TestRefusedUpdatesAreInTheAuditTrail(t *testing.T) {
	h := newHarness(t)
	ring, alice, bob := keyring(t)
	h.operators = ring
	h.refused = func(d ledger.DecisionRecord) {
		_, err := h.ledger.RecordDecision(context.Background(), d)
		require.NoError(t, err)
	}
	env := h.env()
	p := newPlan("e35", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var stranger, resolver, reject *answer
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		st := status(t, env)
		b := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Fingerprint: fp, By: "bob", Approved: true, SentAt: env.Now()}
		b.Signature = operators.Sign(bob, b.SigningBytes(st.WorkflowID))
		stranger = update(env, workflows.UpdateApprove, "s", b)
		r := workflows.ResolveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Outcome: workflows.OutcomeFailed, By: "alice", SentAt: env.Now()}
		r.Signature = operators.Sign(alice, r.SigningBytes(st.WorkflowID))
		resolver = update(env, workflows.UpdateResolve, "r", r)
		a := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Fingerprint: fp, By: "alice", Approved: false, Reason: "not this order", SentAt: env.Now()}
		a.Signature = operators.Sign(alice, a.SigningBytes(st.WorkflowID))
		reject = update(env, workflows.UpdateApprove, "a", a)
	}, time.Minute)
	st := run(t, env, p)
	require.Error(t, stranger.rejected)
	require.Error(t, resolver.rejected)
	require.NoError(t, reject.err)
	require.Equal(t, workflows.SagaFailed, st.State)
	require.Empty(t, h.p.callsOf("refund"))

	const key = "e35:1:1:refund"
	_, err := h.ledger.Get(context.Background(), key)
	require.ErrorIs(t, err, ledger.ErrNotFound, "nothing ran")
	trail, err := h.ledger.Decisions(context.Background(), key)
	require.NoError(t, err)
	require.Len(t, trail, 3, "%+v", trail)
	require.Equal(t, "refused", trail[0].Kind)
	require.Equal(t, "bob", trail[0].By)
	require.Contains(t, trail[0].Refused, "not verified")
	require.Contains(t, trail[0].Note, "approve Update")
	require.Equal(t, "refused", trail[1].Kind)
	require.Equal(t, "alice", trail[1].By)
	require.Contains(t, trail[1].Note, "resolve Update")
	require.NotEmpty(t, trail[1].Refused)
	require.False(t, trail[0].AppliedAt.IsZero())
	require.Equal(t, "reject", trail[2].Kind)
	require.Equal(t, "alice", trail[2].By)
	require.True(t, trail[2].Verified)
}

package workflows_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// The decision rules of issue 16 (items 9, 10, 12, 13, 14 and the promises
// no test guarded). Each test fails when its rule is switched off.

// ringOf returns a keyring in which each key may approve and resolve.
func ringOf(t *testing.T, names ...string) (*operators.Keyring, map[string]*operators.Key) {
	t.Helper()
	keys := map[string]*operators.Key{}
	var f operators.File
	for _, n := range names {
		k, err := operators.NewKey(n, rand.Reader)
		require.NoError(t, err)
		keys[n] = k
		f.Operators = append(f.Operators, k.Entry())
	}
	b, err := json.Marshal(f)
	require.NoError(t, err)
	ring, err := operators.Parse(b)
	require.NoError(t, err)
	return ring, keys
}

func signApprove(k *operators.Key, workflowID string, a workflows.ApproveSignal) workflows.ApproveSignal {
	a.By, a.Signature = k.Name, ""
	a.Signature = operators.Sign(k, a.SigningBytes(workflowID))
	return a
}

func signResolve(k *operators.Key, workflowID string, r workflows.ResolveSignal) workflows.ResolveSignal {
	r.By, r.Signature = k.Name, ""
	r.Signature = operators.Sign(k, r.SigningBytes(workflowID))
	return r
}

// Item 9: a signature answers one question of one run. Alice's approval
// signed for run 1 of the plan (before a reset, or a second run of the same
// workflow ID asking the same question id with the same fingerprint) is
// refused unchanged by the run that asks now; a signed decision without a
// run, as clients before this change signed, is refused with a message that
// says what to do. Signed for the run that asks, it is applied.
func TestSignedDecisionAnswersOneRun(t *testing.T) {
	h := newHarness(t)
	ring, keys := ringOf(t, "alice")
	h.operators = ring
	env := h.env()
	p := newPlan("r9", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var otherRun, noRun, good *answer
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		st := status(t, env)
		require.NotEmpty(t, st.RunID, "the status names its run, for the client to sign")
		q := openQuestion(t, st)
		require.Equal(t, "q1-step1-approval", q.ID)
		a := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, Approved: true, SentAt: env.Now()}
		run1 := a
		run1.RunID = "0193a0c2-run-1-before-the-reset"
		run1 = signApprove(keys["alice"], st.WorkflowID, run1)
		otherRun = update(env, workflows.UpdateApprove, "run1", run1)
		env.SignalWorkflow(workflows.SignalApprove, run1)
		noRun = update(env, workflows.UpdateApprove, "norun", signApprove(keys["alice"], st.WorkflowID, a))
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		st := between
		a := workflows.ApproveSignal{Step: 1, QuestionID: "q1-step1-approval", RunID: st.RunID, Fingerprint: fp, Approved: true, SentAt: env.Now()}
		good = update(env, workflows.UpdateApprove, "good", signApprove(keys["alice"], st.WorkflowID, a))
	}, 2*time.Minute)
	st := run(t, env, p)

	require.ErrorContains(t, otherRun.rejected, "is not this plan's run")
	require.ErrorContains(t, noRun.rejected, "must name its run")
	require.Equal(t, workflows.SagaWaitingApproval, between.State, "the replayed signal changed nothing")
	require.Len(t, between.Steps[0].Decisions, 1)
	require.Contains(t, between.Steps[0].Decisions[0].Refused, "is not this plan's run")
	require.NoError(t, good.err)
	require.True(t, good.result.Applied)
	require.True(t, good.result.Verified)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("refund"))
}

// A signed decision must name its question, for approve and for resolve: a
// signature answers one question only.
func TestSignedDecisionMustNameItsQuestion(t *testing.T) {
	h := newHarness(t)
	ring, keys := ringOf(t, "alice")
	h.operators = ring
	h.p.setLookupDown(true)
	h.p.fail("charge", "lost_request")
	env := h.env()
	p := newPlan("r9q", step("refund", "o1", 90000), step("charge", "o1", 100))
	fp, _ := p.StepFingerprint(1)
	var approveUnnamed, approveNamed, resolveUnnamed, resolveNamed *answer
	env.RegisterDelayedCallback(func() {
		st := status(t, env)
		a := workflows.ApproveSignal{Step: 1, RunID: st.RunID, Fingerprint: fp, Approved: true, SentAt: env.Now()}
		approveUnnamed = update(env, workflows.UpdateApprove, "a-unnamed", signApprove(keys["alice"], st.WorkflowID, a))
		a.QuestionID = openQuestion(t, st).ID
		approveNamed = update(env, workflows.UpdateApprove, "a-named", signApprove(keys["alice"], st.WorkflowID, a))
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		h.p.setLookupDown(false)
		st := status(t, env)
		q := openQuestion(t, st)
		require.Equal(t, workflows.QuestionOutcome, q.Kind)
		r := workflows.ResolveSignal{Step: 2, RunID: st.RunID, Outcome: workflows.OutcomeRetry, SentAt: env.Now()}
		resolveUnnamed = update(env, workflows.UpdateResolve, "r-unnamed", signResolve(keys["alice"], st.WorkflowID, r))
		r.QuestionID = q.ID
		resolveNamed = update(env, workflows.UpdateResolve, "r-named", signResolve(keys["alice"], st.WorkflowID, r))
	}, 2*time.Hour)
	st := run(t, env, p)
	require.ErrorContains(t, approveUnnamed.rejected, "must name its question")
	require.NoError(t, approveNamed.err)
	require.ErrorContains(t, resolveUnnamed.rejected, "must name its question")
	require.NoError(t, resolveNamed.err)
	require.Equal(t, workflows.SagaSucceeded, st.State)
}

// The sent_at window of a signed decision is checked: signed too long ago
// or too far ahead, it is refused.
func TestSignedDecisionOutsideItsWindowIsRefused(t *testing.T) {
	h := newHarness(t)
	ring, keys := ringOf(t, "alice")
	h.operators = ring
	env := h.env()
	p := newPlan("r9w", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var old, ahead *answer
	env.RegisterDelayedCallback(func() {
		st := status(t, env)
		a := workflows.ApproveSignal{Step: 1, QuestionID: openQuestion(t, st).ID, RunID: st.RunID, Fingerprint: fp, Approved: true}
		a.SentAt = env.Now().Add(-workflows.MaxClockSkew - time.Minute)
		old = update(env, workflows.UpdateApprove, "old", signApprove(keys["alice"], st.WorkflowID, a))
		a.SentAt = env.Now().Add(workflows.MaxClockSkew + time.Minute)
		ahead = update(env, workflows.UpdateApprove, "ahead", signApprove(keys["alice"], st.WorkflowID, a))
		a.SentAt = env.Now().Add(-time.Minute)
		update(env, workflows.UpdateApprove, "reject", signApprove(keys["alice"], st.WorkflowID, workflows.ApproveSignal{
			Step: 1, QuestionID: a.QuestionID, RunID: st.RunID, Fingerprint: fp, SentAt: env.Now(), Reason: "end the test"}))
	}, time.Minute)
	st := run(t, env, p)
	require.ErrorContains(t, old.rejected, "away from now")
	require.ErrorContains(t, ahead.rejected, "away from now")
	require.Equal(t, workflows.SagaFailed, st.State)
	require.Empty(t, h.p.callsOf("refund"))
}

// Item 10: four eyes compares identities in one normal form, and identities
// with invisible characters are refused: "José" in NFD cannot approve the
// plan "José" in NFC requested; "alice" followed by a zero-width space is
// refused as a decider and as a requester.
func TestFourEyesInOneNormalForm(t *testing.T) {
	const joseNFC, joseNFD = "Jos\u00e9", "Jose\u0301"
	for _, c := range []struct{ requester, by string }{{joseNFC, joseNFD}, {joseNFD, joseNFC}, {"alice", "ALICE"}} {
		h := newHarness(t)
		env := h.env()
		p := newPlan("r10", step("refund", "o1", 90000))
		p.RequestedBy = c.requester
		fp, _ := p.StepFingerprint(1)
		var self *answer
		var between workflows.Status
		env.RegisterDelayedCallback(func() {
			q := openQuestion(t, status(t, env))
			self = update(env, workflows.UpdateApprove, "self", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: c.by, Approved: true})
			env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: c.by, Approved: true})
		}, time.Minute)
		env.RegisterDelayedCallback(func() {
			between = status(t, env)
			update(env, workflows.UpdateApprove, "other", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
		}, 2*time.Minute)
		st := run(t, env, p)
		require.ErrorContains(t, self.rejected, "four eyes", "%q approving the plan of %q", c.by, c.requester)
		require.Len(t, between.Steps[0].Decisions, 1)
		require.Contains(t, between.Steps[0].Decisions[0].Refused, "four eyes", "the signal too")
		require.Equal(t, workflows.SagaSucceeded, st.State)
		require.Equal(t, 1, h.p.count("refund"))
	}

	t.Run("invisible characters", func(t *testing.T) {
		h := newHarness(t)
		env := h.env()
		p := newPlan("r10z", step("refund", "o1", 90000))
		p.RequestedBy = "alice"
		fp, _ := p.StepFingerprint(1)
		got := map[string]*answer{}
		var between workflows.Status
		bys := []string{"alice\u200b", "ali\u00adce", "\u3164alice", "alice\ufe0f", "ali\nce", "ali\tce"}
		env.RegisterDelayedCallback(func() {
			for _, by := range bys {
				got[by] = update(env, workflows.UpdateApprove, by, workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: by, Approved: true})
				env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: by, Approved: true})
			}
		}, time.Minute)
		env.RegisterDelayedCallback(func() {
			between = status(t, env)
			update(env, workflows.UpdateApprove, "other", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: false})
		}, 2*time.Minute)
		st := run(t, env, p)
		for _, by := range bys {
			require.Error(t, got[by].rejected, "%q", by)
			require.Regexp(t, "by holds (an invisible|a control)", got[by].rejected.Error(), "%q", by)
		}
		require.Len(t, between.Steps[0].Decisions, len(bys), "every signal refused")
		for _, d := range between.Steps[0].Decisions {
			require.Regexp(t, "by holds (an invisible|a control)", d.Refused)
		}
		require.Equal(t, workflows.SagaFailed, st.State)
		require.Empty(t, h.p.callsOf("refund"))
	})

	t.Run("requested_by", func(t *testing.T) {
		h := newHarness(t)
		env := h.env()
		p := newPlan("r10r", step("refund", "o1", 90000))
		p.RequestedBy = "alice\u200b"
		executePlan(env, p)
		require.True(t, env.IsWorkflowCompleted())
		require.ErrorContains(t, env.GetWorkflowError(), "requested_by")
		require.ErrorContains(t, env.GetWorkflowError(), "invisible")
		require.Empty(t, h.p.callsOf("refund"))
	})
}

// Item 12 (and the early check): a decision that arrives in the workflow
// task that opens its question was sent before the question existed, as a
// SignalWithStart carrying an approve for the predictable
// q1-step1-approval is: it is refused, named or not, and the question stays
// open for a person who saw it.
func TestEarlyDecisionNamingItsQuestionIsRefused(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	s := step("charge", "o1", 100)
	s.Hold = "suspected duplicate (test)"
	p := newPlan("r12", s) // no guard: the question opens in the first workflow task
	fp, _ := p.StepFingerprint(1)
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, QuestionID: "q1-step1-approval", Fingerprint: fp, By: "mallory", Approved: true})
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "mallory", Approved: true})
	}, 0)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		q := openQuestion(t, between)
		update(env, workflows.UpdateApprove, "seen", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: "bob", Approved: false, Reason: "not mine"})
	}, time.Minute)
	st := run(t, env, p)
	require.Equal(t, "q1-step1-approval", openQuestion(t, between).ID, "the early decisions left the question open")
	require.Len(t, between.Steps[0].Decisions, 2)
	for _, d := range between.Steps[0].Decisions {
		require.Contains(t, d.Refused, "arrived as question q1-step1-approval opened")
	}
	require.Equal(t, workflows.SagaFailed, st.State, "bob, who saw the question, rejected it")
	require.Empty(t, h.p.callsOf("charge"), "mallory's early approval ran nothing")
}

// Another decision for an answered question is refused, not reported as
// "already applied"; a second decision while the first is pending (being
// checked with the provider; applied but not yet acted on is
// TestDecisionWhileTheFirstIsPendingIsRefused) is refused too.
func TestAnotherDecisionForAnAnsweredQuestionIsRefused(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("r-other", step("refund", "o1", 90000), step("refund", "o2", 90000))
	fp, _ := p.StepFingerprint(1)
	fp2, _ := p.StepFingerprint(2)
	var first, pending, later *answer
	var qid string
	env.RegisterDelayedCallback(func() {
		qid = openQuestion(t, status(t, env)).ID
		first = update(env, workflows.UpdateApprove, "alice", workflows.ApproveSignal{Step: 1, QuestionID: qid, Fingerprint: fp, By: "alice", Approved: true})
		pending = update(env, workflows.UpdateApprove, "bob", workflows.ApproveSignal{Step: 1, QuestionID: qid, Fingerprint: fp, By: "bob", Approved: false})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		// Step 2 asks now; step 1's question is closed.
		require.Equal(t, 2, openQuestion(t, status(t, env)).Step)
		later = update(env, workflows.UpdateApprove, "carol", workflows.ApproveSignal{Step: 1, QuestionID: qid, Fingerprint: fp, By: "carol", Approved: false})
	}, 2*time.Minute)
	env.RegisterDelayedCallback(func() {
		update(env, workflows.UpdateApprove, "step2", workflows.ApproveSignal{Step: 2, Fingerprint: fp2, By: "bob", Approved: true})
	}, 3*time.Minute)
	st := run(t, env, p)
	require.NoError(t, first.err)
	require.True(t, first.result.Applied)
	require.Error(t, pending.rejected, "bob's rejection came while alice's approval was pending")
	require.Contains(t, pending.rejected.Error(), "already answered by alice")
	require.Error(t, later.rejected, "carol's came after the question closed")
	require.Contains(t, later.rejected.Error(), "already answered by alice")
	require.NotContains(t, later.rejected.Error(), "already applied")
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 2, h.p.count("refund"))

	t.Run("while checked with the provider", func(t *testing.T) {
		h := newHarness(t)
		h.p.setLookupDown(true)
		h.p.fail("charge", "commit_then_drop")
		env := h.env()
		var first, second *answer
		env.RegisterDelayedCallback(func() {
			h.p.setLookupDown(false)
			q := openQuestion(t, status(t, env))
			first = update(env, workflows.UpdateResolve, "ok", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeSucceeded, By: "ops"})
			second = update(env, workflows.UpdateResolve, "retry", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "bob"})
		}, time.Hour)
		st := run(t, env, newPlan("r-check", step("charge", "o1", 100)))
		require.NoError(t, first.err)
		require.True(t, first.result.Applied)
		require.Error(t, second.rejected)
		require.Contains(t, second.rejected.Error(), "being checked with the provider")
		require.Equal(t, workflows.SagaSucceeded, st.State)
		require.Len(t, h.p.callsOf("charge"), 1, "the retry was not taken")
	})
}

// Item 14: a repeated identical decision reports applied false. Through a
// new Update ID the workflow says so itself; through the same Update ID
// Temporal answers with the first result, which names the first decision's
// sent_at, so the client (sagaclient) can tell its repeat from it.
func TestDoubleClickReportsNotApplied(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("r14", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var first, sameID, newID *answer
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		a := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: "bob", Approved: true, SentAt: t0}
		first = update(env, workflows.UpdateApprove, "decision:1", a)
		a.SentAt = t0.Add(time.Second)
		sameID = update(env, workflows.UpdateApprove, "decision:1", a)
		newID = update(env, workflows.UpdateApprove, "decision:2", a)
	}, time.Minute)
	st := run(t, env, p)
	require.NoError(t, first.err)
	require.True(t, first.result.Applied)
	require.True(t, first.result.SentAt.Equal(t0))
	require.NoError(t, sameID.err)
	require.True(t, sameID.result.SentAt.Equal(t0), "the first decision's result: its sent_at is not the repeat's")
	require.NoError(t, newID.err)
	require.False(t, newID.result.Applied, "the second click is the same decision, applied once")
	require.Contains(t, newID.result.Message, "already applied")
	require.True(t, newID.result.SentAt.Equal(t0))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, 1, h.p.count("refund"))
}

// sagaEnv is h.env with the saga's limits and extra tools.
func (h *harness) sagaEnv(limits plan.Limits, extra ...tool.Tool) *testsuite.TestWorkflowEnvironment {
	if len(extra) > 0 {
		reg, err := tool.NewRegistry(append(tools(h.p), extra...)...)
		require.NoError(h.t, err)
		h.reg = reg
	}
	h.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := h.NewTestWorkflowEnvironment()
	h.acts = &activities.Activities{Tools: h.reg, Ledger: h.ledger}
	sagaworker.Register(env, &workflows.Saga{Specs: h.reg.Specs(), Operators: h.operators, Limits: limits}, h.acts)
	return env
}

// An approval expires after the tool's own window, not the default one.
func TestApprovalExpiresAfterTheToolsWindow(t *testing.T) {
	h := newHarness(t)
	spec := specOf("quick_refund", tool.NonIdempotentWrite)
	spec.Approval = &tool.Approval{Always: true, Window: 2 * time.Hour}
	env := h.sagaEnv(plan.Limits{}, &fakeTool{spec, h.p})
	start := env.Now()
	st := run(t, env, newPlan("r-exp", step("quick_refund", "o1", 100)))
	took := env.Now().Sub(start)
	require.True(t, took >= 2*time.Hour && took < 3*time.Hour, "expired after the tool's 2 h window, took %s", took)
	require.Contains(t, st.Steps[0].LastError, "expired after 2h0m0s")
	require.Empty(t, h.p.callsOf("quick_refund"))
}

// The workflow enforces max_steps for a plan any client starts (here: by
// workflow name, without the client's validation).
func TestWorkflowEnforcesMaxSteps(t *testing.T) {
	h := newHarness(t)
	env := h.sagaEnv(plan.Limits{MaxSteps: 2})
	executePlan(env, newPlan("r-max", step("charge", "o1", 1), step("charge", "o2", 1), step("charge", "o3", 1)))
	require.True(t, env.IsWorkflowCompleted())
	require.ErrorContains(t, env.GetWorkflowError(), "max_steps")
	require.Empty(t, h.p.callsOf("charge"), "nothing ran")
}

// A resolve with an answer the open question does not offer is refused:
// the provider holds another effect under the key, so only failed is
// offered, never retry.
func TestResolveWithAnAnswerNotOfferedIsRefused(t *testing.T) {
	h := newHarness(t)
	h.p.fail("pay", "lost_request")
	h.p.fail("pay.lookup", "lookup_other")
	env := h.env()
	var offered []string
	var retry *answer
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		offered = q.Answers
		retry = update(env, workflows.UpdateResolve, "retry", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
		env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateResolve, "failed", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops"})
	}, 2*time.Hour)
	st := run(t, env, newPlan("r-offer", step("pay", "o1", 100)))
	require.Equal(t, []string{string(workflows.OutcomeSucceeded), string(workflows.OutcomeFailed)}, offered, "adopt (naming the effect) or not")
	require.ErrorContains(t, retry.rejected, "accepts succeeded, failed, not \"retry\"")
	require.Equal(t, workflows.SagaFailed, st.State)
	require.Len(t, h.p.callsOf("pay"), 1, "never sent again")
}

// Item 13 (unit): refused signals are bounded before anything is looked at
// and recorded clipped, and only the first MaxRefusedRecorded are recorded:
// a flood of oversize refused signals leaves the plan alive, its status
// small, and its audit trail bounded.
func TestRefusedSignalsAreRecordedWithinBounds(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("r13", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	huge := strings.Repeat("f", 64<<10) // far over every limit
	const flood = workflows.MaxRefusedRecorded + 30
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		for i := range flood {
			switch i % 3 {
			case 0: // an oversize fingerprint, otherwise a good approval
				env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: huge, By: "bob", Approved: true, Reason: huge})
			case 1: // every field oversize
				env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, QuestionID: huge, RunID: huge, Fingerprint: huge, By: huge, Reason: huge, Signature: huge})
			default:
				env.SignalWorkflow(workflows.SignalResolve, workflows.ResolveSignal{Step: 1, QuestionID: huge, Outcome: workflows.Outcome(huge), By: huge, Note: huge, ExternalID: huge})
			}
		}
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		update(env, workflows.UpdateApprove, "ok", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
	}, 2*time.Minute)
	st := run(t, env, p)

	require.Equal(t, flood, between.RefusedSignals, "every refusal counted")
	require.Len(t, between.Steps[0].Decisions, workflows.MaxRefusedRecorded, "only the first ones recorded")
	for _, d := range between.Steps[0].Decisions {
		require.NotEmpty(t, d.Refused)
		require.Regexp(t, "^(the decision|fingerprint|question_id|run_id|signature|outcome|by) is [0-9]+ bytes", d.Refused, "bounded first, nothing else looked at")
		require.LessOrEqual(t, len(d.Refused), workflows.MaxRefusedReasonLen+len("…"))
		require.LessOrEqual(t, len(d.Note), workflows.MaxRefusedNoteLen+len("…"))
		require.LessOrEqual(t, len(d.By), workflows.MaxByLen+len("…"))
		require.LessOrEqual(t, len(d.QuestionID), workflows.MaxQuestionIDLen+len("…"))
	}
	b, err := json.Marshal(between)
	require.NoError(t, err)
	require.Less(t, len(b), 64<<10, "the status stays small: %d bytes", len(b))
	require.Equal(t, workflows.SagaSucceeded, st.State, "the plan lived through the flood")
	require.Equal(t, 1, h.p.count("refund"))
	trail, err := h.ledger.Decisions(context.Background(), "r13:1:1:refund")
	require.NoError(t, err)
	require.Len(t, trail, workflows.MaxRefusedRecorded+1, "the recorded refusals and the approval")
	for _, d := range trail[:workflows.MaxRefusedRecorded] {
		require.Equal(t, "refused", d.Kind)
		require.LessOrEqual(t, len(d.Note)+len(d.Refused)+len(d.By)+len(d.QuestionID), 1200)
	}
	require.Equal(t, ledger.Succeeded, st.Steps[0].State)
}

// A plan whose history is past RefusalHistoryBound records no refusal at
// all: it only counts them.
func TestRefusalsAreNotRecordedPastTheHistoryBound(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("r13h", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		env.SetCurrentHistorySize(workflows.RefusalHistoryBound + 1)
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: "stale", By: "bob", Approved: true})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		update(env, workflows.UpdateApprove, "ok", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
	}, 2*time.Minute)
	st := run(t, env, p)
	require.Equal(t, 1, between.RefusedSignals)
	require.Empty(t, between.Steps[0].Decisions, "counted, not recorded")
	require.Equal(t, workflows.SagaSucceeded, st.State)
	trail, err := h.ledger.Decisions(context.Background(), "r13h:1:1:refund")
	require.NoError(t, err)
	require.Len(t, trail, 1, "only the approval is in the audit trail")
}

// A refusal is masked before it is clipped: a card number across the clip
// is never kept in part.
func TestRefusalIsMaskedBeforeItIsClipped(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	p := newPlan("r13m", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	note := strings.Repeat("x", workflows.MaxRefusedNoteLen-10) + " 4111 1111 1111 1111"
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, Fingerprint: "stale", By: "bob", Approved: true, Reason: note})
	}, time.Minute)
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		update(env, workflows.UpdateApprove, "no", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob"})
	}, 2*time.Minute)
	run(t, env, p)
	require.Len(t, between.Steps[0].Decisions, 1)
	require.NotContains(t, between.Steps[0].Decisions[0].Note, "4111", "%q", between.Steps[0].Decisions[0].Note)
}

// Issue 35, item 2: four eyes compares the requester and the approver by
// their TS #39 skeleton: a plan requested by full-width ａｌｉｃｅ, by аlice
// with a Cyrillic а, or by аӏісе all in Cyrillic cannot be approved by
// alice, by the Update or the signal; bob's approval makes the one refund.
func TestFourEyesByConfusableSkeleton(t *testing.T) {
	for _, requester := range []string{"ａｌｉｃｅ", "\u0430lice", "\u0430\u04cf\u0456\u0441\u0435"} {
		h := newHarness(t)
		env := h.env()
		p := newPlan("r35", step("refund", "o1", 90000))
		p.RequestedBy = requester
		fp, _ := p.StepFingerprint(1)
		var self *answer
		var between workflows.Status
		env.RegisterDelayedCallback(func() {
			q := openQuestion(t, status(t, env))
			self = update(env, workflows.UpdateApprove, "self", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: "alice", Approved: true})
			env.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: fp, By: "alice", Approved: true})
		}, time.Minute)
		env.RegisterDelayedCallback(func() {
			between = status(t, env)
			update(env, workflows.UpdateApprove, "other", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
		}, 2*time.Minute)
		st := run(t, env, p)
		require.ErrorContains(t, self.rejected, "four eyes", "alice approving the plan of %q", requester)
		require.Len(t, between.Steps[0].Decisions, 1)
		require.Contains(t, between.Steps[0].Decisions[0].Refused, "four eyes", "the signal too")
		require.Equal(t, workflows.SagaSucceeded, st.State)
		require.Equal(t, 1, h.p.count("refund"), "refunds made for %q", requester)
	}
}

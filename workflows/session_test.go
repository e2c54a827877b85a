package workflows_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

type turnAnswer struct {
	rejected error
	result   workflows.TurnResult
	err      error
	done     bool
}

func sendTurn(env *testsuite.TestWorkflowEnvironment, session string, turn int, steps ...plan.Step) *turnAnswer {
	return sendTurnAs(env, workflows.TurnUpdateID(session, turn), turn, steps...)
}

// sendTurnAs sends a turn under an explicit Update ID (Temporal deduplicates
// Update IDs only within one run: after continue-as-new, a resent turn
// reaches the workflow's own check).
func sendTurnAs(env *testsuite.TestWorkflowEnvironment, updateID string, turn int, steps ...plan.Step) *turnAnswer {
	return sendRequest(env, updateID, workflows.TurnRequest{Turn: turn, Steps: steps})
}

// sendRequest sends a whole TurnRequest under updateID.
func sendRequest(env *testsuite.TestWorkflowEnvironment, updateID string, t workflows.TurnRequest) *turnAnswer {
	a := &turnAnswer{}
	env.UpdateWorkflow(workflows.UpdateTurn, updateID, &testsuite.TestUpdateCallback{
		OnAccept: func() {},
		OnReject: func(err error) { a.rejected, a.done = err, true },
		OnComplete: func(v any, err error) {
			a.done, a.err = true, err
			if r, ok := v.(workflows.TurnResult); ok {
				a.result = r
			}
		},
	}, t)
	return a
}

func endSession(env *testsuite.TestWorkflowEnvironment, outcome string) {
	env.UpdateWorkflow(workflows.UpdateEnd, "end", &testsuite.TestUpdateCallback{
		OnAccept: func() {}, OnReject: func(error) {}, OnComplete: func(any, error) {},
	}, workflows.EndRequest{Outcome: outcome, By: "agent"})
}

// A session of five turns with a lost response, an approval and a resent
// turn ends with one effect per intent; `end failed` reverses the session's
// writes newest first.
func TestSessionTurnsRunOnTheEngine(t *testing.T) {
	h := newHarness(t)
	h.p.fail("charge", "commit_then_drop")
	env := h.env()
	var t1, t1again, t1changed, t2, t3, t4, t5 *turnAnswer
	var waiting workflows.TurnResult
	at := func(d time.Duration, f func()) { env.RegisterDelayedCallback(f, d) }
	at(time.Second, func() { t1 = sendTurn(env, "ss1", 1, step("read_order", "o1", 1), step("charge", "o1", 100)) })
	at(2*time.Second, func() {
		t1again = sendTurn(env, "ss1", 1, step("read_order", "o1", 1), step("charge", "o1", 100))
		t1changed = sendTurnAs(env, "changed", 1, step("read_order", "o1", 1), step("charge", "o1", 999))
	})
	at(3*time.Second, func() { t2 = sendTurn(env, "ss1", 2, step("invoice", "o1", 100)) })
	at(4*time.Second, func() { t3 = sendTurn(env, "ss1", 3, step("refund", "o1", 90000)) })
	at(5*time.Second, func() {
		waiting = t3.result
		q := openQuestion(t, status(t, env))
		update(env, workflows.UpdateApprove, "a", workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "bob", Approved: true})
	})
	var t3final workflows.TurnResult
	at(6*time.Second, func() {
		v, err := env.QueryWorkflow(workflows.QueryTurn, 3)
		require.NoError(t, err)
		require.NoError(t, v.Get(&t3final))
	})
	at(7*time.Second, func() { t4 = sendTurn(env, "ss1", 4, step("read_order", "o2", 1)) })
	at(8*time.Second, func() { t5 = sendTurn(env, "ss1", 5, step("charge", "o2", 200)) })
	at(9*time.Second, func() { endSession(env, "failed") })
	runSession(env, workflows.SessionStart{SessionID: "ss1"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var st workflows.Status
	require.NoError(t, env.GetWorkflowResult(&st))

	require.NoError(t, t1.err)
	require.Equal(t, workflows.TurnSucceeded, t1.result.State)
	require.Equal(t, "ss1:1:2:charge", t1.result.Steps[1].Key, "keys are {session}:{turn}:{step}:{tool}")
	require.Equal(t, t1.result.Steps, t1again.result.Steps, "a resent turn returns the first result")
	require.ErrorContains(t, t1changed.rejected, "conflict")
	require.Equal(t, workflows.TurnSucceeded, t2.result.State)
	require.Equal(t, workflows.TurnWaiting, waiting.State, "a turn that waits returns its open question")
	require.NotNil(t, waiting.Question)
	require.Equal(t, workflows.QuestionApproval, waiting.Question.Kind)
	require.Equal(t, workflows.TurnSucceeded, t3final.State, "read again later, the turn returns its final result")
	require.Equal(t, waiting.Fingerprint, t3final.Fingerprint)
	require.Equal(t, workflows.TurnSucceeded, t4.result.State)
	require.Equal(t, workflows.TurnSucceeded, t5.result.State)

	require.Len(t, h.p.callsOf("charge"), 2, "turn 1's charge once (lost response reconciled), turn 5's once")
	require.Equal(t, 2, h.p.count("charge"))
	require.Equal(t, 1, h.p.count("refund"))
	require.Equal(t, workflows.SagaCompensated, st.State)
	// Reversed newest first: turn 5's charge, turn 3's refund, turn 2's
	// invoice, turn 1's charge.
	var order []string
	for _, c := range h.p.calls {
		if len(c) > 8 && (c[:8] == "charge_r" || c[:8] == "invoice_") {
			order = append(order, c)
		}
	}
	require.Equal(t, []string{
		"charge_reverse ss1:5:1:charge:compensate", "charge_reverse ss1:3:1:refund:compensate",
		"invoice_storno ss1:2:1:invoice:compensate", "charge_reverse ss1:1:2:charge:compensate",
	}, order)
}

// A turn whose step fails for good reports the failure to the agent and
// compensates the turn's own writes; earlier turns' writes stay.
func TestSessionFailedTurnCompensatesItsOwnWrites(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject")
	env := h.env()
	var t1, t2 *turnAnswer
	env.RegisterDelayedCallback(func() { t1 = sendTurn(env, "ss2", 1, step("charge", "o1", 100)) }, time.Second)
	env.RegisterDelayedCallback(func() { t2 = sendTurn(env, "ss2", 2, step("invoice", "o1", 100), step("ship", "o1", 100)) }, 2*time.Second)
	env.RegisterDelayedCallback(func() { endSession(env, "succeeded") }, 3*time.Second)
	runSession(env, workflows.SessionStart{SessionID: "ss2"})
	require.NoError(t, env.GetWorkflowError())
	var st workflows.Status
	require.NoError(t, env.GetWorkflowResult(&st))
	require.Equal(t, workflows.TurnSucceeded, t1.result.State)
	require.Equal(t, workflows.TurnFailed, t2.result.State)
	require.Contains(t, t2.result.Error, "step 2 (ship) failed")
	require.Equal(t, ledger.Compensated, t2.result.Steps[0].State, "the failed turn's invoice was reversed")
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Equal(t, ledger.Succeeded, st.Steps[0].State, "turn 1's charge is kept")
	require.Empty(t, h.p.callsOf("charge_reverse"))
	require.Equal(t, 1, h.p.count("invoice_storno"))
}

// A client cannot hand a session a made-up state: carry comes only from the
// session's own continue-as-new.
func TestSessionRefusesACarryFromAClient(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	runSession(env, workflows.SessionStart{SessionID: "ss3", Carry: &workflows.SessionCarry{
		Status: workflows.Status{Steps: []workflows.StepStatus{{Step: 1, Tool: "charge", Key: "ss3:1:1:charge", ExternalID: "ch_never", State: ledger.Succeeded}}},
		Args:   []json.RawMessage{json.RawMessage(`{"order_id":"o1","amount_minor":99999999999}`)}, Stack: []int{1}}})
	require.ErrorContains(t, env.GetWorkflowError(), "clients leave it empty")
	require.Empty(t, h.p.callsOf("charge_reverse"), "nothing was reversed on a made-up state")
}

// A session is bounded: a turn that would take it past MaxSessionSteps is
// refused, naming the limit.
func TestSessionIsBounded(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	var big *turnAnswer
	fifty := make([]plan.Step, 0, 50)
	for i := 0; i < 50; i++ {
		fifty = append(fifty, step("read_order", "o1", 1))
	}
	for turn := 1; turn <= workflows.MaxSessionSteps/50; turn++ {
		env.RegisterDelayedCallback(func() { sendTurn(env, "ss4", turn, fifty...) }, time.Duration(turn)*time.Second)
	}
	env.RegisterDelayedCallback(func() {
		big = sendTurn(env, "ss4", workflows.MaxSessionSteps/50+1, step("read_order", "o1", 1))
	}, time.Minute)
	env.RegisterDelayedCallback(func() { endSession(env, "succeeded") }, 2*time.Minute)
	runSession(env, workflows.SessionStart{SessionID: "ss4"})
	require.NoError(t, env.GetWorkflowError())
	require.Error(t, big.rejected)
	require.Contains(t, big.rejected.Error(), "MaxSessionSteps")
}

// A turn's requester is whoever sent it: alice's turn in bob's session says
// "requested by alice" on its card and four eyes refuses alice's approval;
// a turn that names nobody is the session's requester's.
func TestSessionTurnIsRequestedByItsSender(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	var alices, bobs *turnAnswer
	var selfApproval, bobsSelf, carolOnAlice, carolOnBob *answer
	var aliceCard, bobCard workflows.Card
	at := func(d time.Duration, f func()) { env.RegisterDelayedCallback(f, d) }
	at(time.Second, func() {
		alices = sendRequest(env, "ss5:1", workflows.TurnRequest{Turn: 1, RequestedBy: "alice", Steps: []plan.Step{step("refund", "o1", 90000)}})
	})
	at(2*time.Second, func() {
		q := openQuestion(t, status(t, env))
		aliceCard = q.Card
		selfApproval = update(env, workflows.UpdateApprove, "alice-self", workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "alice", Approved: true})
	})
	at(3*time.Second, func() {
		q := openQuestion(t, status(t, env))
		carolOnAlice = update(env, workflows.UpdateApprove, "carol-1", workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "carol", Approved: true})
	})
	at(4*time.Second, func() { bobs = sendTurn(env, "ss5", 2, step("refund", "o2", 90000)) })
	at(5*time.Second, func() {
		q := openQuestion(t, status(t, env))
		bobCard = q.Card
		bobsSelf = update(env, workflows.UpdateApprove, "bob-self", workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "bob", Approved: true})
	})
	at(6*time.Second, func() {
		q := openQuestion(t, status(t, env))
		carolOnBob = update(env, workflows.UpdateApprove, "carol-2", workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "carol", Approved: true})
	})
	at(7*time.Second, func() { endSession(env, "succeeded") })
	runSession(env, workflows.SessionStart{SessionID: "ss5", RequestedBy: "bob"})
	require.NoError(t, env.GetWorkflowError())

	require.Equal(t, "alice", aliceCard.RequestedBy, "the card names the turn's sender, not the session's starter")
	require.ErrorContains(t, selfApproval.rejected, "four eyes", "alice cannot approve her own turn in bob's session")
	require.NoError(t, carolOnAlice.err)
	require.True(t, carolOnAlice.result.Applied)
	require.Equal(t, "bob", bobCard.RequestedBy, "a turn naming nobody is the session's requester's")
	require.ErrorContains(t, bobsSelf.rejected, "four eyes")
	require.NoError(t, carolOnBob.err)
	require.Equal(t, workflows.TurnWaiting, alices.result.State)
	require.Equal(t, workflows.TurnWaiting, bobs.result.State)
	require.Equal(t, 2, h.p.count("refund"), "each refund once, each approved by another person")
}

// The card of a new write shows the identical calls the session already
// made: a second charge of the same order and amount, held for a person,
// lists the first one under "already ran".
func TestSessionCardShowsIdenticalCallsAlreadyMade(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	var card workflows.Card
	held := step("charge", "o1", 100)
	held.Hold = "suspected duplicate of ss6:1:1:charge"
	env.RegisterDelayedCallback(func() { sendTurn(env, "ss6", 1, step("charge", "o1", 100)) }, time.Second)
	env.RegisterDelayedCallback(func() { sendTurn(env, "ss6", 2, step("charge", "o2", 100)) }, 2*time.Second)
	env.RegisterDelayedCallback(func() { sendTurn(env, "ss6", 3, held) }, 3*time.Second)
	env.RegisterDelayedCallback(func() {
		q := openQuestion(t, status(t, env))
		card = q.Card
		update(env, workflows.UpdateApprove, "no", workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "carol", Approved: false})
	}, 4*time.Second)
	env.RegisterDelayedCallback(func() { endSession(env, "succeeded") }, 5*time.Second)
	runSession(env, workflows.SessionStart{SessionID: "ss6"})
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, card.AlreadyRan, 1, "the identical charge, not the other order's: %v", card.AlreadyRan)
	require.Contains(t, card.AlreadyRan[0], "ss6:1:1:charge (succeeded")
	require.Equal(t, 2, h.p.count("charge"), "the held charge was rejected")
}

// runSession runs AgentSession for in under its own workflow ID (a session
// runs only there).
func runSession(env *testsuite.TestWorkflowEnvironment, in workflows.SessionStart) {
	env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflows.SessionWorkflowID(in.SessionID)})
	env.ExecuteWorkflow(workflows.SessionWorkflowName, in)
}

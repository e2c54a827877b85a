package workflows_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// doesOf is what the card says answer does ("" when it says nothing).
func doesOf(c workflows.Card, answer string) string {
	for _, d := range c.Does {
		if d.Answer == answer {
			return d.Does
		}
	}
	return ""
}

// labels are the labels of a card's lines, in order, each once.
func labels(c workflows.Card) []string {
	var out []string
	for _, l := range c.Lines() {
		if len(out) == 0 || out[len(out)-1] != l.Label {
			out = append(out, l.Label)
		}
	}
	return out
}

// answersOf are the answers a card says something about, in its order.
func answersOf(c workflows.Card) []string {
	var out []string
	for _, d := range c.Does {
		out = append(out, d.Answer)
	}
	return out
}

// Issue 36, item 4: the outcome card of an e-mail whose answer was lost
// (the tool cannot look itself up) shows the call's arguments, when the
// call was made and what came back, and what each answer does for this
// tool: retry sends a second e-mail if the first was delivered.
func TestCardOfAnOutcomeQuestionWithoutLookup(t *testing.T) {
	h := newHarness(t)
	h.p.fail("email", "commit_then_drop")
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "f", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops"})
	}, time.Hour)
	run(t, env, newPlan("cc1", step("email", "o1", 1)))
	q := openQuestion(t, seen)
	c := q.Card
	require.Equal(t, workflows.QuestionOutcome, q.Kind)
	require.Equal(t, []string{"order_id: o1", "amount_minor: 0.01"}, c.Arguments)
	require.Len(t, c.Calls, 1, "one call was made")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ, 1 attempt: `, c.Calls[0], "when, and how many attempts")
	require.Contains(t, c.Calls[0], "deadline exceeded", "what came back")
	require.Empty(t, c.Lookup, "the tool cannot look itself up")
	require.Equal(t, []string{"failed", "succeeded", "retry"}, answersOf(c), "one order: no new effect first, a second effect last")
	require.Contains(t, doesOf(c, "retry"), "sends it again at once under the same key")
	require.Contains(t, doesOf(c, "retry"), "if the first was delivered, a second email effect is made")
	require.Contains(t, doesOf(c, "succeeded"), "on your word")
	require.Contains(t, doesOf(c, "failed"), "records that nothing happened")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \(the ledger's time`, c.LastSent, "when the ledger let the request go")
	require.Equal(t, []string{"change", "object", "amount", "argument", "who asked", "rule", "call", "last sent", "if failed", "if succeeded", "if retry", "key"}, labels(c))
}

// The outcome card of a tool that can look itself up shows the provider's
// latest lookup answer, and says that retry looks the key up first and that
// the provider answers the same key with the first effect (an idempotent
// write).
func TestCardOfAnOutcomeQuestionWithLookup(t *testing.T) {
	h := newHarness(t)
	h.p.fail("charge", "commit_then_drop")
	for range 40 {
		h.p.fail("charge.lookup", "lookup_unknown")
	}
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("cc2", step("charge", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	c := openQuestion(t, seen).Card
	require.Len(t, c.Calls, 1)
	require.Regexp(t, `\(lookup \d+\): the provider could not say$`, c.Lookup)
	retry := doesOf(c, "retry")
	require.Contains(t, retry, "looks the key up at the provider first")
	require.Contains(t, retry, "charge is a IDEMPOTENT_WRITE, so the provider answers the same key with the first effect")
	require.Contains(t, doesOf(c, "succeeded"), "asks the provider first")
	require.Contains(t, doesOf(c, "succeeded"), "reversed by charge_reverse")
	require.Contains(t, doesOf(c, "failed"), "recorded as succeeded and reversed")
}

// The reversal card names the reversal's own change and key, the effect
// it undoes (tool, external id, key) and what the provider answered, on
// lines of their own; the rule stays short.
func TestCardOfAReversalQuestion(t *testing.T) {
	h := newHarness(t)
	h.p.fail("ship", "reject")
	h.p.fail("charge_reverse", "reject")
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "f", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeFailed, By: "ops"})
	}, time.Hour)
	run(t, env, newPlan("cc3", step("charge", "o1", 100), step("ship", "o1", 100)))
	q := openQuestion(t, seen)
	c := q.Card
	require.Equal(t, workflows.QuestionReversal, q.Kind)
	require.True(t, strings.HasPrefix(c.Change, "charge_reverse"), "the reversal's own change: %s", c.Change)
	require.Equal(t, "charge effect "+seen.Steps[0].ExternalID+" under key cc3:1:1:charge", c.Reverses)
	require.Equal(t, "cc3:1:1:charge:compensate", c.ReversalKey)
	require.Contains(t, c.ProviderAnswered, "insufficient_funds")
	require.NotContains(t, c.Rule, "insufficient_funds", "the refusal is on its own line, not in the rule")
	require.Less(t, len(c.Rule), 130, "a short rule: %s", c.Rule)
	require.Len(t, c.Calls, 1, "the reversal's calls")
	require.Contains(t, c.Calls[0], "insufficient_funds")
	require.Equal(t, []string{"failed", "succeeded", "retry"}, answersOf(c))
	require.Contains(t, doesOf(c, "retry"), "new reversal request goes out under key cc3:1:1:charge:compensate:2")
	require.Contains(t, doesOf(c, "succeeded"), "reversed by hand")
	require.Contains(t, doesOf(c, "failed"), "stays unreversed")
	require.Equal(t, []string{"change", "reverses", "object", "amount", "argument", "who asked", "rule", "provider answered", "call", "if failed", "if succeeded", "if retry", "key", "reversal key"}, labels(c))
}

// The approval card carries the request's reason (the step's hold text
// when no argument says why), its arguments with money formatted and
// what approve and reject do (a plan refuses secrets in its arguments;
// the card masks them anyway: TestCardMasksAndBoundsWhatItShows).
func TestCardOfAnApprovalQuestion(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	s := step("refund", "o1", 90000)
	s.Hold = "the customer asked twice"
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		q := openQuestion(t, seen)
		update(env, workflows.UpdateApprove, "r", workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "ops", Approved: false})
	}, time.Minute)
	run(t, env, newPlan("cc4", s))
	c := openQuestion(t, seen).Card
	require.Equal(t, "the customer asked twice", c.Reason)
	require.Len(t, c.Arguments, 2)
	require.Equal(t, "amount_minor: 900.00", c.Arguments[1])
	require.Equal(t, "order_id: o1", c.Arguments[0])
	require.Empty(t, c.Calls, "nothing was called yet")
	require.Equal(t, []string{"reject", "approve"}, answersOf(c))
	require.Contains(t, doesOf(c, "approve"), "runs refund once, under key cc4:1:1:refund")
	require.Contains(t, doesOf(c, "reject"), "refund is not run")
	require.Equal(t, []string{"change", "object", "amount", "reason", "argument", "who asked", "rule", "if reject", "if approve", "key"}, labels(c))
}

// A card from before issue 36 has the same JSON, and so the same digest,
// as it had: every field added is omitempty.
func TestOldCardKeepsItsDigest(t *testing.T) {
	c := workflows.Card{Change: "apply_refund: Refund an amount", System: "acquirer", Object: "order_id ord_1", Amount: "600.00 EUR", AmountMinor: 60000,
		Currency: "EUR", RequestID: "r1", RequestedBy: "ana", Session: "s1", Rule: "approval policy", AlreadyRan: []string{"x"}, Key: "s1:1:1:apply_refund"}
	const old = `{"change":"apply_refund: Refund an amount","system":"acquirer","object":"order_id ord_1","amount":"600.00 EUR","amount_minor":60000,"currency":"EUR","request_id":"r1","requested_by":"ana","session":"s1","rule":"approval policy","already_ran":["x"],"key":"s1:1:1:apply_refund"}`
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.Equal(t, old, string(b))
	sum := sha256.Sum256([]byte(old))
	require.Equal(t, workflows.CardDigestPrefix+hex.EncodeToString(sum[:]), workflows.CardDigest(c))
}

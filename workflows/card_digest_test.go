package workflows_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// A signed approval that names the digest of the card its client showed is
// verified (agentsaga-decision-v3) and recorded with that digest; one
// without a digest signs the v2 bytes and still verifies (clients from
// before v3). A v3 signature does not verify with its digest stripped or
// changed, and a malformed digest is refused naming the field and its
// length.
func TestCardDigestIsSignedAndRecorded(t *testing.T) {
	h := newHarness(t)
	ring, keys := ringOf(t, "alice")
	h.operators = ring
	env := h.env()
	p := newPlan("cd1", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var stripped, changed, malformed, good *answer
	var digest string
	env.RegisterDelayedCallback(func() {
		st := status(t, env)
		q := openQuestion(t, st)
		digest = workflows.CardDigest(q.Card)
		a := workflows.ApproveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Fingerprint: fp, Approved: true, Reason: "seen", SentAt: env.Now(), CardDigest: digest}
		signed := signApprove(keys["alice"], st.WorkflowID, a)
		require.True(t, bytes.HasPrefix(signed.SigningBytes(st.WorkflowID), []byte("agentsaga-decision-v3\n")))
		s := signed
		s.CardDigest = ""
		stripped = update(env, workflows.UpdateApprove, "stripped", s)
		c := signed
		c.CardDigest = workflows.CardDigestPrefix + strings.Repeat("0", 64)
		changed = update(env, workflows.UpdateApprove, "changed", c)
		m := a
		m.CardDigest = "sha256:XYZ"
		malformed = update(env, workflows.UpdateApprove, "malformed", signApprove(keys["alice"], st.WorkflowID, m))
		good = update(env, workflows.UpdateApprove, "good", signed)
	}, time.Minute)
	st := run(t, env, p)

	require.ErrorContains(t, stripped.rejected, "not verified")
	require.ErrorContains(t, changed.rejected, "not verified")
	require.ErrorContains(t, malformed.rejected, "card_digest is 10 bytes")
	require.NoError(t, good.err)
	require.True(t, good.result.Verified)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	d := st.Steps[0].Decisions[len(st.Steps[0].Decisions)-1]
	require.Equal(t, digest, d.CardDigest, "the decision records the card digest")
	require.Equal(t, 1, h.p.count("refund"))
}

// A v2 signature (a client from before the card digest) verifies unchanged.
func TestV2SignatureWithoutCardDigestStillVerifies(t *testing.T) {
	h := newHarness(t)
	ring, keys := ringOf(t, "alice")
	h.operators = ring
	env := h.env()
	p := newPlan("cd2", step("refund", "o1", 90000))
	fp, _ := p.StepFingerprint(1)
	var good *answer
	env.RegisterDelayedCallback(func() {
		st := status(t, env)
		q := openQuestion(t, st)
		a := signApprove(keys["alice"], st.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, RunID: st.RunID, Fingerprint: fp, Approved: true, SentAt: env.Now()})
		require.True(t, bytes.HasPrefix(a.SigningBytes(st.WorkflowID), []byte("agentsaga-decision-v2\n")))
		good = update(env, workflows.UpdateApprove, "v2", a)
	}, time.Minute)
	st := run(t, env, p)
	require.NoError(t, good.err)
	require.True(t, good.result.Verified)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Empty(t, st.Steps[0].Decisions[0].CardDigest)
}

// The digest is the same for the card the workflow holds and the card a
// client decoded from the status, also when a value held invalid UTF-8.
func TestCardDigestSurvivesAJSONRoundTrip(t *testing.T) {
	c := workflows.Card{Change: "apply_refund: refund \xff\xfe an order", Amount: "600.00 EUR", AmountMinor: 60000, Currency: "EUR", AlreadyRan: []string{"<b>&x</b>"}}
	d := workflows.CardDigest(c)
	require.Len(t, d, workflows.MaxCardDigestLen)
	b, err := jsonRoundTrip(c)
	require.NoError(t, err)
	require.Equal(t, d, workflows.CardDigest(b))
	c.Amount = "6,000.00 EUR"
	require.NotEqual(t, d, workflows.CardDigest(c), "another card, another digest")
}

func jsonRoundTrip(c workflows.Card) (workflows.Card, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return workflows.Card{}, err
	}
	var out workflows.Card
	err = json.Unmarshal(b, &out)
	return out, err
}

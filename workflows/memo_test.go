package workflows_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/workflows"
)

// A plan publishes its open questions in its memo as they open and close,
// so a client lists them with one visibility query; a plan that never asks
// anyone publishes nothing.
func TestOpenQuestionsArePublishedInTheMemo(t *testing.T) {
	h := newHarness(t)
	env := h.env()
	var memos []workflows.OpenQuestions
	env.OnUpsertMemo(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		m := args.Get(0).(map[string]any)
		memos = append(memos, m[workflows.MemoOpenQuestions].(workflows.OpenQuestions))
	})
	p := newPlan("memo-1", step("refund", "o1", 90000))
	fp, err := p.StepFingerprint(1)
	require.NoError(t, err)
	var between workflows.Status
	env.RegisterDelayedCallback(func() {
		between = status(t, env)
		update(env, workflows.UpdateApprove, "a", workflows.ApproveSignal{Step: 1, Fingerprint: fp, By: "bob", Approved: true})
	}, time.Minute)
	st := run(t, env, p)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, memos, 2, "published when the question opened and when it closed")
	open := memos[0]
	require.Equal(t, workflows.SagaWaitingApproval, open.State)
	require.Len(t, open.Questions, 1)
	q := between.Questions[0]
	require.Equal(t, workflows.IndexOf(q, "refund"), open.Questions[0], "the question as the status shows it, indexed")
	require.Equal(t, workflows.CardDigest(q.Card), open.Questions[0].CardDigest, "the whole card's digest")
	require.Equal(t, "o1", strings.TrimPrefix(open.Questions[0].Object, "order_id "))
	require.NotZero(t, open.Questions[0].AmountMinor)
	require.Empty(t, memos[1].Questions, "none open once decided")

	quiet := newHarness(t).env()
	quiet.OnUpsertMemo(mock.Anything).Return(nil).Run(func(mock.Arguments) { t.Error("a plan without questions upserted its memo") })
	require.Equal(t, workflows.SagaSucceeded, run(t, quiet, newPlan("memo-2", step("refund", "o2", 100))).State)
}

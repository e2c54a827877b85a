package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// refundsOn counts the refunds on order in the acquirer's own store.
func refundsOn(ctx context.Context, t *testing.T, sb *sandbox.Client, order string) int {
	t.Helper()
	n := 0
	for _, e := range allEffects(ctx, t, sb) {
		if e.Kind == "refund" && e.OrderID == order {
			n++
		}
	}
	return n
}

// An override covers only the clash its card showed. Order X has an active
// refund H; plans A and B (above the approval threshold) open their cards at
// once, each showing only H. A is overridden and runs. B is overridden on its
// stale card: the ledger finds A holding the guard, which nobody deciding B
// saw, and refuses; B's question is asked again on a fresh card naming A.
// The acquirer holds two refunds on the order (H and A), never three.
func TestOverrideCoversOnlyTheClashShown(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	const order = "ord_it_unseen"
	refund := func(session string, amount int) plan.Plan {
		p := newPlan(session, step(t, "apply_refund", map[string]any{"order_id": order, "amount_minor": amount, "currency": "EUR", "reason": "unseen clash test"}))
		p.RequestedBy = "agent-9"
		return p
	}
	approve := func(id string, q workflows.Question, by string, approved, override bool) {
		t.Helper()
		res, err := st.Plans.Approve(ctx, id, workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: by, Approved: approved, Override: override})
		require.NoError(t, err)
		require.True(t, res.Applied, "%s's decision on %s is applied", by, q.ID)
	}
	require.Zero(t, refundsOn(ctx, t, sb, order))

	// H: below the threshold, no question.
	h := refund("it-unseen-h", 10000)
	runH, err := st.Plans.Start(ctx, h)
	require.NoError(t, err)
	doneH, err := st.Plans.Wait(ctx, runH.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, doneH.State, "plan error: %s", doneH.Error)

	// A and B open their cards at the same time: each shows only H.
	a, b := refund("it-unseen-a", 60000), refund("it-unseen-b", 70000)
	runA, err := st.Plans.Start(ctx, a)
	require.NoError(t, err)
	runB, err := st.Plans.Start(ctx, b)
	require.NoError(t, err)
	wA := waitStatus(ctx, t, st, runA.WorkflowID, questionOn(1, workflows.QuestionApproval))
	wB := waitStatus(ctx, t, st, runB.WorkflowID, questionOn(1, workflows.QuestionApproval))
	for _, w := range []workflows.Status{wA, wB} {
		card := w.Questions[0].Card
		require.Contains(t, card.Clash, h.Key(1))
		require.Len(t, card.AlreadyRan, 1, "only H on the card: %v", card.AlreadyRan)
	}

	approve(runA.WorkflowID, wA.Questions[0], "carol", true, true)
	doneA, err := st.Plans.Wait(ctx, runA.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, doneA.State, "plan error: %s", doneA.Error)
	require.Equal(t, 2, refundsOn(ctx, t, sb, order), "H and A")

	// B's override on the stale card: refused by the ledger, asked again.
	stale := wB.Questions[0]
	approve(runB.WorkflowID, stale, "dave", true, true)
	again := waitStatus(ctx, t, st, runB.WorkflowID, func(s workflows.Status) bool {
		ended := s.State == workflows.SagaSucceeded || s.State == workflows.SagaFailed || s.State == workflows.SagaCompensated
		return ended || (len(s.Questions) == 1 && s.Questions[0].ID != stale.ID)
	})
	require.Equal(t, 2, refundsOn(ctx, t, sb, order), "B never ran on an approval that did not see A")
	require.Len(t, again.Questions, 1, "B's question is asked again; plan state %s, step: %+v", again.State, again.Steps[0])
	fresh := again.Questions[0]
	require.Equal(t, workflows.QuestionApproval, fresh.Kind)
	require.Contains(t, fresh.Card.Clash+" "+fresh.Card.Rule, a.Key(1), "the fresh card names A")
	var listsA, listsH bool
	for _, line := range fresh.Card.AlreadyRan {
		listsA = listsA || strings.Contains(line, a.Key(1))
		listsH = listsH || strings.Contains(line, h.Key(1))
	}
	require.True(t, listsA && listsH, "the fresh card lists A and H: %v", fresh.Card.AlreadyRan)

	// The person who now sees A rejects B: still two refunds.
	approve(runB.WorkflowID, fresh, "dave", false, false)
	doneB, err := st.Plans.Wait(ctx, runB.WorkflowID)
	require.NoError(t, err)
	require.NotEqual(t, workflows.SagaSucceeded, doneB.State)
	require.Equal(t, 2, refundsOn(ctx, t, sb, order), "H and A only")
	require.Empty(t, effectsUnder(ctx, t, sb, b.Key(1)), "nothing under B's key at the acquirer")
	if op, err := st.Ledger.Get(ctx, b.Key(1)); err == nil {
		require.NotEqual(t, ledger.Succeeded, op.Status)
	}
	trail, err := st.Ledger.Decisions(ctx, b.Key(1))
	require.NoError(t, err)
	var kinds []string
	for _, d := range trail {
		kinds = append(kinds, d.QuestionID+":"+d.Kind)
	}
	require.Contains(t, kinds, stale.ID+":override")
	require.Contains(t, kinds, fresh.ID+":reject")
}

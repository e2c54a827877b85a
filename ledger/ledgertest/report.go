package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// testReport: Report reads the seeds' figures of a window. Every operation
// below implies one figure; operations and decisions before the window are
// left out; the exception queue and the uncertain amounts are the ledger's
// state now.
func testReport(t *testing.T, h Harness) {
	e := newEnv(t, h)
	rec := func(d ledger.DecisionRecord) {
		t.Helper()
		_, err := e.store.RecordDecision(e.ctx, d)
		require.NoError(t, err)
	}
	claim := func(key, tool, executor, summary string) ledger.ClaimRequest {
		r := req(key)
		r.ActionType, r.Executor, r.Summary = tool, executor, summary
		return r
	}

	// Before the window: one success and one decision.
	old := claim("old:1:1:apply_refund", "apply_refund", "w1", "")
	require.Equal(t, ledger.Execute, e.claim(old).Verdict)
	e.complete(old.Key, "w1", ledger.Succeeded, "")
	rec(ledger.DecisionRecord{Key: old.Key, Kind: "approve", By: "alice"})
	e.clock.Advance(time.Hour)
	since := e.clock.Now()

	// First attempt, then replayed twice (another run claims it again).
	first := claim("s:1:1:apply_refund", "apply_refund", "w1", "")
	require.Equal(t, ledger.Execute, e.claim(first).Verdict)
	e.complete(first.Key, "w1", ledger.Succeeded, "")
	for _, ex := range []string{"w2", "w3"} {
		again := first
		again.Executor = ex
		c := e.claim(again)
		require.Equal(t, ledger.Replay, c.Verdict)
	}
	got, err := e.store.Get(e.ctx, first.Key)
	require.NoError(t, err)
	require.Equal(t, 2, got.Replays, "each Replay verdict is counted on the row")
	require.True(t, got.UnknownAt.IsZero())

	// Not sent, then sent again: succeeded on the second attempt.
	retry := claim("s:1:2:create_payment", "create_payment", "w1", "")
	require.Equal(t, ledger.Execute, e.claim(retry).Verdict)
	e.complete(retry.Key, "w1", ledger.Pending, "")
	retry.Executor = "w2"
	require.Equal(t, ledger.Execute, e.claim(retry).Verdict)
	e.complete(retry.Key, "w2", ledger.Succeeded, "")

	// Unknown, settled by reconcile 30 s later.
	recon := claim("s:1:3:apply_refund", "apply_refund", "w1", "")
	require.Equal(t, ledger.Execute, e.claim(recon).Verdict)
	unknownAt := e.clock.Now().Truncate(time.Microsecond)
	e.complete(recon.Key, "w1", ledger.Unknown, "")
	e.clock.Advance(30 * time.Second)
	recon.Executor = "w2"
	require.Equal(t, ledger.ReconcileFirst, e.claim(recon).Verdict)
	op := e.complete(recon.Key, "w2", ledger.Succeeded, "")
	require.True(t, unknownAt.Equal(op.UnknownAt), "unknown_at is the first unknown: %s", op.UnknownAt)
	require.True(t, unknownAt.Add(30*time.Second).Equal(op.SettledAt), "settled_at: %s", op.SettledAt)

	// An expired lease taken over is an unknown outcome too; it stays open.
	stuck := claim("s:1:4:create_payment", "create_payment", "w1", "create_payment customer_id cus_1 49.00 EUR s:1:4:create_payment")
	require.Equal(t, ledger.Execute, e.claim(stuck).Verdict)

	// Unknown email, asked, resolved by a person 120 s later.
	mail := claim("s:1:5:send_email", "send_email", "w1", "send_email to ana@example.com s:1:5:send_email")
	require.Equal(t, ledger.Execute, e.claim(mail).Verdict)
	e.complete(mail.Key, "w1", ledger.Unknown, "")
	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: mail.Key, From: []ledger.Status{ledger.Unknown}, Status: ledger.NeedsHuman})
	require.NoError(t, err)
	e.clock.Advance(2 * time.Minute)
	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: mail.Key, Status: ledger.Succeeded, ExternalID: "msg_1", By: "bob"})
	require.NoError(t, err)
	rec(ledger.DecisionRecord{QuestionID: "q1-step5-outcome", Key: mail.Key, Kind: "resolve", By: "bob", Outcome: "succeeded"})

	// Unknown now: 1,500.00 EUR, and one without an amount.
	open := claim("s:1:6:apply_refund", "apply_refund", "w1", "apply_refund order_id ord_1 1,500.00 EUR s:1:6:apply_refund")
	require.Equal(t, ledger.Execute, e.claim(open).Verdict)
	e.complete(open.Key, "w1", ledger.Unknown, "")
	open2 := claim("s:1:7:create_ticket", "create_ticket", "w1", "create_ticket s:1:7:create_ticket")
	require.Equal(t, ledger.Execute, e.claim(open2).Verdict)
	e.complete(open2.Key, "w1", ledger.Unknown, "")

	// A guard holds two repeats; a person lets the second one run.
	holder := claim("s:1:8:apply_refund", "apply_refund", "w1", "")
	holder.GuardScope, holder.GuardHold = "refund-per-order:o-9", true
	require.Equal(t, ledger.Execute, e.claim(holder).Verdict)
	e.complete(holder.Key, "w1", ledger.Succeeded, "")
	held := claim("s2:1:1:apply_refund", "apply_refund", "w1", "")
	held.GuardScope, held.GuardHold = holder.GuardScope, true
	require.Equal(t, ledger.Held, e.claim(held).Verdict)
	held2 := claim("s3:1:1:apply_refund", "apply_refund", "w1", "")
	held2.GuardScope, held2.GuardHold, held2.RequestHash = holder.GuardScope, true, "h2"
	require.Equal(t, ledger.Held, e.claim(held2).Verdict)
	e.clock.Advance(5 * time.Minute)
	held2.PermitID = e.grant("q-held2", held2, true)
	require.Equal(t, ledger.Execute, e.claim(held2).Verdict)
	e.complete(held2.Key, "w1", ledger.Succeeded, "")
	rec(ledger.DecisionRecord{Key: held2.Key, Kind: "override", By: "carol"})

	// Failed for good; compensated; a reversal that failed.
	failed := claim("s:1:9:apply_refund", "apply_refund", "w1", "")
	require.Equal(t, ledger.Execute, e.claim(failed).Verdict)
	e.complete(failed.Key, "w1", ledger.FailedFinal, "")
	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: holder.Key, Status: ledger.Compensated})
	require.NoError(t, err)
	rev := claim("s:1:2:create_payment:compensate", "void_payment", "w1", "")
	require.Equal(t, ledger.Execute, e.claim(rev).Verdict)
	e.complete(rev.Key, "w1", ledger.CompensationFailed, "")

	// Decisions: a rejected approval (no ledger row) open for 60 s, an
	// approval recorded without its opening time, a refusal, an expiry.
	applied := e.clock.Now()
	rec(ledger.DecisionRecord{QuestionID: "q1-step1-approval", Key: "s4:1:1:apply_refund", Kind: "reject", By: "dan",
		OpenedAt: applied.Add(-time.Minute), AppliedAt: applied})
	rec(ledger.DecisionRecord{QuestionID: "q2-step1-approval", Key: first.Key, Kind: "approve", By: "alice"})
	rec(ledger.DecisionRecord{Key: first.Key, Kind: "refused", By: "mallory", Refused: "no open question"})
	rec(ledger.DecisionRecord{QuestionID: "q3-step1-approval", Key: "s5:1:1:apply_refund", Kind: "expire"})

	e.clock.Advance(10 * time.Minute) // the stuck lease ended long ago
	rep, err := e.store.Report(e.ctx, since)
	require.NoError(t, err)
	require.True(t, since.Equal(rep.Since))
	require.True(t, e.clock.Now().Equal(rep.At))

	// 12 operations in the window (first, retry, recon, stuck, mail, open,
	// open2, holder, held, held2, failed, rev).
	tot := rep.Totals
	require.Equal(t, 12, tot.Operations)
	require.Equal(t, 5, tot.Succeeded, "first, retry, recon, mail, held2")
	require.Equal(t, 2, tot.FirstAttempt, "first and held2: one attempt, never unknown")
	require.Equal(t, 2, tot.Replays)
	require.Equal(t, 1, tot.Failed)
	require.Equal(t, 1, tot.Compensated)
	require.Equal(t, 4, tot.Unknown, "recon, mail, open, open2 (stuck was never taken over)")
	byTool := map[string]ledger.ToolFigures{}
	for _, f := range rep.Tools {
		byTool[f.Tool] = f
	}
	require.Len(t, rep.Tools, 5)
	require.Equal(t, ledger.ToolFigures{Tool: "create_payment", Operations: 2, Succeeded: 1}, byTool["create_payment"])
	require.Equal(t, 7, byTool["apply_refund"].Operations)
	require.Equal(t, 2, byTool["apply_refund"].Replays)
	require.InDelta(t, 2.0/12, tot.FirstAttemptShare(), 1e-9)

	require.Equal(t, ledger.UnknownFigures{Total: 4, Open: 2, ByReconcile: 1, ByHuman: 1,
		MeanSettleSeconds: 75, MeanReconcileSeconds: 30, MeanHumanSettleSeconds: 120}, rep.Unknown)
	require.Equal(t, ledger.HeldFigures{Held: 2, Stopped: 1, RunAfterOverride: 1}, rep.Held)

	hu := rep.Humans
	require.Equal(t, 4, hu.Decisions, "resolve, override, reject, approve")
	require.Equal(t, map[string]int{"resolve": 1, "override": 1, "reject": 1, "approve": 1}, hu.ByKind)
	require.Equal(t, map[string]int{"outcome": 1, "held": 1, "approval": 2}, hu.Why)
	require.Equal(t, 1, hu.Refused)
	require.Equal(t, 1, hu.Expired)
	require.Equal(t, 4, hu.Operations)
	require.InDelta(t, 4.0/13, hu.Share, 1e-9, "the rejected approval has no row: 12 + 1 operations")
	require.Equal(t, 3, hu.Measured)
	require.Equal(t, 1, hu.Unmeasured)
	// mail: 2 min from unknown; held2: 5 min from its hold; reject: 1 min.
	require.InDelta(t, 8.0, hu.WaitMinutes, 1e-6)

	queue := map[string]ledger.QueueFigures{}
	for _, q := range rep.Queue {
		queue[q.Kind] = q
	}
	require.Len(t, rep.Queue, len(ledger.ExceptionKinds))
	require.Equal(t, 1, queue[ledger.KindNeedsHuman].Count, "held")
	require.Equal(t, 1, queue[ledger.KindCompensationFailed].Count)
	require.Equal(t, 2, queue[ledger.KindUnknown].Count)
	require.Equal(t, 1, queue[ledger.KindStuck].Count)
	require.InDelta(t, rep.At.Sub(stuckCreated(t, e, stuck.Key)).Seconds(), queue[ledger.KindStuck].OldestAgeSeconds, 1e-6)

	require.Equal(t, 3, rep.Uncertain.Operations, "stuck, open, open2")
	require.Equal(t, []ledger.Amount{{Currency: "EUR", Minor: 154900, Operations: 2}}, rep.Uncertain.Amounts)
	require.Equal(t, 1, rep.Uncertain.WithoutAmount)

	// Everything since the beginning includes the older operation and its
	// decision.
	all, err := e.store.Report(e.ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, 13, all.Totals.Operations)
	require.Equal(t, 5, all.Humans.Decisions)
}

func stuckCreated(t *testing.T, e *env, key string) time.Time {
	t.Helper()
	op, err := e.store.Get(e.ctx, key)
	require.NoError(t, err)
	return op.CreatedAt
}

// testAmountIn: the amounts of uncertain operations are read exactly from
// the workflow's summaries.
func testAmountIn(t *testing.T, _ Harness) {
	for s, want := range map[string]ledger.Amount{
		"apply_refund order_id ord_1 1,500.00 EUR s:1:3:apply_refund": {Currency: "EUR", Minor: 150000},
		"create_payment customer_id cus_1 49.00 EUR k":                {Currency: "EUR", Minor: 4900},
		"pay 500 JPY k":                         {Currency: "JPY", Minor: 500},
		"pay 1.250 KWD":                         {Currency: "KWD", Minor: 1250},
		"apply_refund -12.00 EUR k":             {Currency: "EUR", Minor: -1200},
		"send_email to ana@example.com s:1:5:x": {},
		"order ABC 12 ok":                       {},
	} {
		minor, cur, ok := ledger.AmountIn(s)
		require.Equal(t, want.Currency != "", ok, s)
		require.Equal(t, want.Currency, cur, s)
		require.Equal(t, want.Minor, minor, s)
	}
}

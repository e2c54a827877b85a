package ledgertest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// testDecisions: the audit trail is append-only, redacted, kept by Purge,
// and lists an operation with its reversal, oldest first.
func testDecisions(t *testing.T, h Harness) {
	e := newEnv(t, h)
	sent := e.clock.Now().Add(-time.Second).Truncate(time.Microsecond)
	first := ledger.DecisionRecord{QuestionID: "q-1", Key: "s1:1:0:apply_refund", WorkflowID: "agent-plan:s1:1", Kind: "approve",
		By: "alice", Verified: true, SentAt: sent, Card: json.RawMessage(`{"amount_minor":150000,"card_number":"` + card + `"}`),
		Note: "card " + card + " ok", CardDigest: "sha256:" + strings.Repeat("ab", 32)}
	id1, err := e.store.RecordDecision(e.ctx, first)
	require.NoError(t, err)
	e.clock.Advance(time.Minute)
	id2, err := e.store.RecordDecision(e.ctx, ledger.DecisionRecord{QuestionID: "q-2", Key: "s1:1:0:apply_refund:compensate",
		Kind: "resolve", By: "bob", Outcome: "compensated", ExternalID: "st_1"})
	require.NoError(t, err)
	_, err = e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: "s1:1:1:send_email", Kind: "refused", Refused: "no open question"})
	require.NoError(t, err)
	e.clock.Advance(-2 * time.Hour) // a clock that went back does not reorder the trail
	id4, err := e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: "s1:1:0:apply_refund", Kind: "refused", By: "carol",
		Refused: "question q-1 is answered already"})
	require.NoError(t, err)
	require.Less(t, id1, id2)
	require.Less(t, id2, id4)

	ds, err := e.store.Decisions(e.ctx, "s1:1:0:apply_refund")
	require.NoError(t, err)
	require.Len(t, ds, 3)
	require.Equal(t, []int64{id1, id2, id4}, []int64{ds[0].ID, ds[1].ID, ds[2].ID}, "oldest first, with the reversal's")
	d := ds[0]
	require.Equal(t, "q-1", d.QuestionID)
	require.Equal(t, "agent-plan:s1:1", d.WorkflowID)
	require.Equal(t, "approve", d.Kind)
	require.Equal(t, "alice", d.By)
	require.True(t, d.Verified)
	require.True(t, sent.Equal(d.SentAt))
	require.True(t, e.clock.Now().Add(2*time.Hour-time.Minute).Equal(d.AppliedAt), "applied now when not given")
	require.NotContains(t, d.Note, card)
	require.NotContains(t, string(d.Card), card)
	require.Contains(t, string(d.Card), "150000")
	require.Equal(t, "sha256:"+strings.Repeat("ab", 32), d.CardDigest, "the card digest is kept")
	require.Empty(t, ds[1].CardDigest, "a decision without a card digest has none")
	require.Equal(t, "compensated", ds[1].Outcome)
	require.Equal(t, "st_1", ds[1].ExternalID)
	require.False(t, ds[1].Verified)
	require.True(t, ds[1].SentAt.IsZero())
	require.Equal(t, "question q-1 is answered already", ds[2].Refused)

	// A later round of the reversal ({key}:compensate:2, a person's retry
	// of a rejected reversal) is part of the trail; keys that only share a
	// prefix, or that LIKE would match through '_', are not.
	id5, err := e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: "s1:1:0:apply_refund:compensate:2", Kind: "resolve", By: "dave", Outcome: "retry"})
	require.NoError(t, err)
	for _, other := range []string{"s1:1:0:apply_refund:compensateX", "s1:1:0:applyXrefund:compensate:2", "s1:1:0:apply_refund2"} {
		_, err = e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: other, Kind: "resolve", By: "eve", Outcome: "retry"})
		require.NoError(t, err)
	}
	ds, err = e.store.Decisions(e.ctx, "s1:1:0:apply_refund")
	require.NoError(t, err)
	require.Len(t, ds, 4)
	require.Equal(t, id5, ds[3].ID, "a later reversal round's decision is in the trail")

	none, err := e.store.Decisions(e.ctx, "unknown-key")
	require.NoError(t, err)
	require.Empty(t, none)

	// Purge keeps the trail, and the database refuses to change it.
	e.reach("s1:1:0:apply_refund", ledger.Succeeded)
	e.clock.Advance(365 * 24 * time.Hour)
	n, err := e.store.Purge(e.ctx, e.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	db := e.db()
	var count int
	require.NoError(t, db.QueryRowContext(e.ctx, `SELECT COUNT(*) FROM decisions`).Scan(&count))
	require.Equal(t, 8, count)
	_, err = db.ExecContext(e.ctx, `UPDATE decisions SET decided_by = 'mallory'`)
	require.ErrorContains(t, err, "append-only")
	_, err = db.ExecContext(e.ctx, `DELETE FROM decisions`)
	require.ErrorContains(t, err, "append-only")
	ds, err = e.store.Decisions(e.ctx, "s1:1:0:apply_refund")
	require.NoError(t, err)
	require.Len(t, ds, 4)
	require.Equal(t, "alice", ds[0].By)

	_, err = e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: "k"})
	require.ErrorContains(t, err, "Kind")
}

// testTextNeverRefused: NUL bytes and invalid UTF-8 in descriptive text never
// make a write fail (PostgreSQL refuses both in text and jsonb); identifiers
// with them are refused up front, the same on every driver.
func testTextNeverRefused(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const bad = "a\x00b\xffc"
	r := req("k")
	r.RequestID, r.WorkflowID, r.RunID = "req-"+bad, "wf-"+bad, "run-"+bad
	c := e.claim(r)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.Equal(t, "req-ab\uFFFDc", c.Operation.RequestID)
	op, err := e.store.Complete(e.ctx, ledger.Completion{Key: "k", Executor: "w1", Status: ledger.Unknown, ExternalID: "re_" + bad,
		ErrorCode: "timeout " + bad, Result: json.RawMessage("{\"msg\":\"x\\u0000y\",\"k\\u0000\":\"\xff\"}")})
	require.NoError(t, err)
	require.Equal(t, "timeout ab\uFFFDc", op.ErrorCode)
	require.Equal(t, "re_ab\uFFFDc", op.ExternalID)
	var res map[string]string
	require.NoError(t, json.Unmarshal(op.Result, &res), "%s", op.Result)
	require.Equal(t, map[string]string{"msg": "xy", "k": "\uFFFD"}, map[string]string{"msg": res["msg"], "k": res["k"]})
	require.NotContains(t, string(op.Result), `\u0000`)

	op, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: "k", Status: ledger.Unknown, By: "ali\x00ce", Note: "note " + bad})
	require.NoError(t, err)
	require.Equal(t, "alice", op.ResolvedBy)
	require.Equal(t, "note ab\uFFFDc", op.ResolveNote)
	op, err = e.store.Transition(e.ctx, ledger.Transition{Key: "k", Status: ledger.FailedFinal, ErrorCode: "gave up " + bad,
		Result: json.RawMessage("\"p\x00q\"")}) // not JSON: a raw NUL inside a string
	require.NoError(t, err)
	require.Equal(t, "gave up ab\uFFFDc", op.ErrorCode)
	require.Equal(t, `"\"pq\""`, string(op.Result))

	require.NoError(t, e.store.GrantPermit(e.ctx, ledger.Permit{ID: "q", Key: "k2", RequestHash: "h1", Policy: "p " + bad, By: "b " + bad}))
	require.NoError(t, e.store.GrantPermit(e.ctx, ledger.Permit{ID: "q", Key: "k2", RequestHash: "h1", Policy: "p " + bad, By: "b " + bad}),
		"the cleaned permit compares equal to itself")
	_, err = e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: "k" + bad, Kind: "approve" + bad, By: bad, QuestionID: bad,
		WorkflowID: bad, Outcome: bad, ExternalID: bad, Note: bad, Refused: bad, Card: json.RawMessage("{\"a\\u0000\":\"\\u0000\xff\"}")})
	require.NoError(t, err)
	ds, err := e.store.Decisions(e.ctx, "k"+bad)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "ab\uFFFDc", ds[0].Note)
	require.JSONEq(t, `{"a":"\uFFFD"}`, string(ds[0].Card))

	// Identifiers are refused with a message, on every driver alike.
	for name, mutate := range map[string]func(*ledger.ClaimRequest){
		"Key":         func(r *ledger.ClaimRequest) { r.Key = "k\x00" },
		"RequestHash": func(r *ledger.ClaimRequest) { r.RequestHash = "h\xff" },
		"GuardScope":  func(r *ledger.ClaimRequest) { r.GuardScope = "s\x00" },
		"Executor":    func(r *ledger.ClaimRequest) { r.Executor = "w\x00" },
	} {
		r := req("k3")
		mutate(&r)
		_, err := e.store.Claim(e.ctx, r)
		require.ErrorContains(t, err, "NUL byte or invalid UTF-8", name)
		require.ErrorContains(t, err, name)
	}
	_, err = e.store.Get(e.ctx, "k\x00")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	e.absent("k3")

	// Nothing stored holds a NUL.
	rows, err := e.db().QueryContext(e.ctx, `SELECT request_id, workflow_id, run_id, error_code, external_id, resolved_by, resolve_note FROM operations`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		vals := make([]string, 7)
		require.NoError(t, rows.Scan(&vals[0], &vals[1], &vals[2], &vals[3], &vals[4], &vals[5], &vals[6]))
		for _, v := range vals {
			require.False(t, strings.ContainsRune(v, 0), "%q", v)
		}
	}
	require.NoError(t, rows.Err())
}

// The decision log lists the audit trail across operations, newest first,
// filtered by who, kind and when, bounded by its limit.
func testDecisionLog(t *testing.T, h Harness) {
	e := newEnv(t, h)
	t0 := e.clock.Now().Truncate(time.Second)
	for i, d := range []ledger.DecisionRecord{
		{Key: "s1:1:1:apply_refund", QuestionID: "q1", Kind: "approve", By: "alice"},
		{Key: "s2:1:1:apply_refund", QuestionID: "q1", Kind: "reject", By: "bob"},
		{Key: "s3:1:1:send_email", QuestionID: "q2", Kind: "resolve", By: "alice", Outcome: "succeeded"},
		{Key: "s4:1:1:apply_refund", QuestionID: "q1", Kind: "refused", By: "bob", Refused: "bob may not resolve"},
	} {
		d.AppliedAt = t0.Add(time.Duration(i) * time.Minute)
		_, err := e.store.RecordDecision(e.ctx, d)
		require.NoError(t, err)
	}
	keys := func(q ledger.DecisionQuery) []string {
		t.Helper()
		ds, err := e.store.DecisionLog(e.ctx, q)
		require.NoError(t, err)
		var out []string
		for _, d := range ds {
			out = append(out, d.Key)
		}
		return out
	}
	require.Equal(t, []string{"s4:1:1:apply_refund", "s3:1:1:send_email", "s2:1:1:apply_refund", "s1:1:1:apply_refund"}, keys(ledger.DecisionQuery{}), "newest first")
	require.Equal(t, []string{"s3:1:1:send_email", "s1:1:1:apply_refund"}, keys(ledger.DecisionQuery{By: "alice"}))
	require.Equal(t, []string{"s2:1:1:apply_refund"}, keys(ledger.DecisionQuery{Kind: "reject"}))
	require.Equal(t, []string{"s3:1:1:send_email", "s2:1:1:apply_refund"}, keys(ledger.DecisionQuery{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}))
	require.Equal(t, []string{"s4:1:1:apply_refund"}, keys(ledger.DecisionQuery{Limit: 1}))
	require.Empty(t, keys(ledger.DecisionQuery{By: "alice'; --"}))
	_, err := e.store.DecisionLog(e.ctx, ledger.DecisionQuery{Limit: ledger.MaxDecisionLog + 1})
	require.ErrorContains(t, err, "limit 1001")
}

package ledgertest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// testTransition: a machine change never overwrites what a human recorded,
// and refuses a row in another state.
func testTransition(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.reach("k", ledger.Unknown)
	e.clock.Advance(time.Minute)
	resolved, err := e.store.Resolve(e.ctx, ledger.Resolution{Key: "k", Status: ledger.Succeeded, ExternalID: "re_1", By: "alice", Note: "found in the dashboard"})
	require.NoError(t, err)

	e.clock.Advance(time.Minute)
	op, err := e.store.Transition(e.ctx, ledger.Transition{Key: "k", From: []ledger.Status{ledger.Succeeded}, Status: ledger.Compensating})
	require.NoError(t, err)
	require.Equal(t, ledger.Compensating, op.Status)
	require.True(t, op.CompletedAt.IsZero(), "compensating is not final")
	e.clock.Advance(time.Minute)
	op, err = e.store.Transition(e.ctx, ledger.Transition{Key: "k", From: []ledger.Status{ledger.Compensating}, Status: ledger.Compensated})
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, op.Status)
	require.Equal(t, "alice", op.ResolvedBy, "the operator's name stays")
	require.Equal(t, "found in the dashboard", op.ResolveNote)
	require.True(t, resolved.ResolvedAt.Equal(op.ResolvedAt))
	require.Equal(t, "re_1", op.ExternalID, "kept when empty")
	require.True(t, e.clock.Now().Equal(op.CompletedAt))
	require.True(t, e.clock.Now().Equal(op.UpdatedAt))
	got, err := e.store.Get(e.ctx, "k")
	require.NoError(t, err)
	require.Equal(t, op, got)

	// From another state: ErrTransition naming the state, nothing changes.
	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: "k", From: []ledger.Status{ledger.Pending, ledger.Unknown}, Status: ledger.FailedFinal})
	require.ErrorIs(t, err, ledger.ErrTransition)
	require.Contains(t, err.Error(), "compensated")
	got, err = e.store.Get(e.ctx, "k")
	require.NoError(t, err)
	require.Equal(t, op, got)

	// Succeeded found by reconcile: the external id, the result and the
	// error code are recorded; a live lease is ended, so the executor's
	// late result is refused.
	e.reach("r", ledger.InProgress)
	op, err = e.store.Transition(e.ctx, ledger.Transition{Key: "r", Status: ledger.Succeeded, ExternalID: "re_9",
		Result: json.RawMessage(`{"refund_id":"re_9"}`), ErrorCode: "found_by_reconcile"})
	require.NoError(t, err)
	require.Equal(t, "re_9", op.ExternalID)
	require.JSONEq(t, `{"refund_id":"re_9"}`, string(op.Result))
	require.Equal(t, "found_by_reconcile", op.ErrorCode)
	require.Empty(t, op.LeaseOwner)
	require.Empty(t, op.ResolvedBy)
	_, err = e.store.Complete(e.ctx, ledger.Completion{Key: "r", Executor: "w1", Status: ledger.FailedFinal})
	require.ErrorIs(t, err, ledger.ErrLeaseLost)
	require.Equal(t, ledger.Replay, e.claim(req("r")).Verdict)

	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: "missing", Status: ledger.FailedFinal})
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: "k", Status: ledger.InProgress})
	require.ErrorContains(t, err, "Claim")
	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: "k", Status: "done"})
	require.Error(t, err)
}

// testGivenUpReleasesGuard: a pending or unknown row whose plan gave up is
// moved to failed_final and stops holding its guard scope.
func testGivenUpReleasesGuard(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for _, st := range []ledger.Status{ledger.Pending, ledger.Unknown} {
		scope := "refund-per-order:" + string(st)
		first := req("s1:" + string(st))
		first.GuardScope = scope
		require.Equal(t, ledger.Execute, e.claim(first).Verdict)
		e.complete(first.Key, "w1", st, "")

		later := req("s2:" + string(st))
		later.GuardScope = scope
		require.Equal(t, ledger.GuardRefused, e.claim(later).Verdict, "the %s row holds the scope", st)

		op, err := e.store.Transition(e.ctx, ledger.Transition{Key: first.Key,
			From: []ledger.Status{ledger.Pending, ledger.Unknown}, Status: ledger.FailedFinal, ErrorCode: "rejected_by_approver"})
		require.NoError(t, err)
		require.Equal(t, ledger.FailedFinal, op.Status)
		require.Equal(t, ledger.Execute, e.claim(later).Verdict, "a given-up %s row releases the scope", st)
		require.Equal(t, ledger.Final, e.claim(first).Verdict, "and never runs")
	}
	e.noDuplicateKeys()
}

// testGuardOutlivesPurge: retention never makes a guard forget an active
// effect.
func testGuardOutlivesPurge(t *testing.T, h Harness) {
	e := newEnv(t, h)
	scope := "refund-per-order:ord_1002"
	first := req("s1:1:0:apply_refund")
	first.GuardScope = scope
	require.Equal(t, ledger.Execute, e.claim(first).Verdict)
	e.complete(first.Key, "w1", ledger.Succeeded, `{"refund_id":"re_1"}`)
	reversed := req("s0:1:0:apply_refund")
	reversed.GuardScope = "refund-per-order:ord_1001"
	require.Equal(t, ledger.Execute, e.claim(reversed).Verdict)
	e.complete(reversed.Key, "w1", ledger.Succeeded, `{"refund_id":"re_0"}`)
	_, err := e.store.Transition(e.ctx, ledger.Transition{Key: reversed.Key, From: []ledger.Status{ledger.Succeeded}, Status: ledger.Compensated})
	require.NoError(t, err)
	e.reach("unguarded", ledger.Succeeded)

	e.clock.Advance(365 * 24 * time.Hour)
	n, err := e.store.Purge(e.ctx, e.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 2, n, "the unguarded and the compensated rows go")
	e.absent("unguarded")
	e.absent(reversed.Key)
	_, err = e.store.Get(e.ctx, first.Key)
	require.NoError(t, err, "a succeeded row holding a guard scope stays")

	third := req("s3:1:0:apply_refund")
	third.GuardScope = scope
	c := e.claim(third)
	require.Equal(t, ledger.GuardRefused, c.Verdict)
	require.Contains(t, c.Reason, first.Key)
	third.GuardHold = true
	require.Equal(t, ledger.Held, e.claim(third).Verdict)
}

func testInScope(t *testing.T, h Harness) {
	e := newEnv(t, h)
	scope := "refund-per-order:ord_1002"
	for i, st := range []ledger.Status{ledger.Compensated, ledger.Succeeded, "held", ledger.InProgress} {
		key := fmt.Sprintf("s%d", i)
		r := req(key)
		r.GuardScope, r.GuardHold = scope, true
		r.PermitID = e.grant("q-"+key, r, true) // all run beside each other
		if st == "held" {
			r.PermitID = ""
			require.Equal(t, ledger.Held, e.claim(r).Verdict)
		} else {
			require.Equal(t, ledger.Execute, e.claim(r).Verdict)
		}
		if st == ledger.Compensated || st == ledger.Succeeded {
			e.complete(key, "w1", ledger.Succeeded, `{"amount_minor":150000}`)
		}
		if st == ledger.Compensated {
			_, err := e.store.Transition(e.ctx, ledger.Transition{Key: key, Status: ledger.Compensated})
			require.NoError(t, err)
		}
		e.clock.Advance(time.Second)
	}
	other := req("other")
	other.GuardScope = "refund-per-order:ord_1003"
	require.Equal(t, ledger.Execute, e.claim(other).Verdict)
	e.reach("no-scope", ledger.Succeeded)

	list := func(scope string, limit int) []string {
		ops, err := e.store.InScope(e.ctx, scope, limit)
		require.NoError(t, err)
		var ks []string
		for _, op := range ops {
			require.Equal(t, scope, op.GuardScope)
			ks = append(ks, op.Key)
		}
		return ks
	}
	require.Equal(t, []string{"s3", "s2", "s1", "s0"}, list(scope, 10), "any state, newest first")
	require.Equal(t, []string{"s3", "s2"}, list(scope, 2))
	require.Equal(t, []string{"other"}, list(other.GuardScope, 10))
	require.Empty(t, list("", 10), "no scope is no scope")
	require.Empty(t, list("refund-per-order:none", 10))
	ops, err := e.store.InScope(e.ctx, scope, 10)
	require.NoError(t, err)
	require.Equal(t, ledger.Compensated, ops[3].Status)
	require.JSONEq(t, `{"amount_minor":150000}`, string(ops[2].Result))
	_, err = e.store.InScope(e.ctx, scope, 0)
	require.ErrorContains(t, err, "positive")
}

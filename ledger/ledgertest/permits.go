package ledgertest

import (
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// grant stores a permit named id for r's key and request hash, and returns
// its id. An override permit names the holders of r's guard scope now, as
// the approver's card would show them.
func (e *env) grant(id string, r ledger.ClaimRequest, override bool) string {
	e.t.Helper()
	var holders []string
	if override {
		holders = e.holders(r)
	}
	return e.grantShown(id, r, override, holders...)
}

// grantShown stores a permit named id for r's key and request hash, granted
// on a card that showed holders, and returns its id.
func (e *env) grantShown(id string, r ledger.ClaimRequest, override bool, holders ...string) string {
	e.t.Helper()
	require.NoError(e.t, e.store.GrantPermit(e.ctx, ledger.Permit{
		ID: id, Key: r.Key, RequestHash: r.RequestHash, Policy: "amount_minor > 50000", Override: override, By: "alice",
		Holders: holders,
	}))
	return id
}

// holders lists the operations that hold r's guard scope now, r's own key
// excluded: active, and not only held for approval.
func (e *env) holders(r ledger.ClaimRequest) []string {
	e.t.Helper()
	if r.GuardScope == "" {
		return nil
	}
	ops, err := e.store.InScope(e.ctx, r.GuardScope, 1000)
	require.NoError(e.t, err)
	var keys []string
	for _, op := range ops {
		switch {
		case op.Key == r.Key, op.Status == ledger.FailedFinal, op.Status == ledger.Compensated,
			op.Status == ledger.NeedsHuman && op.AttemptCount == 0 && op.HoldReason != "":
			continue
		}
		keys = append(keys, op.Key)
	}
	return keys
}

// consumedAt reads a permit's consumed_at from the raw table (the zero time
// while unused).
func (e *env) consumedAt(db *sql.DB, id string) time.Time {
	e.t.Helper()
	var v any
	require.NoError(e.t, db.QueryRowContext(e.ctx, `SELECT consumed_at FROM permits WHERE permit_id = '`+id+`'`).Scan(&v))
	switch x := v.(type) {
	case nil:
		return time.Time{}
	case int64:
		return time.UnixMicro(x).UTC()
	case time.Time:
		return x.UTC()
	}
	e.t.Fatalf("consumed_at holds %T", v)
	return time.Time{}
}

func (e *env) absent(key string) {
	e.t.Helper()
	_, err := e.store.Get(e.ctx, key)
	require.ErrorIs(e.t, err, ledger.ErrNotFound, "%s must not be stored", key)
}

// testPermitSingleUse: a permit starts one call of one key once; retries of
// that call need no permit and consume none.
func testPermitSingleUse(t *testing.T, h Harness) {
	e := newEnv(t, h)
	db := e.db()
	r1 := req("s1:1:0:apply_refund")
	r1.PermitID = e.grant("q-1", r1, false)

	c := e.claim(r1)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.True(t, e.clock.Now().Truncate(time.Microsecond).Equal(e.consumedAt(db, "q-1")), "consumed by the claim that started the call")

	// Two steps cannot share one permit.
	r2 := req("s1:1:1:apply_refund")
	r2.PermitID = "q-1"
	c = e.claim(r2)
	require.Equal(t, ledger.NoPermit, c.Verdict)
	require.Contains(t, c.Reason, r1.Key)
	e.absent(r2.Key)

	// A permit of another key, of other arguments, or of no approval at all.
	r3 := req("s1:1:2:apply_refund")
	e.grant("q-3", r3, true)
	r3.RequestHash, r3.PermitID = "h-changed", "q-3"
	c = e.claim(r3)
	require.Equal(t, ledger.NoPermit, c.Verdict)
	require.Contains(t, c.Reason, "h-changed")
	e.absent(r3.Key)
	require.True(t, e.consumedAt(db, "q-3").IsZero(), "a refused claim consumes nothing")
	r3.PermitID = "q-never-granted"
	require.Equal(t, ledger.NoPermit, e.claim(r3).Verdict)
	e.absent(r3.Key)

	// A retry of the started call (same executor, expired lease, unknown,
	// pending) needs no permit and consumes none, not even a fresh one.
	first := e.consumedAt(db, "q-1")
	e.clock.Advance(time.Second)
	require.Equal(t, ledger.ReconcileFirst, e.claim(r1).Verdict)
	e.complete(r1.Key, "w1", ledger.Unknown, "")
	retry := r1
	retry.Executor = "w2"
	retry.PermitID = e.grant("q-1b", r1, false)
	c = e.claim(retry)
	require.Equal(t, ledger.ReconcileFirst, c.Verdict)
	require.Equal(t, 2, c.Operation.AttemptCount)
	require.True(t, e.consumedAt(db, "q-1b").IsZero(), "a retry must not consume a second permit")
	require.True(t, first.Equal(e.consumedAt(db, "q-1")), "the first permit is consumed once")
	e.complete(r1.Key, "w2", ledger.Pending, "")
	retry.Executor, retry.PermitID = "w3", "q-1"
	require.Equal(t, ledger.Execute, e.claim(retry).Verdict, "pending: provably not sent, runs again without a new permit")
	e.complete(r1.Key, "w3", ledger.Succeeded, `{"refund_id":"re_1"}`)
	require.Equal(t, ledger.Replay, e.claim(retry).Verdict)

	// A consumed permit never runs again, even after its row was purged.
	e.clock.Advance(time.Hour)
	n, err := e.store.Purge(e.ctx, e.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	e.absent(r1.Key)
	c = e.claim(r1)
	require.Equal(t, ledger.NoPermit, c.Verdict)
	require.Contains(t, c.Reason, "used")
	e.absent(r1.Key)
}

// testPermitRace: many executors claim one key with one permit: one runs,
// the others see it in flight; the permit is consumed once.
func testPermitRace(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for _, held := range []bool{false, true} {
		r := req(fmt.Sprintf("s1:1:0:apply_refund:%t", held))
		if held {
			holder := req("holder")
			holder.GuardScope = "refund-per-order:o-9"
			require.Equal(t, ledger.Execute, e.claim(holder).Verdict)
			r.GuardScope, r.GuardHold = holder.GuardScope, true
			require.Equal(t, ledger.Held, e.claim(r).Verdict)
		}
		r.PermitID = e.grant(fmt.Sprintf("q-%t", held), r, true)
		const n = 30
		count := tally(e.raceClaims(n, func(i int) ledger.ClaimRequest {
			ri := r
			ri.Executor = fmt.Sprintf("w%d", i)
			return ri
		}))
		require.Equal(t, map[ledger.Verdict]int{ledger.Execute: 1, ledger.InFlight: n - 1}, count, "held=%t", held)
		require.False(t, e.consumedAt(e.db(), r.PermitID).IsZero())
	}
	e.noDuplicateKeys()
}

// testPermitOverride: a permit lets a guard clash or a suspected duplicate
// through only when granted with Override; otherwise the usual verdict, and
// the permit stays unused.
func testPermitOverride(t *testing.T, h Harness) {
	e := newEnv(t, h)
	db := e.db()
	holder := req("s1:1:0:apply_refund")
	holder.GuardScope = "refund-per-order:o-1"
	require.Equal(t, ledger.Execute, e.claim(holder).Verdict)

	refused := req("s2:1:0:apply_refund")
	refused.GuardScope = holder.GuardScope
	refused.PermitID = e.grant("q-refused", refused, false)
	require.Equal(t, ledger.GuardRefused, e.claim(refused).Verdict)
	e.absent(refused.Key)
	require.True(t, e.consumedAt(db, "q-refused").IsZero())

	held := req("s3:1:0:apply_refund")
	held.GuardScope, held.GuardHold = holder.GuardScope, true
	held.PermitID = e.grant("q-plain", held, false)
	c := e.claim(held)
	require.Equal(t, ledger.Held, c.Verdict)
	require.Zero(t, c.Operation.AttemptCount)
	c = e.claim(held) // the held row, with the permit that has no override
	require.Equal(t, ledger.Held, c.Verdict)
	require.Contains(t, c.Reason, "without override")
	require.True(t, e.consumedAt(db, "q-plain").IsZero())
	held.PermitID = "q-refused" // another key's permit
	require.Equal(t, ledger.NoPermit, e.claim(held).Verdict)
	op, err := e.store.Get(e.ctx, held.Key)
	require.NoError(t, err)
	require.Equal(t, ledger.NeedsHuman, op.Status, "nothing changes")
	held.PermitID = e.grant("q-override", held, true)
	c = e.claim(held)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.Equal(t, 1, c.Operation.AttemptCount)
	require.Equal(t, "w1", c.Operation.LeaseOwner)
	require.False(t, e.consumedAt(db, "q-override").IsZero())

	// A fresh key with an override permit runs beside the holder.
	beside := req("s4:1:0:apply_refund")
	beside.GuardScope = holder.GuardScope
	beside.PermitID = e.grant("q-beside", beside, true)
	require.Equal(t, ledger.Execute, e.claim(beside).Verdict)

	// Suspected duplicates: held without override, run with it.
	dup := func(key string) ledger.ClaimRequest {
		r := req(key)
		r.Entity, r.NormalizedArgs, r.DuplicateWindow = "order:o-2", `{"amount_minor":100}`, time.Hour
		return r
	}
	require.Equal(t, ledger.Execute, e.claim(dup("d1")).Verdict)
	d2 := dup("d2")
	d2.PermitID = e.grant("q-d2", d2, false)
	require.Equal(t, ledger.Held, e.claim(d2).Verdict)
	require.True(t, e.consumedAt(db, "q-d2").IsZero())
	d3 := dup("d3")
	d3.PermitID = e.grant("q-d3", d3, true)
	require.Equal(t, ledger.Execute, e.claim(d3).Verdict)
	e.noDuplicateKeys()
}

func testGrantPermit(t *testing.T, h Harness) {
	e := newEnv(t, h)
	p := ledger.Permit{ID: "q-1", Key: "k", RequestHash: "h1", Policy: "amount_minor > 50000", Override: true, By: "alice",
		Holders: []string{"h2", "h1"}}
	require.NoError(t, e.store.GrantPermit(e.ctx, p))
	e.clock.Advance(time.Minute)
	require.NoError(t, e.store.GrantPermit(e.ctx, p), "granting the same permit again is a no-op")
	same := p
	same.Holders = []string{"h1", "h2", "h1"}
	require.NoError(t, e.store.GrantPermit(e.ctx, same), "the holders are a set")
	for name, mutate := range map[string]func(*ledger.Permit){
		"Key":         func(p *ledger.Permit) { p.Key = "k2" },
		"RequestHash": func(p *ledger.Permit) { p.RequestHash = "h2" },
		"Override":    func(p *ledger.Permit) { p.Override = false },
		"By":          func(p *ledger.Permit) { p.By = "mallory" },
		"Policy":      func(p *ledger.Permit) { p.Policy = "always" },
		"Holders":     func(p *ledger.Permit) { p.Holders = []string{"h1"} },
	} {
		other := p
		mutate(&other)
		err := e.store.GrantPermit(e.ctx, other)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "new id", name)
	}
	var by string
	var granted any
	require.NoError(t, e.db().QueryRowContext(e.ctx, `SELECT granted_by, granted_at FROM permits WHERE permit_id = 'q-1'`).Scan(&by, &granted))
	require.Equal(t, "alice", by)
	for name, mutate := range map[string]func(*ledger.Permit){
		"ID":          func(p *ledger.Permit) { p.ID = "" },
		"Key":         func(p *ledger.Permit) { p.Key = "" },
		"RequestHash": func(p *ledger.Permit) { p.RequestHash = "" },
		"By":          func(p *ledger.Permit) { p.By = "" },
	} {
		other := p
		other.ID = "q-new"
		mutate(&other)
		err := e.store.GrantPermit(e.ctx, other)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), name)
	}
}

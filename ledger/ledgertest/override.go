package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// testOverrideSeesHolders: an override permit is bound to the guard holders
// its card showed. Two approvals drawn at once each show only H; the first
// runs beside H, the second finds a holder its approver never saw (the
// first) and gets ClashUnseen: nothing stored, nothing consumed, a held row
// stays held. A fresh card naming every holder runs; a holder that ended
// since the card was drawn does not matter.
func testOverrideSeesHolders(t *testing.T, h Harness) {
	e := newEnv(t, h)
	db := e.db()
	const scope = "refund-per-order:ord-x"
	refund := func(key string, hold bool) ledger.ClaimRequest {
		r := req(key)
		r.GuardScope, r.GuardHold = scope, hold
		return r
	}
	hr := refund("h:1:0:apply_refund", true)
	require.Equal(t, ledger.Execute, e.claim(hr).Verdict)
	e.complete(hr.Key, "w1", ledger.Succeeded, `{"refund_id":"re_h"}`)

	// A and B: each card shows only H.
	a, b := refund("a:1:0:apply_refund", true), refund("b:1:0:apply_refund", true)
	a.PermitID = e.grantShown("q-a", a, true, hr.Key)
	b.PermitID = e.grantShown("q-b", b, true, hr.Key)
	require.Equal(t, ledger.Execute, e.claim(a).Verdict, "A's card showed the clash it passes")
	c := e.claim(b)
	require.Equal(t, ledger.ClashUnseen, c.Verdict, "B's card never showed A: %s", c.Reason)
	require.Contains(t, c.Reason, a.Key)
	require.Contains(t, c.Reason, hr.Key, "the reason says what the card showed")
	e.absent(b.Key)
	require.True(t, e.consumedAt(db, "q-b").IsZero(), "a refused override consumes nothing")
	require.Equal(t, ledger.ClashUnseen, e.claim(b).Verdict, "the stale permit never covers A")

	// B asked again on a fresh card that names A and H: it runs.
	b.PermitID = e.grantShown("q-b2", b, true, a.Key, hr.Key)
	require.Equal(t, ledger.Execute, e.claim(b).Verdict)
	require.False(t, e.consumedAt(db, "q-b2").IsZero())

	// A held row: approved on a card that did not show B, it stays held.
	cr := refund("c:1:0:apply_refund", true)
	require.Equal(t, ledger.Held, e.claim(cr).Verdict)
	cr.PermitID = e.grantShown("q-c", cr, true, hr.Key, a.Key)
	c = e.claim(cr)
	require.Equal(t, ledger.ClashUnseen, c.Verdict, c.Reason)
	require.Contains(t, c.Reason, b.Key)
	op, err := e.store.Get(e.ctx, cr.Key)
	require.NoError(t, err)
	require.Equal(t, ledger.NeedsHuman, op.Status, "the held row stays held")
	require.Zero(t, op.AttemptCount)
	require.True(t, e.consumedAt(db, "q-c").IsZero())

	// An override granted on a card that showed no clash covers none.
	cr.PermitID = e.grantShown("q-c-none", cr, true)
	require.Equal(t, ledger.ClashUnseen, e.claim(cr).Verdict)

	// H is reversed after the card was drawn: a holder that ended is no
	// clash, so the card's holders still cover every holder left.
	_, err = e.store.Transition(e.ctx, ledger.Transition{Key: hr.Key, Status: ledger.Compensated})
	require.NoError(t, err)
	cr.PermitID = e.grantShown("q-c2", cr, true, b.Key, a.Key, hr.Key, b.Key)
	c = e.claim(cr)
	require.Equal(t, ledger.Execute, c.Verdict, c.Reason)
	require.Equal(t, 1, c.Operation.AttemptCount)

	// The unseen check applies to overrides only: a permit without override
	// meets the clash as before (held), and a scope without holders needs
	// no holders on the card.
	d := refund("d:1:0:apply_refund", true)
	d.PermitID = e.grantShown("q-d", d, false, a.Key, b.Key, cr.Key)
	require.Equal(t, ledger.Held, e.claim(d).Verdict)
	free := req("e:1:0:apply_refund")
	free.GuardScope = "refund-per-order:ord-free"
	free.PermitID = e.grantShown("q-e", free, true)
	require.Equal(t, ledger.Execute, e.claim(free).Verdict)
	e.noDuplicateKeys()
}

// testUsedPermitRefused: a consumed permit is refused at the check, whatever
// the claim would do next (run, be held by a guard or as a suspected
// duplicate): verdict NoPermit naming when it was used, and nothing stored.
func testUsedPermitRefused(t *testing.T, h Harness) {
	e := newEnv(t, h)
	db := e.db()
	r := req("s1:1:0:apply_refund")
	r.PermitID = e.grant("q-1", r, false)
	require.Equal(t, ledger.Execute, e.claim(r).Verdict)
	used := e.consumedAt(db, "q-1")
	require.False(t, used.IsZero())
	e.complete(r.Key, "w1", ledger.FailedFinal, "")
	e.clock.Advance(time.Hour)
	n, err := e.store.Purge(e.ctx, e.clock.Now())
	require.NoError(t, err)
	require.Equal(t, 1, n)

	holder := req("s0:1:0:apply_refund")
	holder.GuardScope = "refund-per-order:o-used"
	holder.Entity, holder.NormalizedArgs, holder.DuplicateWindow = "order:o-used", `{"amount_minor":100}`, 24*time.Hour
	require.Equal(t, ledger.Execute, e.claim(holder).Verdict)

	for name, mutate := range map[string]func(*ledger.ClaimRequest){
		"plain": func(*ledger.ClaimRequest) {},
		"guard": func(c *ledger.ClaimRequest) { c.GuardScope = holder.GuardScope },
		"held":  func(c *ledger.ClaimRequest) { c.GuardScope, c.GuardHold = holder.GuardScope, true },
		"duplicate": func(c *ledger.ClaimRequest) {
			c.Entity, c.NormalizedArgs, c.DuplicateWindow = holder.Entity, holder.NormalizedArgs, time.Hour
		},
	} {
		again := r
		mutate(&again)
		c := e.claim(again)
		require.Equal(t, ledger.NoPermit, c.Verdict, "%s: a used permit is refused: %s", name, c.Reason)
		require.Contains(t, c.Reason, used.Format(time.RFC3339Nano), "%s: the reason says when the permit was used", name)
		e.absent(r.Key)
		require.True(t, used.Equal(e.consumedAt(db, "q-1")), "%s: consumed once", name)
	}
}

package ledgertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// Legacy is the row an Upgrade test expects in a ledger at schema version 1:
// a refund that succeeded a year before the suite's clock, holding its guard
// scope, as the first release stored it.
var Legacy = ledger.Operation{
	Key: "s0:1:0:apply_refund", ActionType: "apply_refund", RequestHash: "h0", Status: ledger.Succeeded, AttemptCount: 1,
	GuardScope: "refund-per-order:ord_1002", CreatedAt: NewClock().Now().Add(-365 * 24 * time.Hour).Truncate(time.Microsecond),
}

// Upgrade checks that a ledger made by the first schema upgrades in place:
// atV1 prepares loc at schema version 1 holding Legacy (with guard_key set
// and completed_at = created_at), using the driver's first migration only.
// The upgraded ledger keeps the row, its guard, and gains permits and the
// audit trail.
func Upgrade(t *testing.T, h Harness, atV1 func(t testing.TB, loc string)) {
	loc := h.New(t)
	atV1(t, loc)
	e := &env{t: t, h: h, loc: loc, clock: NewClock(), ctx: t.Context()}
	e.store = h.Open(t, loc, e.clock.Now)
	t.Cleanup(func() { _ = e.store.Close() })

	var versions, newest int
	require.NoError(t, e.db().QueryRowContext(e.ctx, `SELECT COUNT(*), MAX(version) FROM ledger_migrations`).Scan(&versions, &newest))
	require.Greater(t, newest, 1, "migrated past version 1")
	require.Equal(t, newest, versions)

	op, err := e.store.Get(e.ctx, Legacy.Key)
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.True(t, Legacy.CreatedAt.Equal(op.CreatedAt))

	n, err := e.store.Purge(e.ctx, e.clock.Now())
	require.NoError(t, err)
	require.Zero(t, n, "the old refund still holds its guard scope")
	third := req("s3:1:0:apply_refund")
	third.GuardScope = Legacy.GuardScope
	c := e.claim(third)
	require.Equal(t, ledger.GuardRefused, c.Verdict)
	require.Contains(t, c.Reason, Legacy.Key)

	third.PermitID = e.grant("q-3", third, true)
	require.Equal(t, ledger.Execute, e.claim(third).Verdict)
	_, err = e.store.RecordDecision(e.ctx, ledger.DecisionRecord{Key: third.Key, Kind: "override", By: "alice"})
	require.NoError(t, err)
	ops, err := e.store.InScope(e.ctx, Legacy.GuardScope, 5)
	require.NoError(t, err)
	require.Len(t, ops, 2)
}

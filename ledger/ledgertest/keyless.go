package ledgertest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// testKeylessCalls: the MCP gateway's memory of keyless calls is one row per
// caller and fingerprint, shared by every handle on the ledger (every
// gateway process), written only over the version read: of gateways that
// read the same row and write at once, exactly one wins and the others get
// ErrStale and change nothing. Purge forgets a row only once its
// ForgetAfter is before the cutoff.
func testKeylessCalls(t *testing.T, h Harness) {
	e := newEnv(t, h)
	other := h.Open(t, e.loc, e.clock.Now) // a second gateway process
	t.Cleanup(func() { _ = other.Close() })
	at := e.clock.Now()

	_, err := e.store.KeylessCall(e.ctx, "agent:mcp-agent", "fp1")
	require.ErrorIs(t, err, ledger.ErrNotFound)

	first := ledger.KeylessCall{Caller: "agent:mcp-agent", Fingerprint: "fp1",
		Call: ledger.KeylessTurn{Session: "mcp-a", Turn: 1, At: at}}
	got, err := e.store.PutKeylessCall(e.ctx, first)
	require.NoError(t, err)
	require.EqualValues(t, 1, got.Version)
	_, err = other.PutKeylessCall(e.ctx, first)
	require.ErrorIs(t, err, ledger.ErrStale, "a second insert of the same caller and fingerprint loses")

	seen, err := other.KeylessCall(e.ctx, "agent:mcp-agent", "fp1")
	require.NoError(t, err, "another handle (another gateway process) reads the row")
	require.Equal(t, got, seen)
	_, err = other.KeylessCall(e.ctx, "agent:someone-else", "fp1")
	require.ErrorIs(t, err, ledger.ErrNotFound, "another caller's identical call is not this one")

	// Two gateways read version 1 and write at once: one wins.
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			c := seen
			c.Call.Given, c.Call.DeliveredAt = "succeeded", at.Add(time.Duration(i+1)*time.Second)
			s := e.store
			if i%2 == 1 {
				s = other
			}
			_, errs[i] = s.PutKeylessCall(e.ctx, c)
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
		} else {
			require.ErrorIs(t, err, ledger.ErrStale)
		}
	}
	require.Equal(t, 1, wins, "exactly one writer over version 1 wins")
	now, err := e.store.KeylessCall(e.ctx, "agent:mcp-agent", "fp1")
	require.NoError(t, err)
	require.EqualValues(t, 2, now.Version)
	require.Equal(t, "succeeded", now.Call.Given)

	// Every field is kept, a held turn too, at microsecond precision.
	now.Held = ledger.KeylessTurn{Session: "mcp-b", Turn: 1<<40 + 7, At: at.Add(time.Minute), Given: "waiting"}
	now.ForgetAfter = at.Add(time.Hour)
	put, err := other.PutKeylessCall(e.ctx, now)
	require.NoError(t, err)
	back, err := e.store.KeylessCall(e.ctx, "agent:mcp-agent", "fp1")
	require.NoError(t, err)
	require.Equal(t, put, back)
	require.Equal(t, int64(1<<40+7), back.Held.Turn)
	_, err = e.store.PutKeylessCall(e.ctx, now)
	require.ErrorIs(t, err, ledger.ErrStale, "a write over a version already replaced loses")

	// Purge forgets it only after its ForgetAfter.
	kept := ledger.KeylessCall{Caller: "agent:mcp-agent", Fingerprint: "fp2", Call: ledger.KeylessTurn{Session: "mcp-a", Turn: 2, At: at, Given: "waiting"}}
	_, err = e.store.PutKeylessCall(e.ctx, kept)
	require.NoError(t, err)
	_, err = e.store.Purge(e.ctx, at.Add(30*time.Minute))
	require.NoError(t, err)
	_, err = e.store.KeylessCall(e.ctx, "agent:mcp-agent", "fp1")
	require.NoError(t, err, "kept until its ForgetAfter")
	_, err = e.store.Purge(e.ctx, at.Add(2*time.Hour))
	require.NoError(t, err)
	_, err = e.store.KeylessCall(e.ctx, "agent:mcp-agent", "fp1")
	require.ErrorIs(t, err, ledger.ErrNotFound, "forgotten after its ForgetAfter")
	_, err = e.store.KeylessCall(e.ctx, "agent:mcp-agent", "fp2")
	require.NoError(t, err, "a row without ForgetAfter is never purged")

	// Bad input is refused naming the field and the limit.
	for _, bad := range []ledger.KeylessCall{
		{Caller: "", Fingerprint: "f", Call: ledger.KeylessTurn{Session: "s", Turn: 1}},
		{Caller: strings.Repeat("c", ledger.MaxKeylessIdent+1), Fingerprint: "f", Call: ledger.KeylessTurn{Session: "s", Turn: 1}},
		{Caller: "c", Fingerprint: "f\x00", Call: ledger.KeylessTurn{Session: "s", Turn: 1}},
		{Caller: "c", Fingerprint: "f", Call: ledger.KeylessTurn{Session: "s", Turn: 0}},
		{Caller: "c", Fingerprint: "f", Call: ledger.KeylessTurn{Session: "", Turn: 1}},
		{Caller: "c", Fingerprint: "f", Call: ledger.KeylessTurn{Session: "s", Turn: 1, Given: strings.Repeat("g", 33)}},
		{Caller: "c", Fingerprint: "f", Call: ledger.KeylessTurn{Session: "s", Turn: 1}, Held: ledger.KeylessTurn{Session: "", Turn: 2}},
		{Caller: "c", Fingerprint: "f", Call: ledger.KeylessTurn{Session: "s", Turn: 1}, Version: -1},
	} {
		_, err := e.store.PutKeylessCall(e.ctx, bad)
		require.Error(t, err)
		require.False(t, errors.Is(err, ledger.ErrStale), "refused up front, not stale: %v", err)
	}
}

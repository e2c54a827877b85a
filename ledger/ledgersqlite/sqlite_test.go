package ledgersqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
)

var harness = ledgertest.Harness{
	New: func(t testing.TB) string { return filepath.Join(t.TempDir(), "ledger.db") },
	Open: func(t testing.TB, loc string, clock func() time.Time) ledger.Store {
		s, err := ledgersqlite.Open(context.Background(), loc, ledgersqlite.WithClock(clock))
		require.NoError(t, err)
		return s
	},
	DB: func(t testing.TB, loc string) *sql.DB {
		db, err := sql.Open("sqlite", loc+"?_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		return db
	},
}

func TestConformance(t *testing.T) { ledgertest.Run(t, harness) }

func BenchmarkClaimComplete(b *testing.B) { ledgertest.Benchmark(b, harness) }

func TestMemory(t *testing.T) {
	ctx := context.Background()
	s, err := ledgersqlite.Open(ctx, ledgersqlite.Memory)
	require.NoError(t, err)
	defer s.Close()
	c, err := s.Claim(ctx, ledger.ClaimRequest{Key: "k", ActionType: "t", RequestHash: "h", Executor: "w", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, ledger.Execute, c.Verdict)
	op, err := s.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ledger.InProgress, op.Status)
}

func TestWAL(t *testing.T) {
	s, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"))
	require.NoError(t, err)
	defer s.Close()
	var mode string
	require.NoError(t, s.DB().QueryRow(`PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)
}

func TestOpenErrors(t *testing.T) {
	_, err := ledgersqlite.Open(context.Background(), "")
	require.ErrorContains(t, err, ":memory:")
	_, err = ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "missing-dir", "l.db"))
	require.Error(t, err)
}

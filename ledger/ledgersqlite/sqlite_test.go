package ledgersqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/internal/sqlstore"
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

// TestQueriesUseIndexes checks SQLite's plan of every query the schema has an
// index for: a partial index is used only when the query repeats its
// predicate.
func TestQueriesUseIndexes(t *testing.T) {
	s, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"))
	require.NoError(t, err)
	defer s.Close()
	for _, q := range sqlstore.IndexedQueries(s.Store) {
		rows, err := s.DB().Query("EXPLAIN QUERY PLAN "+q.SQL, q.Args...)
		require.NoError(t, err, q.Name)
		var plan strings.Builder
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			plan.WriteString(detail + "\n")
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.Regexp(t, `USING (COVERING )?INDEX (`+q.Index+`)\b`, plan.String(), "%s:\n%s", q.Name, q.SQL)
		require.NotRegexp(t, `(?m)^SCAN operations$`, plan.String(), q.Name)
	}
}

func TestUpgradeInPlace(t *testing.T) {
	ledgertest.Upgrade(t, harness, func(t testing.TB, loc string) {
		ctx := context.Background()
		ms, err := sqlstore.LoadMigrations(ledgersqlite.Migrations, "migrations")
		require.NoError(t, err)
		db := harness.DB(t, loc)
		defer db.Close()
		require.NoError(t, sqlstore.Migrate(ctx, db, ms[:1], nil))
		op := ledgertest.Legacy
		at := op.CreatedAt.UnixMicro()
		_, err = db.ExecContext(ctx, `INSERT INTO operations (operation_key, action_type, request_hash, status, attempt_count,
			guard_scope, guard_key, created_at, updated_at, completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			op.Key, op.ActionType, op.RequestHash, string(op.Status), op.AttemptCount, op.GuardScope, op.GuardScope, at, at, at)
		require.NoError(t, err)
	})
}

// The ledger's file and its -wal and -shm are owner-only (0600) even in a
// directory that others may read, and an existing wider file is narrowed.
func TestLedgerFilesAreOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	path := filepath.Join(dir, "ledger.db")
	s, err := ledgersqlite.Open(context.Background(), path)
	require.NoError(t, err)
	_, err = s.DB().Exec(`PRAGMA user_version = 1`) // a write, so the -wal and -shm exist
	require.NoError(t, err)
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(f)
		require.NoError(t, err, f)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	require.NoError(t, s.Close())
	require.NoError(t, os.Chmod(path, 0o644))
	s, err = ledgersqlite.Open(context.Background(), path)
	require.NoError(t, err)
	defer s.Close()
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "an existing wider file is narrowed")
}

// TestWritersOfOneProcessNeverCollide: the claims and completions of one
// process queue for the one write connection, so none ever waits for SQLite's
// write lock (where the busy handler sleeps 1, 2, 5, 10 ms and on). Without a
// busy wait, a collision would fail its call with "database is locked".
func TestWritersOfOneProcessNeverCollide(t *testing.T) {
	ctx := context.Background()
	s, err := ledgersqlite.Open(ctx, filepath.Join(t.TempDir(), "l.db"), ledgersqlite.WithoutBusyWait())
	require.NoError(t, err)
	defer s.Close()
	const writers, pairs = 10, 20
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			errs <- func() error {
				for i := range pairs {
					key := fmt.Sprintf("w%d:%d", w, i)
					c, err := s.Claim(ctx, ledger.ClaimRequest{Key: key, ActionType: "t", RequestHash: "h", Executor: "e", Lease: time.Minute})
					if err != nil {
						return err
					}
					if c.Verdict != ledger.Execute {
						return fmt.Errorf("claim %s: verdict %s, want execute", key, c.Verdict)
					}
					if _, err := s.Get(ctx, key); err != nil {
						return err
					}
					if _, err := s.Complete(ctx, ledger.Completion{Key: key, Executor: "e", Status: ledger.Succeeded}); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
}

// TestStepWritesBuildNoEphemeralTable: SQLite answers RETURNING and an IN
// list of three or more constants (in a CHECK or a partial index's predicate)
// from an ephemeral table made for each statement, whose page cache the
// pure-Go allocator maps and unmaps: none of the statements of a write step
// may make one.
func TestStepWritesBuildNoEphemeralTable(t *testing.T) {
	s, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"))
	require.NoError(t, err)
	defer s.Close()
	for _, w := range sqlstore.StepWrites(s.Store) {
		rows, err := s.DB().Query("EXPLAIN "+w.SQL, make([]any, strings.Count(w.SQL, "?"))...)
		require.NoError(t, err, w.Name)
		var ops []string
		for rows.Next() {
			var (
				addr       int
				op         string
				p1, p2, p3 sql.NullInt64
				p4         sql.NullString
				p5         sql.NullInt64
				comment    sql.NullString
			)
			require.NoError(t, rows.Scan(&addr, &op, &p1, &p2, &p3, &p4, &p5, &comment), w.Name)
			ops = append(ops, op)
		}
		require.NoError(t, rows.Err(), w.Name)
		rows.Close()
		require.NotEmpty(t, ops, w.Name)
		require.NotContains(t, ops, "OpenEphemeral", "%s:\n%s", w.Name, w.SQL)
	}
}

// TestStatusIsChecked: the CHECK on status, an OR chain since migration 7,
// still refuses what is not a status, in any case.
func TestStatusIsChecked(t *testing.T) {
	s, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "l.db"))
	require.NoError(t, err)
	defer s.Close()
	insert := func(key, status string) error {
		_, err := s.DB().Exec(`INSERT INTO operations (operation_key, action_type, request_hash, status, created_at, updated_at)
			VALUES (?, 't', 'h', ?, 0, 0)`, key, status)
		return err
	}
	for i, st := range []ledger.Status{ledger.Pending, ledger.InProgress, ledger.Succeeded, ledger.FailedFinal, ledger.Unknown,
		ledger.NeedsHuman, ledger.Compensating, ledger.Compensated, ledger.CompensationFailed} {
		require.NoError(t, insert(fmt.Sprint("ok", i), string(st)), st)
	}
	for i, st := range []string{"", "bogus", "SUCCEEDED", "succeeded ", "in progress"} {
		require.ErrorContains(t, insert(fmt.Sprint("bad", i), st), "CHECK constraint failed", "status %q", st)
	}
}

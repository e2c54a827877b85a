package ledgerpg_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/internal/sqlstore"
	"github.com/agentsaga/agentsaga/ledger/ledgerpg"
	"github.com/agentsaga/agentsaga/ledger/ledgertest"
)

// DSNEnv overrides the test database.
const DSNEnv = "AGENTSAGA_TEST_POSTGRES_DSN"

func baseDSN() string {
	if dsn := os.Getenv(DSNEnv); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

var (
	reachOnce sync.Once
	reachErr  error
)

// requirePostgres skips the test when PostgreSQL cannot be reached, or fails
// it when CI=true.
func requirePostgres(t testing.TB) {
	t.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, baseDSN())
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		reachErr = err
	})
	if reachErr == nil {
		return
	}
	msg := fmt.Sprintf("PostgreSQL unavailable at %s (set %s to another DSN): %v", redactDSN(baseDSN()), DSNEnv, reachErr)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true requires it")
	}
	t.Skip(msg) // msg says PostgreSQL is unavailable and how to point at one
}

func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}

// withSearchPath returns dsn with the search_path set to schema.
func withSearchPath(dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			panic(err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

func rawDB(t testing.TB, dsn string) *sql.DB {
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	return stdlib.OpenDB(*cfg)
}

var harness = ledgertest.Harness{
	New: func(t testing.TB) string {
		requirePostgres(t)
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		schema := "ledgertest_" + hex.EncodeToString(b)
		admin := rawDB(t, baseDSN())
		defer admin.Close()
		_, err := admin.Exec(`CREATE SCHEMA ` + schema)
		require.NoError(t, err)
		t.Cleanup(func() {
			db := rawDB(t, baseDSN())
			defer db.Close()
			_, err := db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
			require.NoError(t, err)
		})
		return withSearchPath(baseDSN(), schema)
	},
	Open: func(t testing.TB, loc string, clock func() time.Time) ledger.Store {
		s, err := ledgerpg.Open(context.Background(), loc, ledgerpg.WithClock(clock), ledgerpg.WithMaxConns(8))
		require.NoError(t, err)
		return s
	},
	DB: func(t testing.TB, loc string) *sql.DB { return rawDB(t, loc) },
}

func TestConformance(t *testing.T) {
	requirePostgres(t)
	ledgertest.Run(t, harness)
}

func BenchmarkClaimComplete(b *testing.B) {
	requirePostgres(b)
	ledgertest.Benchmark(b, harness)
}

func TestResultIsJSONB(t *testing.T) {
	loc := harness.New(t)
	s := harness.Open(t, loc, nil)
	defer s.Close()
	ctx := context.Background()
	_, err := s.Claim(ctx, ledger.ClaimRequest{Key: "k", ActionType: "t", RequestHash: "h", Executor: "w", Lease: time.Minute})
	require.NoError(t, err)
	_, err = s.Complete(ctx, ledger.Completion{Key: "k", Executor: "w", Status: ledger.Succeeded, Result: []byte(`{"refund_id":"re_1"}`)})
	require.NoError(t, err)
	var id string
	require.NoError(t, s.(*ledgerpg.Store).DB().QueryRow(`SELECT result_json->>'refund_id' FROM operations`).Scan(&id))
	require.Equal(t, "re_1", id)
}

func TestOpenErrors(t *testing.T) {
	_, err := ledgerpg.Open(context.Background(), "postgres://%zz")
	require.ErrorContains(t, err, "postgres://")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = ledgerpg.Open(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	require.ErrorContains(t, err, "is PostgreSQL running")
}

// TestQueriesUseIndexes checks PostgreSQL's generic plan of every query the
// schema has an index for. Sequential scans are disabled so that a table of
// a few rows still shows whether an index can serve the query at all.
func TestQueriesUseIndexes(t *testing.T) {
	loc := harness.New(t)
	s, err := ledgerpg.Open(context.Background(), loc)
	require.NoError(t, err)
	defer s.Close()
	ctx := context.Background()
	conn, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	for i, q := range sqlstore.IndexedQueries(s.Store) {
		// A prepared statement gets the generic plan, made without the
		// parameters' values, as pgx's statement cache would use.
		name := fmt.Sprintf("plancheck%d", i)
		_, err := conn.ExecContext(ctx, "PREPARE "+name+" AS "+q.SQL)
		require.NoError(t, err, q.Name)
		lits := make([]string, len(q.Args))
		for j, a := range q.Args {
			switch v := a.(type) {
			case nil:
				lits[j] = "NULL"
			case string:
				lits[j] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
			case time.Time:
				lits[j] = "'" + v.Format(time.RFC3339Nano) + "'"
			default:
				lits[j] = fmt.Sprint(v)
			}
		}
		rows, err := conn.QueryContext(ctx, "EXPLAIN EXECUTE "+name+"("+strings.Join(lits, ", ")+")")
		require.NoError(t, err, q.Name)
		var plan strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		rows.Close()
		require.Regexp(t, `(Index (Only )?Scan (Backward )?using|Bitmap Index Scan on) (`+q.Index+`)\b`, plan.String(), "%s:\n%s", q.Name, q.SQL)
		require.Regexp(t, `\$\d`, plan.String(), "%s: a generic plan", q.Name)
		require.NotContains(t, plan.String(), "Seq Scan", q.Name)
	}
}

// TestDatabaseClockDecidesLeases: two workers share a ledger, one with its
// clock 16 s past the end of the other's lease, one behind. Without WithClock
// the database's clock decides: the skewed worker cannot take a live lease,
// its own leases are measured from the database's time, and once the
// database says a lease ended, a worker that runs behind takes it over.
func TestDatabaseClockDecidesLeases(t *testing.T) {
	ctx := context.Background()
	loc := harness.New(t)
	const lease = time.Minute
	skew := lease + 16*time.Second
	open := func(offset time.Duration) *ledgerpg.Store {
		s, err := ledgerpg.Open(ctx, loc, ledgerpg.WithWorkerClock(func() time.Time { return time.Now().Add(offset) }))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	honest, ahead, behind := open(0), open(skew), open(-skew)
	r := ledger.ClaimRequest{Key: "s1:1:0:apply_refund", ActionType: "apply_refund", RequestHash: "h1", Executor: "honest#1", Lease: lease}
	c, err := honest.Claim(ctx, r)
	require.NoError(t, err)
	require.Equal(t, ledger.Execute, c.Verdict)

	r.Executor = "ahead#1"
	c, err = ahead.Claim(ctx, r)
	require.NoError(t, err)
	require.Equal(t, ledger.InFlight, c.Verdict, "a worker whose clock runs ahead must not take over a live lease")
	require.Equal(t, "honest#1", c.Operation.LeaseOwner)

	// The skewed worker's own lease is the database's now plus the lease.
	fresh := r
	fresh.Key = "s1:1:1:send_email"
	c, err = ahead.Claim(ctx, fresh)
	require.NoError(t, err)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.Equal(t, lease, c.Operation.LeaseUntil.Sub(c.Operation.CreatedAt))
	var dbNow time.Time
	require.NoError(t, ahead.DB().QueryRowContext(ctx, `SELECT statement_timestamp()`).Scan(&dbNow))
	require.Less(t, dbNow.Sub(c.Operation.CreatedAt).Abs(), skew/2, "created at the database's time %s, not the worker's", dbNow)

	// The database says the first lease ended one microsecond ago: the
	// worker that runs behind takes it over, to reconcile first.
	_, err = honest.DB().ExecContext(ctx, `UPDATE operations SET lease_until = statement_timestamp() - interval '1 microsecond' WHERE operation_key = $1`, r.Key)
	require.NoError(t, err)
	r.Executor = "behind#1"
	c, err = behind.Claim(ctx, r)
	require.NoError(t, err)
	require.Equal(t, ledger.ReconcileFirst, c.Verdict, "an ended lease is ended for a worker that runs behind too")
	require.Equal(t, "behind#1", c.Operation.LeaseOwner)

	// Exceptions reads the database's clock as well: the lease just
	// taken is live, the one moved back is stuck.
	_, err = honest.DB().ExecContext(ctx, `UPDATE operations SET lease_until = statement_timestamp() - interval '1 microsecond' WHERE operation_key = $1`, fresh.Key)
	require.NoError(t, err)
	for _, s := range []*ledgerpg.Store{ahead, behind} {
		exc, err := s.Exceptions(ctx, ledger.ExceptionFilter{})
		require.NoError(t, err)
		require.Len(t, exc, 1)
		require.Equal(t, fresh.Key, exc[0].Key)
	}
}

func TestUpgradeInPlace(t *testing.T) {
	ledgertest.Upgrade(t, harness, func(t testing.TB, loc string) {
		ctx := context.Background()
		ms, err := sqlstore.LoadMigrations(ledgerpg.Migrations, "migrations")
		require.NoError(t, err)
		db := harness.DB(t, loc)
		defer db.Close()
		require.NoError(t, sqlstore.Migrate(ctx, db, ms[:1], nil))
		op := ledgertest.Legacy
		_, err = db.ExecContext(ctx, `INSERT INTO operations (operation_key, action_type, request_hash, status, attempt_count,
			guard_scope, guard_key, created_at, updated_at, completed_at) VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $7, $7)`,
			op.Key, op.ActionType, op.RequestHash, string(op.Status), op.AttemptCount, op.GuardScope, op.CreatedAt)
		require.NoError(t, err)
	})
}

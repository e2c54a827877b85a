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

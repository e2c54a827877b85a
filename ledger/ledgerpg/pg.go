// Package ledgerpg is the production ledger driver, on PostgreSQL through
// pgx. The schema lives in the connection's search_path, so several ledgers
// can share a database: add search_path=SCHEMA to the DSN (the schema must
// exist). Claims never hold a transaction across a provider call; the guard
// and duplicate checks take transaction-scoped advisory locks.
//
// Every time the store records or compares, lease expiry above all, is the
// database's clock (statement_timestamp()), read in the statement that uses
// it: workers whose clocks disagree still agree on who holds a lease.
package ledgerpg

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DefaultMaxConns is the connection pool size when WithMaxConns is not given.
const DefaultMaxConns = 10

// Option configures Open.
type Option func(*options)

type options struct {
	clock       func() time.Time
	workerClock func() time.Time // tests: the Go clock, while the database's clock decides
	maxConns    int
	schema      string
}

// WithClock is for tests: the store reads the time from now instead of the
// database's clock, so a test decides when leases expire. Never set it in a
// worker: leases would then follow each worker's own clock, and a worker whose
// clock runs ahead would take over live leases.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// WithSchema keeps the ledger in schema (which must exist) instead of the
// DSN's default: its connections set search_path to it.
func WithSchema(schema string) Option { return func(o *options) { o.schema = schema } }

// WithMaxConns sets the most connections the store opens (default
// DefaultMaxConns).
func WithMaxConns(n int) Option { return func(o *options) { o.maxConns = n } }

// Store is a ledger.Store on PostgreSQL.
type Store struct {
	// The shared implementation provides every ledger.Store method and
	// DB, the underlying database for audit queries.
	*sqlstore.Store
}

var _ ledger.Store = (*Store)(nil)

// Open connects to the PostgreSQL database named by dsn (a postgres:// URL or
// a key=value string, as pgx accepts) and applies the schema migrations it
// lacks, under an advisory lock so concurrent openers apply each once.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{maxConns: DefaultMaxConns}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("ledgerpg: parse DSN: %w (write postgres://USER@HOST:5432/DB?sslmode=disable)", err)
	}
	if o.schema != "" {
		cfg.RuntimeParams["search_path"] = o.schema
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(o.maxConns)
	db.SetMaxIdleConns(o.maxConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: connect to %s:%d/%s: %w (is PostgreSQL running and the DSN right?)", cfg.Host, cfg.Port, cfg.Database, err)
	}
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err == nil {
		err = sqlstore.Migrate(ctx, db, ms, migrationLock)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: %w", err)
	}
	d, clock := dialect, o.workerClock
	if o.clock != nil {
		d.DBClock, clock = false, o.clock
	}
	s, err := sqlstore.New(ctx, db, d, clock)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: %w", err)
	}
	return &Store{s}, nil
}

// migrationLock takes a session advisory lock private to the schema the
// ledger lives in.
func migrationLock(ctx context.Context, conn *sql.Conn) (func(), error) {
	const key = `hashtextextended('agentsaga.ledger.migrate:' || current_schema(), 0)`
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(`+key+`)`); err != nil {
		return nil, err
	}
	return func() {
		// With the context gone the lock still goes with the session when
		// the connection closes; unlocking is best effort.
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+key+`)`)
	}, nil
}

// dialect: a NULL time parameter of Now and NowPlus means the database's
// clock; WithClock passes the test's clock instead.
var dialect = sqlstore.Dialect{
	Name:      "postgres",
	Numbered:  true,
	Time:      func(t time.Time) any { return t },
	TimeParam: "CAST(? AS timestamptz)",
	Now:       "COALESCE(CAST(? AS timestamptz), statement_timestamp())",
	NowPlus:   "(COALESCE(CAST(? AS timestamptz), statement_timestamp()) + CAST(? AS bigint) * interval '1 microsecond')",
	DBClock:   true,
	Lock: func(ctx context.Context, tx *sql.Tx, names []string) error {
		sort.Strings(names) // one order, no deadlocks
		for _, n := range names {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || $1, 0))`, n); err != nil {
				return err
			}
		}
		return nil
	},
	IsUniqueViolation: func(err error) bool {
		var e *pgconn.PgError
		return errors.As(err, &e) && e.Code == "23505"
	},
}

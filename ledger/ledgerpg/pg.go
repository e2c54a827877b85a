// Package ledgerpg is the production ledger driver, on PostgreSQL through
// pgx. The schema lives in the connection's search_path, so several ledgers
// can share a database: add search_path=SCHEMA to the DSN (the schema must
// exist). Claims never hold a transaction across a provider call; the guard
// and duplicate checks take transaction-scoped advisory locks.
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
	clock    func() time.Time
	maxConns int
}

// WithClock makes the store read the time from now instead of time.Now, so
// tests decide when leases expire. The database's own clock is never used.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// WithMaxConns sets the most connections the store opens (default
// DefaultMaxConns).
func WithMaxConns(n int) Option { return func(o *options) { o.maxConns = n } }

// Store is a ledger.Store on PostgreSQL.
type Store struct {
	s *sqlstore.Store
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
	return &Store{s: sqlstore.New(db, dialect, o.clock)}, nil
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

var dialect = sqlstore.Dialect{
	Name:     "postgres",
	Numbered: true,
	Time:     func(t time.Time) any { return t },
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

// DB returns the underlying database, for audit queries.
func (s *Store) DB() *sql.DB { return s.s.DB() }

// Claim implements ledger.Store.
func (s *Store) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, error) {
	return s.s.Claim(ctx, req)
}

// Complete implements ledger.Store.
func (s *Store) Complete(ctx context.Context, c ledger.Completion) (ledger.Operation, error) {
	return s.s.Complete(ctx, c)
}

// Resolve implements ledger.Store.
func (s *Store) Resolve(ctx context.Context, r ledger.Resolution) (ledger.Operation, error) {
	return s.s.Resolve(ctx, r)
}

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, key string) (ledger.Operation, error) {
	return s.s.Get(ctx, key)
}

// Exceptions implements ledger.Store.
func (s *Store) Exceptions(ctx context.Context, f ledger.ExceptionFilter) ([]ledger.Operation, error) {
	return s.s.Exceptions(ctx, f)
}

// Purge implements ledger.Store.
func (s *Store) Purge(ctx context.Context, completedBefore time.Time) (int, error) {
	return s.s.Purge(ctx, completedBefore)
}

// Close closes the connection pool.
func (s *Store) Close() error { return s.s.Close() }

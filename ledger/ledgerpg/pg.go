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
// a key=value string, as pgx accepts). A ledger whose schema is current is
// opened without a schema change, so a runtime role with only the grants of
// GrantRuntime opens it. A schema that lacks migrations is migrated, under an
// advisory lock so concurrent openers apply each once, when the DSN's role
// may (the owner); when it may not, Open refuses and names `starter ledger
// migrate`, to be run as the owner after a backup.
func Open(ctx context.Context, dsn string, opts ...Option) (*Store, error) {
	o := options{maxConns: DefaultMaxConns}
	for _, opt := range opts {
		opt(&o)
	}
	db, err := connect(ctx, dsn, o)
	if err != nil {
		return nil, err
	}
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: %w", err)
	}
	latest := ms[len(ms)-1].Version
	have, err := schemaVersion(ctx, db)
	if err == nil && have != latest {
		err = sqlstore.Migrate(ctx, db, ms, migrationLock)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == insufficientPrivilege {
			var role string
			_ = db.QueryRowContext(ctx, `SELECT current_user`).Scan(&role)
			err = fmt.Errorf("the ledger schema is at version %d and this agentsaga needs %d, but role %q may not change it (%s): "+
				"back up the ledger (pg_dump), run `starter ledger migrate --ledger DSN` with the DSN of the role that owns the ledger, then start again: %w",
				have, latest, role, pe.Message, ErrSchemaBehind)
		}
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: %w", err)
	}
	d, clock := dialect, o.workerClock
	if o.clock != nil {
		d.DBClock, clock = false, o.clock
	}
	s, err := sqlstore.New(ctx, sqlstore.Conns{Read: db}, d, clock)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: %w", err)
	}
	return &Store{s}, nil
}

// ErrSchemaBehind is what Open wraps when the ledger's schema lacks
// migrations and the DSN's role may not apply them.
var ErrSchemaBehind = errors.New("ledger schema behind this binary")

// insufficientPrivilege is PostgreSQL's SQLSTATE for a refused privilege.
const insufficientPrivilege = "42501"

func connect(ctx context.Context, dsn string, o options) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("ledgerpg: parse DSN: %w (write postgres://USER@HOST:5432/DB?sslmode=disable)", err)
	}
	if o.schema != "" {
		cfg.RuntimeParams["search_path"] = o.schema
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(max(o.maxConns, 1))
	db.SetMaxIdleConns(max(o.maxConns, 1))
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("ledgerpg: connect to %s:%d/%s: %w (is PostgreSQL running and the DSN right?)", cfg.Host, cfg.Port, cfg.Database, err)
	}
	return db, nil
}

// schemaVersion is the newest migration the ledger in the connection's
// schema records, 0 for none.
func schemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('ledger_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read the ledger's schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM ledger_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the ledger's schema version: %w", err)
	}
	return int(v.Int64), nil
}

// Migrate applies the migrations the ledger at dsn lacks, as the DSN's role
// (the role that owns the ledger), and returns the schema version before and
// after. Back the database up first: migrations go forward only.
func Migrate(ctx context.Context, dsn string, opts ...Option) (from, to int, err error) {
	o := options{maxConns: 2}
	for _, opt := range opts {
		opt(&o)
	}
	db, err := connect(ctx, dsn, o)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err != nil {
		return 0, 0, fmt.Errorf("ledgerpg: %w", err)
	}
	if from, err = schemaVersion(ctx, db); err != nil {
		return 0, 0, fmt.Errorf("ledgerpg: %w", err)
	}
	if err := sqlstore.Migrate(ctx, db, ms, migrationLock); err != nil {
		return from, from, fmt.Errorf("ledgerpg: %w", err)
	}
	to, err = schemaVersion(ctx, db)
	if err != nil {
		return from, to, fmt.Errorf("ledgerpg: %w", err)
	}
	return from, to, nil
}

// RuntimePrivileges are the table privileges GrantRuntime gives a worker's
// role. The audit trail (decisions) is append-only by grant: SELECT and
// INSERT, never UPDATE, DELETE or TRUNCATE, whatever the trigger its owner
// could drop. Purge deletes from operations, keyless_calls and question_claims only. Every table a migration
// makes must be listed here (the tests check it).
var RuntimePrivileges = map[string]string{
	"operations":        "SELECT, INSERT, UPDATE, DELETE",
	"permits":           "SELECT, INSERT, UPDATE",
	"decisions":         "SELECT, INSERT",
	"ledger_migrations": "SELECT",
	"keyless_calls":     "SELECT, INSERT, UPDATE, DELETE",
	"question_claims":   "SELECT, INSERT, UPDATE, DELETE",
}

// GrantRuntime gives role exactly RuntimePrivileges on the ledger at dsn
// (and use of its schema), revoking anything else it held there. Run it as
// the owner after Migrate, and again after every migration.
func GrantRuntime(ctx context.Context, dsn, role string, opts ...Option) error {
	if role == "" || len(role) > 63 {
		return fmt.Errorf("ledgerpg: runtime role %q: give a PostgreSQL role name of 1 to 63 bytes", role)
	}
	o := options{maxConns: 1}
	for _, opt := range opts {
		opt(&o)
	}
	db, err := connect(ctx, dsn, o)
	if err != nil {
		return err
	}
	defer db.Close()
	r := pgx.Identifier{role}.Sanitize()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("ledgerpg: grant to %s: %w", role, err)
	}
	defer func() { _ = tx.Rollback() }()
	var schema string
	if err := tx.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return fmt.Errorf("ledgerpg: grant to %s: %w", role, err)
	}
	stmts := []string{`GRANT USAGE ON SCHEMA ` + pgx.Identifier{schema}.Sanitize() + ` TO ` + r}
	tables := make([]string, 0, len(RuntimePrivileges))
	for t := range RuntimePrivileges {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		// A table a later migration makes is granted when this runs again
		// after that migration.
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
			return fmt.Errorf("ledgerpg: grant to %s: %w", role, err)
		}
		if exists {
			stmts = append(stmts, `REVOKE ALL ON `+t+` FROM `+r, `GRANT `+RuntimePrivileges[t]+` ON `+t+` TO `+r)
		}
	}
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("ledgerpg: grant to %s: %s: %w (run it as the role that owns the ledger, after `ledger migrate`)", role, q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("ledgerpg: grant to %s: %w", role, err)
	}
	return nil
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

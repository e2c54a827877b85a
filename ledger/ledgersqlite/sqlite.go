// Package ledgersqlite is the embedded ledger driver: SQLite in pure Go
// (modernc.org/sqlite, no cgo), in WAL mode, the default store of a single
// machine. Any number of processes may open the same file; every write
// transaction is BEGIN IMMEDIATE, so claims are serialized by SQLite itself.
// Within one process the writes share one connection and queue for it in Go,
// so a claim never sleeps in SQLite's busy handler behind a claim of its own
// process; reads have connections of their own.
package ledgersqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/agentsaga/agentsaga/internal/privfile"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/internal/sqlstore"
)

// Memory is the path that opens a private in-memory ledger, lost on Close.
const Memory = ":memory:"

// BusyTimeout is how long a connection waits for another writer (another
// process: the writers of one process queue for their one connection)
// before it gives up with "database is locked".
const BusyTimeout = 10 * time.Second

//go:embed migrations/*.sql
var migrations embed.FS

// readConns is the number of connections reads may use at once, beside the
// one connection of the writes.
const readConns = 4

// Option configures Open.
type Option func(*options)

type options struct {
	clock func() time.Time
	busy  time.Duration // BusyTimeout unless a test sets it
}

// WithClock makes the store read the time from now instead of time.Now, so
// tests decide when leases expire.
func WithClock(now func() time.Time) Option { return func(o *options) { o.clock = now } }

// Store is a ledger.Store on SQLite.
type Store struct {
	// The shared implementation provides every ledger.Store method and
	// DB, the underlying database for audit queries.
	*sqlstore.Store
}

var _ ledger.Store = (*Store)(nil)

// Open opens the ledger in the SQLite file at path, creating it if missing,
// and applies the schema migrations it lacks. Path Memory (":memory:") opens a
// private in-memory ledger.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{busy: BusyTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" {
		return nil, errors.New("ledgersqlite: empty path: pass a file path such as data/ledger.db, or :memory: for a database in memory")
	}
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("ledgersqlite: path %q contains '?': choose a file name without it", path)
	}
	pragmas := fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_txlock=immediate", o.busy.Milliseconds())
	memory := path == Memory
	if !memory {
		// The ledger holds customer data: owner-only, whatever the
		// directory's mode or the umask.
		if err := privfile.Ensure(path); err != nil {
			return nil, fmt.Errorf("ledgersqlite: %w", err)
		}
	}
	db, err := sql.Open("sqlite", path+pragmas)
	if err != nil {
		return nil, fmt.Errorf("ledgersqlite: open %s: %w", path, err)
	}
	conns := sqlstore.Conns{Read: db, Write: db}
	if memory {
		// Every connection to :memory: is another database: keep one,
		// forever, for reads and writes alike.
		db.SetMaxOpenConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
	} else {
		// SQLite takes one writer at a time: the writes get one connection
		// of their own, so the process's writers queue in Go instead of
		// sleeping in SQLite's busy handler; a few more let reads run
		// beside them. Other processes on the file still wait in it.
		db.SetMaxOpenConns(readConns)
		db.SetMaxIdleConns(readConns)
		if conns.Write, err = sql.Open("sqlite", path+pragmas); err != nil {
			db.Close()
			return nil, fmt.Errorf("ledgersqlite: open %s: %w", path, err)
		}
		conns.Write.SetMaxOpenConns(1)
		conns.Write.SetMaxIdleConns(1)
		conns.Write.SetConnMaxLifetime(0)
		conns.Write.SetConnMaxIdleTime(0)
	}
	closeAll := func() {
		db.Close()
		if conns.Write != db {
			conns.Write.Close()
		}
	}
	if !memory {
		if err := ensureWAL(ctx, conns.Write); err != nil {
			closeAll()
			return nil, fmt.Errorf("ledgersqlite: open %s: %w", path, err)
		}
	}
	if err := migrate(ctx, conns.Write); err != nil {
		closeAll()
		return nil, fmt.Errorf("ledgersqlite: open %s: %w", path, err)
	}
	s, err := sqlstore.New(ctx, conns, dialect, o.clock)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("ledgersqlite: open %s: %w", path, err)
	}
	return &Store{s}, nil
}

// ensureWAL switches the database file to write-ahead logging, which then
// stays on for every later connection. SQLite answers a journal mode switch
// that races with another process opening the same new file with
// SQLITE_BUSY at once, without its busy handler, so the switch is retried here
// for up to BusyTimeout.
func ensureWAL(ctx context.Context, db *sql.DB) error {
	deadline := time.Now().Add(BusyTimeout)
	wait := time.Millisecond
	for {
		var mode string
		err := db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
		if err == nil && strings.EqualFold(mode, "wal") {
			return nil
		}
		if err == nil {
			return fmt.Errorf("switch to WAL journal mode: SQLite kept %q; use a local file system that supports WAL", mode)
		}
		var e *sqlite.Error
		if !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return fmt.Errorf("switch to WAL journal mode: %w", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func migrate(ctx context.Context, db *sql.DB) error {
	ms, err := sqlstore.LoadMigrations(migrations, "migrations")
	if err != nil {
		return err
	}
	return sqlstore.Migrate(ctx, db, ms, nil)
}

// dialect: SQLite runs inside the process, so the process clock is the
// database's clock (WithClock replaces it in tests).
var dialect = sqlstore.Dialect{
	Name:      "sqlite",
	ReadBack:  true,
	Time:      func(t time.Time) any { return t.UnixMicro() },
	TimeParam: "?",
	Now:       "?",
	NowPlus:   "(? + ?)",
	IsUniqueViolation: func(err error) bool {
		var e *sqlite.Error
		if !errors.As(err, &e) {
			return false
		}
		return e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	},
}

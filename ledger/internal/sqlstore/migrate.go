package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Migration is one versioned schema change, read from a file named
// NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// LoadMigrations reads every NNNN_name.sql file of dir in fsys, in version
// order.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name it NNNN_what.sql with a positive version", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d: renumber one", prev, name, v)
		}
		seen[v] = name
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Migrate applies the migrations the database lacks, each in its own
// transaction, recording them in ledger_migrations. lock, when set, is held
// on one connection for the whole run so concurrent openers apply each
// migration once (PostgreSQL's advisory lock); without it the transactions
// must be serialized by the database itself (SQLite's BEGIN IMMEDIATE).
func Migrate(ctx context.Context, db *sql.DB, ms []Migration, lock func(ctx context.Context, conn *sql.Conn) (unlock func(), err error)) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migrate ledger schema: %w", err)
	}
	defer conn.Close()
	if lock != nil {
		unlock, err := lock(ctx, conn)
		if err != nil {
			return fmt.Errorf("migrate ledger schema: take the migration lock: %w", err)
		}
		defer unlock()
	}
	for _, m := range ms {
		if err := apply(ctx, conn, m, ms[len(ms)-1].Version); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, conn *sql.Conn, m Migration, latest int) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate ledger schema to %s: %w", m.Name, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ledger_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("migrate ledger schema: create ledger_migrations: %w", err)
	}
	var newest sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT MAX(version) FROM ledger_migrations`).Scan(&newest); err != nil {
		return fmt.Errorf("migrate ledger schema: read ledger_migrations: %w", err)
	}
	if int(newest.Int64) > latest {
		return fmt.Errorf("ledger schema is at version %d but this binary knows only up to %d: run a newer agentsaga against this ledger", newest.Int64, latest)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM ledger_migrations WHERE version = `+strconv.Itoa(m.Version)).Scan(&n); err != nil {
		return fmt.Errorf("migrate ledger schema: read ledger_migrations: %w", err)
	}
	if n > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migrate ledger schema to %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO ledger_migrations (version, name, applied_at) VALUES (`+
		strconv.Itoa(m.Version)+`, '`+strings.ReplaceAll(m.Name, "'", "''")+`', '`+time.Now().UTC().Format(time.RFC3339)+`')`); err != nil {
		return fmt.Errorf("migrate ledger schema to %s: record it: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate ledger schema to %s: commit: %w", m.Name, err)
	}
	return nil
}

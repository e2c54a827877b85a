// Package ledgerdb opens a ledger by DSN, choosing the driver:
//
//	sqlite:PATH              SQLite file at PATH, created if missing (e.g. sqlite:data/ledger.db)
//	sqlite::memory:          private in-memory SQLite ledger, lost on Close (tests, demos)
//	postgres://...           PostgreSQL, as pgx accepts it (postgresql:// too);
//	                         add search_path=SCHEMA to keep the ledger in its own schema
//
// This is what the --ledger flag of the worker and the starter takes.
package ledgerdb

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerpg"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/redact"
)

// Usage says which DSNs Open understands, for flag help and errors.
const Usage = "sqlite:PATH (a file, created if missing), sqlite::memory: (in memory, for tests), " +
	"or postgres://USER@HOST:5432/DB?sslmode=disable"

// Open opens the ledger named by dsn and applies its schema migrations.
func Open(ctx context.Context, dsn string) (ledger.Store, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		path := strings.TrimPrefix(dsn, "sqlite:")
		if strings.HasPrefix(path, "//") {
			return nil, fmt.Errorf("ledger DSN %q: write sqlite:PATH without slashes after the colon (sqlite:/abs/path.db or sqlite:rel/path.db)", redact.DSN(dsn))
		}
		s, err := ledgersqlite.Open(ctx, path)
		if err != nil {
			return nil, err
		}
		return s, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		s, err := ledgerpg.Open(ctx, dsn)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	scheme, _, found := strings.Cut(dsn, ":")
	if !found || strings.ContainsAny(scheme, " =") {
		// Only a scheme is ever echoed: the rest (a key=value DSN
		// too) may hold a password.
		return nil, fmt.Errorf("ledger DSN is not understood (it names no scheme; key=value DSNs are not accepted): write %s", Usage)
	}
	return nil, fmt.Errorf("ledger DSN starting %q is not understood: write %s", scheme, Usage)
}

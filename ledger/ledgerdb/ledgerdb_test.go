package ledgerdb_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger/ledgerpg"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
)

func TestOpenSQLite(t *testing.T) {
	ctx := context.Background()
	for _, dsn := range []string{"sqlite:" + filepath.Join(t.TempDir(), "ledger.db"), "sqlite::memory:"} {
		s, err := ledgerdb.Open(ctx, dsn)
		require.NoError(t, err, dsn)
		require.IsType(t, &ledgersqlite.Store{}, s)
		c, err := s.Claim(ctx, ledger.ClaimRequest{Key: "k", ActionType: "t", RequestHash: "h", Executor: "w", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, ledger.Execute, c.Verdict)
		require.NoError(t, s.Close())
	}
}

func TestOpenPostgresPicksDriver(t *testing.T) {
	// A closed port: the error proves the PostgreSQL driver was chosen,
	// without needing a server.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, dsn := range []string{"postgres://u@127.0.0.1:1/db?connect_timeout=2", "postgresql://u@127.0.0.1:1/db?connect_timeout=2"} {
		_, err := ledgerdb.Open(ctx, dsn)
		require.ErrorContains(t, err, "ledgerpg", dsn)
	}
	var _ ledger.Store = (*ledgerpg.Store)(nil)
}

func TestOpenBadDSN(t *testing.T) {
	for _, dsn := range []string{"", "ledger.db", "mysql://root:hunter2@db/x", "sqlite:", "sqlite://x.db",
		"host=db password=hunter2", "host=db password='hunter2 x'", "postgres://postgres:hunter2@[::1", "sqlite://u:hunter2@x.db"} {
		_, err := ledgerdb.Open(context.Background(), dsn)
		require.Error(t, err, dsn)
		require.NotContains(t, err.Error(), "hunter2")
		if dsn != "sqlite:" && !strings.HasPrefix(dsn, "postgres") {
			require.Contains(t, err.Error(), "sqlite:", dsn)
		}
	}
}

package ledgerpg_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/internal/sqlstore"
	"github.com/agentsaga/agentsaga/ledger/ledgerpg"
)

// roleDB makes a throwaway database owned by a throwaway owner role, and a
// runtime role that may only connect, as deploy/postgres/init-roles.sh
// does; all dropped when the test ends. It returns the owner's and the
// runtime role's DSNs and the runtime role's name.
func roleDB(t *testing.T) (ownerDSN, appDSN, app string) {
	t.Helper()
	requirePostgres(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, baseDSN())
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	sfx := randHex(t)
	owner, app, db := "own_"+sfx, "app_"+sfx, "ledger_"+sfx
	for _, q := range []string{
		`CREATE ROLE ` + owner + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`,
		`CREATE ROLE ` + app + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`,
		`CREATE DATABASE ` + db + ` OWNER ` + owner,
		`REVOKE ALL ON DATABASE ` + db + ` FROM PUBLIC`,
		`GRANT CONNECT ON DATABASE ` + db + ` TO ` + app,
	} {
		_, err := admin.Exec(ctx, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for _, q := range []string{`DROP DATABASE IF EXISTS ` + db + ` WITH (FORCE)`, `DROP ROLE IF EXISTS ` + app, `DROP ROLE IF EXISTS ` + owner} {
			if _, err := admin.Exec(ctx, q); err != nil {
				t.Errorf("clean up: %s: %v", q, err)
			}
		}
	})
	dsn := func(user string) string {
		u, err := url.Parse(baseDSN())
		require.NoError(t, err, "the test DSN must be a postgres:// URL")
		u.User = url.User(user)
		u.Path = "/" + db
		return u.String()
	}
	return dsn(owner), dsn(app), app
}

func randHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// pgCode is the SQLSTATE of err, "" when it is not a PostgreSQL error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestRuntimeRoleByGrants: the owner migrates (`ledger migrate`) and grants;
// the runtime role opens the ledger without changing it, claims, completes,
// records decisions and purges; PostgreSQL refuses it UPDATE, DELETE and
// TRUNCATE of the audit rows by its grants (42501, before the trigger);
// before the migration it refuses to open, naming `ledger migrate`.
func TestRuntimeRoleByGrants(t *testing.T) {
	ownerDSN, appDSN, app := roleDB(t)
	ctx := context.Background()

	_, err := ledgerpg.Open(ctx, appDSN)
	require.ErrorIs(t, err, ledgerpg.ErrSchemaBehind, "the runtime role must not create the schema")
	require.ErrorContains(t, err, "starter ledger migrate")

	from, to, err := ledgerpg.Migrate(ctx, ownerDSN)
	require.NoError(t, err)
	require.Equal(t, 0, from)
	require.Positive(t, to)
	require.NoError(t, ledgerpg.GrantRuntime(ctx, ownerDSN, app))

	// Every table the migrations made has its runtime privileges.
	owner, err := pgx.Connect(ctx, ownerDSN)
	require.NoError(t, err)
	defer owner.Close(ctx)
	rows, err := owner.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	var listed []string
	for tb := range ledgerpg.RuntimePrivileges {
		listed = append(listed, tb)
	}
	slices.Sort(listed)
	require.Equal(t, tables, listed, "ledgerpg.RuntimePrivileges must list every ledger table")

	store, err := ledgerpg.Open(ctx, appDSN)
	require.NoError(t, err, "the runtime role opens a current ledger")
	defer store.Close()
	key := "sess-roles:1:1:apply_refund"
	c, err := store.Claim(ctx, ledger.ClaimRequest{Key: key, ActionType: "apply_refund", RequestHash: "h1", WorkflowID: "wf", Executor: "ex1", Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, ledger.Execute, c.Verdict)
	_, err = store.Complete(ctx, ledger.Completion{Key: key, Executor: "ex1", Status: ledger.Succeeded, ExternalID: "re_1"})
	require.NoError(t, err)
	id, err := store.RecordDecision(ctx, ledger.DecisionRecord{Key: key, WorkflowID: "wf", Kind: "approve", By: "alice", Verified: true, SentAt: time.Now(), AppliedAt: time.Now()})
	require.NoError(t, err)
	require.Positive(t, id)

	appConn, err := pgx.Connect(ctx, appDSN)
	require.NoError(t, err)
	defer appConn.Close(ctx)
	for _, q := range []string{
		`UPDATE decisions SET note = 'rewritten'`,
		`DELETE FROM decisions`,
		`TRUNCATE decisions`,
		`ALTER TABLE decisions DISABLE TRIGGER decisions_append_only`,
		`DROP TRIGGER decisions_append_only ON decisions`,
		`CREATE TABLE sneaky (x int)`,
	} {
		_, err := appConn.Exec(ctx, q)
		require.Error(t, err, q)
		require.Equal(t, "42501", pgCode(err), "%s: want a privilege refusal (42501), got %v", q, err)
	}
	// The owner is held by the trigger, not by grants.
	_, err = owner.Exec(ctx, `DELETE FROM decisions`)
	require.ErrorContains(t, err, "append-only")

	// Purge runs as the runtime role and leaves the audit trail alone.
	n, err := store.Purge(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ds, err := store.Decisions(ctx, key)
	require.NoError(t, err)
	require.Len(t, ds, 1)
}

// TestRuntimeRoleRefusesAnOldSchema: a ledger one migration behind is not
// migrated by the runtime role: Open refuses, naming the command, and the
// schema is left as it was; `ledger migrate` as the owner brings it current.
func TestRuntimeRoleRefusesAnOldSchema(t *testing.T) {
	ownerDSN, appDSN, app := roleDB(t)
	ctx := context.Background()
	ms, err := sqlstore.LoadMigrations(ledgerpg.Migrations, "migrations")
	require.NoError(t, err)
	db := rawDB(t, ownerDSN)
	defer db.Close()
	require.NoError(t, sqlstore.Migrate(ctx, db, ms[:len(ms)-1], nil))
	require.NoError(t, ledgerpg.GrantRuntime(ctx, ownerDSN, app))

	_, err = ledgerpg.Open(ctx, appDSN)
	require.ErrorIs(t, err, ledgerpg.ErrSchemaBehind)
	require.ErrorContains(t, err, "starter ledger migrate")
	require.ErrorContains(t, err, "pg_dump")
	var v int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT MAX(version) FROM ledger_migrations`).Scan(&v))
	require.Equal(t, ms[len(ms)-2].Version, v, "the runtime role changed the schema")

	from, to, err := ledgerpg.Migrate(ctx, ownerDSN)
	require.NoError(t, err)
	require.Equal(t, []int{ms[len(ms)-2].Version, ms[len(ms)-1].Version}, []int{from, to})
	require.NoError(t, ledgerpg.GrantRuntime(ctx, ownerDSN, app))
	store, err := ledgerpg.Open(ctx, appDSN)
	require.NoError(t, err)
	require.NoError(t, store.Close())
}

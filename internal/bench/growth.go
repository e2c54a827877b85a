package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerpg"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
)

// Growth is how the ledger's claims behave as the ledger grows: at each
// size (rows already in the operations table, seeded with one refund per
// order over the last 30 days, each holding its order's guard scope), Ops
// claims of each kind on fresh keys, one at a time.
type Growth struct {
	Driver string        `json:"driver"`
	Ops    int           `json:"ops"`
	Points []GrowthPoint `json:"points"`
	// RatioP50 is each kind's p50 at the largest size / at the smallest:
	// 1 is flat.
	RatioP50 map[string]float64 `json:"ratio_p50"`
}

// GrowthPoint is one size.
type GrowthPoint struct {
	Rows  int             `json:"rows"`
	Kinds map[string]Dist `json:"kinds"`
}

// The kinds of claims measured at each size.
const (
	// GrowthPlain is a claim without checks (the insert alone).
	GrowthPlain = "plain"
	// GrowthGuarded is a claim of a fresh guard scope with the
	// suspected-duplicate check on (transaction, guard lookup, duplicate
	// lookup, insert): the path of every refund.
	GrowthGuarded = "guarded"
	// GrowthClash is a guarded claim on a scope an old refund holds: the
	// lookup finds it and the call is refused.
	GrowthClash = "guard clash"
	// GrowthDuplicate is a claim whose entity and arguments equal an
	// earlier operation's: the duplicate lookup finds it and the row is
	// held for a person.
	GrowthDuplicate = "duplicate held"
)

// LedgerGrowth seeds a fresh SQLite ledger in a temporary directory (and,
// when postgresDSN is set, a schema of its own in that database, dropped
// afterwards) up to each of sizes in turn and measures ops claims of each
// kind at every size.
func LedgerGrowth(ctx context.Context, sizes []int, ops int, postgresDSN string) ([]Growth, error) {
	dir, err := os.MkdirTemp("", "agentsaga-bench-growth-")
	if err != nil {
		return nil, fmt.Errorf("bench: make a temporary directory for the ledger: %w", err)
	}
	defer os.RemoveAll(dir)
	sq, err := ledgersqlite.Open(ctx, filepath.Join(dir, "ledger.db"))
	if err != nil {
		return nil, fmt.Errorf("bench: open the SQLite ledger: %w", err)
	}
	defer sq.Close()
	g, err := growth(ctx, "sqlite", sq, sq.DB(), sqliteSeed, sizes, ops)
	if err != nil || postgresDSN == "" {
		return []Growth{g}, err
	}
	out := []Growth{g}
	pg, drop, err := growthSchema(ctx, postgresDSN)
	if err != nil {
		return out, err
	}
	defer drop()
	g, err = growth(ctx, "postgres", pg, pg.DB(), postgresSeed, sizes, ops)
	return append(out, g), err
}

// growthSchema opens the ledger in a new schema of the database dsn names
// (any DSN pgx accepts); drop closes it and drops the schema. Nothing is
// written outside that schema.
func growthSchema(ctx context.Context, dsn string) (*ledgerpg.Store, func(), error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: parse the PostgreSQL DSN: %w", err)
	}
	admin := stdlib.OpenDB(*cfg)
	schema := "agentsaga_bench_growth_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("bench: create schema %s: %w", schema, err)
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = admin.ExecContext(dctx, "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}
	pg, err := ledgerpg.Open(ctx, dsn, ledgerpg.WithSchema(schema))
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("bench: open the PostgreSQL ledger in schema %s: %w", schema, err)
	}
	return pg, func() { pg.Close(); drop() }, nil
}

// seedFunc inserts seeded operations from (inclusive) to (exclusive).
type seedFunc func(ctx context.Context, db *sql.DB, from, to int) error

// The seeded rows: a succeeded apply_refund per order ord-x, holding guard
// scope refund-per-order:ord-x, created within the last 30 days.
func sqliteSeed(ctx context.Context, db *sql.DB, from, to int) error {
	now := time.Now().UnixMicro()
	_, err := db.ExecContext(ctx, `
WITH RECURSIVE c(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM c WHERE x + 1 < ?)
INSERT INTO operations (operation_key, action_type, request_hash, status, attempt_count, external_id,
    guard_scope, guard_key, entity, args_hash, summary, created_at, updated_at, completed_at)
SELECT 'seed:' || x || ':1:1:apply_refund', 'apply_refund', 'h' || x, 'succeeded', 1, 're_' || x,
    'refund-per-order:ord-' || x, 'refund-per-order:ord-' || x, 'order:ord-' || x, 'seed' || x,
    'apply_refund order_id ord-' || x, ? - (x % 2592000) * 1000000, ? - (x % 2592000) * 1000000, ? - (x % 2592000) * 1000000
FROM c`, from, to, now, now, now)
	return err
}

func postgresSeed(ctx context.Context, db *sql.DB, from, to int) error {
	_, err := db.ExecContext(ctx, `
INSERT INTO operations (operation_key, action_type, request_hash, status, attempt_count, external_id,
    guard_scope, guard_key, entity, args_hash, summary, created_at, updated_at, completed_at)
SELECT 'seed:' || x || ':1:1:apply_refund', 'apply_refund', 'h' || x, 'succeeded', 1, 're_' || x,
    'refund-per-order:ord-' || x, 'refund-per-order:ord-' || x, 'order:ord-' || x, 'seed' || x,
    'apply_refund order_id ord-' || x, t, t, t
FROM generate_series($1::bigint, $2::bigint - 1) AS x, LATERAL (SELECT now() - (x % 2592000) * interval '1 second' AS t) AS ts`, from, to)
	if err == nil {
		_, err = db.ExecContext(ctx, "ANALYZE operations")
	}
	return err
}

func growth(ctx context.Context, driver string, store ledger.Store, db *sql.DB, seed seedFunc, sizes []int, ops int) (Growth, error) {
	g := Growth{Driver: driver, Ops: ops, RatioP50: map[string]float64{}}
	orders := 0 // seeded orders ord-0 .. ord-(orders-1)
	count := func() (int, error) {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM operations").Scan(&n); err != nil {
			return 0, fmt.Errorf("bench: count the %s ledger's rows: %w", driver, err)
		}
		return n, nil
	}
	for i, size := range sizes {
		rows, err := count()
		if err != nil {
			return g, err
		}
		if size > rows {
			if err := seed(ctx, db, orders, orders+size-rows); err != nil {
				return g, fmt.Errorf("bench: seed the %s ledger to %d rows: %w", driver, size, err)
			}
			orders += size - rows
			if rows, err = count(); err != nil {
				return g, err
			}
		}
		p, err := growthPoint(ctx, store, fmt.Sprintf("g%d", i), rows, orders, ops)
		if err != nil {
			return g, fmt.Errorf("bench: %s ledger at %d rows: %w", driver, rows, err)
		}
		g.Points = append(g.Points, p)
	}
	if len(g.Points) > 1 {
		first, last := g.Points[0], g.Points[len(g.Points)-1]
		for k, d := range last.Kinds {
			g.RatioP50[k] = ratio(d.P50Ms, first.Kinds[k].P50Ms)
		}
	}
	return g, nil
}

// growthPoint measures ops claims of each kind; seeded is how many orders
// the seed holds (guard clashes pick among them).
func growthPoint(ctx context.Context, store ledger.Store, tag string, rows, seeded, ops int) (GrowthPoint, error) {
	p := GrowthPoint{Rows: rows, Kinds: map[string]Dist{}}
	result := json.RawMessage(`{"refund_id":"re_1","amount_minor":12900}`)
	base := func(key string) ledger.ClaimRequest {
		return ledger.ClaimRequest{Key: key, ActionType: "apply_refund", RequestHash: "h:" + key,
			WorkflowID: "agent-plan:bench-growth:1", RunID: "run", RequestID: "req", Executor: "bench", Lease: time.Minute}
	}
	complete := func(key string) error {
		_, err := store.Complete(ctx, ledger.Completion{Key: key, Executor: "bench", Status: ledger.Succeeded, ExternalID: "re_1", Result: result})
		return err
	}
	// Duplicate targets: earlier refunds whose entity and arguments the
	// measured claims repeat (made through the store, so their argument
	// hashes are the store's own).
	for i := 0; i < ops; i++ {
		r := base(fmt.Sprintf("growth:%s:target:%d:1:apply_refund", tag, i))
		r.Entity, r.NormalizedArgs, r.DuplicateWindow = fmt.Sprintf("order:%s-dup-%d", tag, i), fmt.Sprintf(`{"amount_minor":%d}`, i), time.Hour
		if c, err := store.Claim(ctx, r); err != nil || c.Verdict != ledger.Execute {
			return p, fmt.Errorf("claim of duplicate target %s: verdict %q (want execute), error %v", r.Key, c.Verdict, err)
		}
		if err := complete(r.Key); err != nil {
			return p, err
		}
	}
	kinds := []struct {
		name string
		want ledger.Verdict
		req  func(i int) ledger.ClaimRequest
	}{
		{GrowthPlain, ledger.Execute, func(i int) ledger.ClaimRequest {
			return base(fmt.Sprintf("growth:%s:plain:%d:1:apply_refund", tag, i))
		}},
		{GrowthGuarded, ledger.Execute, func(i int) ledger.ClaimRequest {
			r := base(fmt.Sprintf("growth:%s:guarded:%d:1:apply_refund", tag, i))
			r.GuardScope = fmt.Sprintf("refund-per-order:%s-new-%d", tag, i)
			r.Entity, r.NormalizedArgs, r.DuplicateWindow = fmt.Sprintf("order:%s-new-%d", tag, i), `{"amount_minor":1}`, 24*time.Hour
			return r
		}},
		{GrowthClash, ledger.GuardRefused, func(i int) ledger.ClaimRequest {
			r := base(fmt.Sprintf("growth:%s:clash:%d:1:apply_refund", tag, i))
			// Spread over the seeded orders: old and new rows alike.
			r.GuardScope = fmt.Sprintf("refund-per-order:ord-%d", (i*7919)%max(seeded, 1))
			return r
		}},
		{GrowthDuplicate, ledger.Held, func(i int) ledger.ClaimRequest {
			r := base(fmt.Sprintf("growth:%s:dup:%d:1:apply_refund", tag, i))
			r.Entity, r.NormalizedArgs, r.DuplicateWindow = fmt.Sprintf("order:%s-dup-%d", tag, i), fmt.Sprintf(`{"amount_minor":%d}`, i), time.Hour
			return r
		}},
	}
	for _, k := range kinds {
		ds := make([]time.Duration, 0, ops)
		for i := 0; i < ops; i++ {
			r := k.req(i)
			t0 := time.Now()
			c, err := store.Claim(ctx, r)
			ds = append(ds, time.Since(t0))
			if err != nil || c.Verdict != k.want {
				// Anything else means the figure measures another path.
				return p, fmt.Errorf("%s claim %s: verdict %q (want %q), error %v", k.name, r.Key, c.Verdict, k.want, err)
			}
			if c.Verdict == ledger.Execute {
				if err := complete(r.Key); err != nil {
					return p, err
				}
			}
		}
		p.Kinds[k.name] = dist(ds)
	}
	return p, nil
}

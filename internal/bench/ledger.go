package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
)

// LedgerDist is the latency of the ledger's two writes per write step, on
// fresh keys, one at a time (the path BenchmarkClaimComplete in
// ledger/ledgersqlite and ledger/ledgerpg measures).
type LedgerDist struct {
	Driver   string `json:"driver"`
	Ops      int    `json:"ops"`
	Claim    Dist   `json:"claim"`
	Complete Dist   `json:"complete"`
}

// Ledgers measures claim+complete n times on a fresh SQLite ledger in a
// temporary directory and, when postgresDSN is set, on that database.
func Ledgers(ctx context.Context, n int, postgresDSN string) ([]LedgerDist, error) {
	dir, err := os.MkdirTemp("", "agentsaga-bench-ledger-")
	if err != nil {
		return nil, fmt.Errorf("bench: make a temporary directory for the ledger: %w", err)
	}
	defer os.RemoveAll(dir)
	var out []LedgerDist
	dsns := [][2]string{{"sqlite", "sqlite:" + filepath.Join(dir, "ledger.db")}}
	if postgresDSN != "" {
		dsns = append(dsns, [2]string{"postgres", postgresDSN})
	}
	for _, d := range dsns {
		l, err := measureLedger(ctx, d[0], d[1], n)
		if err != nil {
			return out, err
		}
		out = append(out, l)
	}
	return out, nil
}

func measureLedger(ctx context.Context, driver, dsn string, n int) (LedgerDist, error) {
	ld := LedgerDist{Driver: driver, Ops: n}
	store, err := ledgerdb.Open(ctx, dsn)
	if err != nil {
		return ld, fmt.Errorf("bench: open the %s ledger: %w", driver, err)
	}
	defer store.Close()
	prefix := "bench:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	claims := make([]time.Duration, 0, n)
	completes := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		req := benchClaim(prefix, i)
		t0 := time.Now()
		c, err := store.Claim(ctx, req)
		claims = append(claims, time.Since(t0))
		if err != nil || c.Verdict != ledger.Execute {
			// A fresh key must be executed: anything else means the
			// figure measures another path.
			return ld, fmt.Errorf("bench: claim of fresh key %s on %s: verdict %q (want execute), error %v", req.Key, driver, c.Verdict, err)
		}
		t0 = time.Now()
		if _, err := store.Complete(ctx, benchCompletion(req)); err != nil {
			return ld, fmt.Errorf("bench: complete %s on %s: %w", req.Key, driver, err)
		}
		completes = append(completes, time.Since(t0))
	}
	ld.Claim, ld.Complete = dist(claims), dist(completes)
	return ld, nil
}

// benchClaim is the claim of the bench's i-th fresh create_ticket key
// under prefix, as the ledger measurements make it.
func benchClaim(prefix string, i int) ledger.ClaimRequest {
	return ledger.ClaimRequest{
		Key: fmt.Sprintf("%s:%d:1:create_ticket", prefix, i), ActionType: "create_ticket", RequestHash: "h",
		WorkflowID: "agent-plan:bench:1", RunID: "run", RequestID: "req", Executor: "bench", Lease: time.Minute,
	}
}

// benchCompletion records req's call as a succeeded ticket.
func benchCompletion(req ledger.ClaimRequest) ledger.Completion {
	return ledger.Completion{Key: req.Key, Executor: req.Executor, Status: ledger.Succeeded, ExternalID: "tk_1",
		Result: json.RawMessage(`{"id":"tk_1","subject":"bench ticket 1"}`)}
}

package bench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/bench"
)

// testPostgresDSN is the database the tests use (PostgreSQL runs on every
// machine and in CI), written as key=value, the DSN form that is not a URL;
// AGENTSAGA_TEST_POSTGRES_DSN overrides it.
func testPostgresDSN() string {
	if dsn := os.Getenv("AGENTSAGA_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "host=127.0.0.1 port=5432 dbname=test sslmode=disable"
}

// LedgerGrowth seeds both drivers to each size and measures every kind of
// claim there, each on the path it names (a verdict other than the kind's
// fails the run); the PostgreSQL schema it made is gone afterwards.
func TestLedgerGrowthMeasuresEveryKindAtEverySize(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gs, err := bench.LedgerGrowth(ctx, []int{50, 400}, 5, testPostgresDSN())
	require.NoError(t, err)
	require.Len(t, gs, 2)
	for _, g := range gs {
		require.Len(t, g.Points, 2, g.Driver)
		require.Equal(t, 50, g.Points[0].Rows, "%s: the first size is seeded exactly", g.Driver)
		require.Equal(t, 400, g.Points[1].Rows, "%s: the second size tops up to exactly 400", g.Driver)
		for _, p := range g.Points {
			for _, k := range []string{bench.GrowthPlain, bench.GrowthGuarded, bench.GrowthClash, bench.GrowthDuplicate} {
				require.Equal(t, 5, p.Kinds[k].N, "%s %s at %d", g.Driver, k, p.Rows)
				require.Positive(t, p.Kinds[k].P50Ms, "%s %s at %d", g.Driver, k, p.Rows)
			}
		}
		require.Len(t, g.RatioP50, 4)
	}
}

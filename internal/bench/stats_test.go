package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDistIsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, Dist{N: 100, P50Ms: 50, P99Ms: 99, MaxMs: 100}, dist(ds))
	require.Equal(t, Dist{N: 1, P50Ms: 7, P99Ms: 7, MaxMs: 7}, dist([]time.Duration{7 * time.Millisecond}))
	require.Equal(t, Dist{}, dist(nil))
	require.Equal(t, 2.5, median([]float64{4, 1, 3, 2}))
	require.Zero(t, ratio(1, 0))
}

func TestTargetsJudgeTheWorstLevel(t *testing.T) {
	lv := func(conc int, tp, p50, p99, added, start float64) Level {
		return Level{Concurrency: conc, Ratio: Ratios{Throughput: tp, P50: p50, P99: p99, StartP50: start, StartP99: start}, AddedP99PerStepMs: added}
	}
	rep := Report{
		Shapes: []ShapeResult{{Name: "one write step", Steps: 1, Levels: []Level{
			lv(1, 0.5, 1.01, 1.02, 0.5, 1.1), // throughput at 1 is not a target
			lv(10, 0.96, 1.04, 1.20, 2.5, 1.1),
		}}},
		History: []History{
			{Shape: "one write step", Side: "agentsaga", EventsPerStep: 11},
			{Shape: "one write step", Side: "plain", EventsPerStep: 11},
		},
		Duplicates: &Duplicates{Starts: 1000, RunIDs: 1, Effects: 1, ProviderCalls: 1},
	}
	got := map[string]bool{}
	for _, tg := range targets(rep) {
		got[tg.Name] = tg.Met
	}
	require.Equal(t, map[string]bool{
		"latency ratio p50": true, "latency ratio p99": false, "p99 added per write step": false,
		"start call p50": true, "start call p99": true, "throughput ratio at 10 and 50": true,
		"history events per step": true, "duplicates at concurrent starts of one plan": true,
	}, got)
	rep.Duplicates.Effects = 2
	rep.History[0].EventsPerStep = 12
	for _, tg := range targets(rep) {
		if tg.Name == "duplicates at concurrent starts of one plan" || tg.Name == "history events per step" {
			require.False(t, tg.Met, tg.Name)
		}
	}
}

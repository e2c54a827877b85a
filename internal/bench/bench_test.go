package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/bench"
	"github.com/agentsaga/agentsaga/internal/devstack"
)

// TestRunProducesSaneNumbers runs the whole bench at a tiny size on a real
// embedded stack and checks that every figure is there and plausible: both
// sides finished every plan, latencies are positive with p50 <= p99,
// ratios are the sides' quotients, histories were read, the concurrent
// starts made exactly one email, and the ledger was measured. Nothing is
// asserted about speed.
func TestRunProducesSaneNumbers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{UIPort: -1})
	require.NoError(t, err)
	defer st.Close()

	rep, err := bench.Run(ctx, st, bench.Options{
		Rounds: 2, Concurrency: []int{1, 3}, PlansPerBatch: 4, Shapes: []int{1, 2},
		WaitingPlans: 5, DuplicateStarts: 20, LedgerOps: 20, PhasePlans: 4, CommitSplit: true,
	})
	require.NoError(t, err)

	require.Len(t, rep.Shapes, 2)
	for _, s := range rep.Shapes {
		require.Len(t, s.Levels, 2, s.Name)
		for _, l := range s.Levels {
			for name, sd := range map[string]bench.Side{"agentsaga": l.Agentsaga, "plain": l.Plain} {
				require.Equal(t, 8, sd.Plans, "%s %s at %d: two rounds of four plans, none failed", s.Name, name, l.Concurrency)
				require.Zero(t, sd.Errors)
				require.Positive(t, sd.PlansPerSec)
				require.Positive(t, sd.Latency.P50Ms)
				require.LessOrEqual(t, sd.Latency.P50Ms, sd.Latency.P99Ms)
				require.LessOrEqual(t, sd.Latency.P99Ms, sd.Latency.MaxMs)
				require.Positive(t, sd.Start.P50Ms)
				require.Less(t, sd.Start.P50Ms, sd.Latency.MaxMs, "a start is part of its plan's latency")
				require.Positive(t, sd.CPUMsPerPlan)
				require.Positive(t, sd.SysCPUMsPerPlan, "a plan makes system calls")
				require.Less(t, sd.SysCPUMsPerPlan, sd.CPUMsPerPlan)
				require.Positive(t, sd.SwitchesPerPlan, "a plan waits on the network")
				require.Greater(t, sd.AllocKBPerPlan, 10.0, "a plan allocates: gRPC messages, payloads, history events")
				require.Greater(t, sd.AllocsPerPlan, sd.AllocKBPerPlan, "objects average under a KB")
			}
			require.InDelta(t, l.Agentsaga.Latency.P50Ms/l.Plain.Latency.P50Ms, l.Ratio.P50, 0.001)
			require.InDelta(t, l.Agentsaga.PlansPerSec/l.Plain.PlansPerSec, l.Ratio.Throughput, 0.01)
			require.Len(t, l.RoundThroughputRatios, 2)
			nc := l.WithoutCommits
			require.NotNil(t, nc, "%s at %d: CommitSplit runs a third side", s.Name, l.Concurrency)
			require.Equal(t, 8, nc.Plans)
			require.Zero(t, nc.Errors)
			require.Positive(t, nc.CPUMsPerPlan)
			require.InDelta(t, (l.Agentsaga.CPUMsPerPlan-nc.CPUMsPerPlan)/float64(s.Steps), l.CommitsCPUMsPerStep, 0.01)
			require.InDelta(t, (nc.CPUMsPerPlan-l.Plain.CPUMsPerPlan)/float64(s.Steps), l.CPUMsPerStepAboveCommits, 0.01)
			require.InDelta(t, nc.PlansPerSec/l.Plain.PlansPerSec, l.ThroughputRatioWithoutCommits, 0.01)
		}
	}
	require.Len(t, rep.History, 4)
	for _, h := range rep.History {
		// A workflow with N activities has at least started, N x
		// (scheduled, started, completed) and completed.
		require.GreaterOrEqual(t, h.Events, 2+3*h.Steps, "%s %s", h.Shape, h.Side)
		require.Greater(t, h.Bytes, 100*h.Events/2)
		require.InDelta(t, float64(h.Events)/float64(h.Steps), h.EventsPerStep, 0.01)
		sum := 0
		for _, n := range h.BytesByEvent {
			sum += n
		}
		require.Equal(t, h.Bytes, sum, "%s %s: bytes by event type", h.Shape, h.Side)
		require.Positive(t, h.BytesByEvent["ActivityTaskScheduled"], "%s %s", h.Shape, h.Side)
	}
	require.Len(t, rep.Tasks, 2)
	for _, h := range rep.Tasks {
		// Both shapes, both concurrencies, two rounds of four plans.
		require.Equal(t, 2*2*2*4, h.Workflows, h.Side)
		require.GreaterOrEqual(t, h.WorkflowTasks, 2*h.Workflows, "%s: at least two workflow tasks per plan", h.Side)
	}
	require.NotNil(t, rep.Phases)
	require.Equal(t, 4, rep.Phases.Plans)
	for _, side := range [][]bench.PhaseTimes{rep.Phases.Agentsaga, rep.Phases.Plain} {
		require.Len(t, side, 6)
		for _, ph := range side[:5] { // the client's share may round to 0
			require.Positive(t, ph.P50Ms, ph.Phase)
		}
	}
	require.NotNil(t, rep.Memory)
	require.Equal(t, 5, rep.Memory.Plans)
	require.Zero(t, rep.Memory.AgentsagaStartErrors)
	require.NotNil(t, rep.Duplicates)
	require.Equal(t, bench.Duplicates{Starts: 20, RunIDs: 1, ProviderCalls: 1, Effects: 1, Sec: rep.Duplicates.Sec}, *rep.Duplicates)
	require.Len(t, rep.Ledger, 1)
	require.Equal(t, "sqlite", rep.Ledger[0].Driver)
	require.Positive(t, rep.Ledger[0].Claim.P50Ms)
	require.Positive(t, rep.Ledger[0].Complete.P50Ms)
	require.NotNil(t, rep.LedgerFloor, "the ledger floor is measured whenever levels ran")
	require.Positive(t, rep.LedgerFloor.CPUMsPerStep)
	require.Positive(t, rep.LedgerFloor.CPUMsPerStepAt10)
	require.Positive(t, rep.LedgerFloor.SysMsPerStep, "two fsynced commits per pair")
	require.Less(t, rep.LedgerFloor.SysMsPerStep, rep.LedgerFloor.CPUMsPerStep)
	require.Positive(t, rep.LedgerFloor.SwitchesPerStep, "a thread blocks in each fsync")
	for _, s := range rep.Shapes {
		for _, l := range s.Levels {
			want := (l.Agentsaga.CPUMsPerPlan-l.Plain.CPUMsPerPlan)/float64(s.Steps) - rep.LedgerFloor.CPUMsPerStep
			require.InDelta(t, want, l.CPUMsPerStepAboveFloor, 0.01, "%s at %d", s.Name, l.Concurrency)
		}
	}
	require.NotEmpty(t, rep.Targets)
	require.Equal(t, "1000", rep.ServerDynamicConfig["history.transferprocessormaxpollrps"])

	var out bytes.Buffer
	bench.PrintTable(&out, rep)
	require.Contains(t, out.String(), "one write step")
	require.Contains(t, out.String(), "targets (issue 10)")
	require.Contains(t, out.String(), "activity scheduled -> completed")
	require.Contains(t, out.String(), "ledger floor (claim+complete")
	require.Contains(t, out.String(), "the ledger's commits in the run")
	require.Contains(t, out.String(), "commits in the run (issue 22)")
	_, err = json.Marshal(rep)
	require.NoError(t, err)
}

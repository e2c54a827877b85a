package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/bench"
	"github.com/agentsaga/agentsaga/internal/devstack"
)

// TestAgentsagaAsksTheServerForNoMoreFixedWork counts, with the embedded
// server's own metrics, what one- and three-step plans ask of the server
// on each side, and holds agentsaga to plain's fixed work: the same
// frontend calls per workflow task and activity, the same writes of the
// workflow's state, one closed record. An extra workflow task, activity,
// round trip or state write per step shows here as a count, without the
// noise of a timed run.
func TestAgentsagaAsksTheServerForNoMoreFixedWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{UIPort: -1, ServerMetrics: true})
	require.NoError(t, err)
	defer st.Close()

	work, err := bench.MeasureServerWork(ctx, st, 3, []int{1, 3})
	require.NoError(t, err)
	require.Len(t, work, 2)
	for _, w := range work {
		t.Logf("%s: extra per plan %v", w.Shape, w.Extra)
		require.Equal(t, 3, w.Plans)
		for _, side := range []map[string]float64{w.Agentsaga, w.Plain} {
			// What any plan of this shape must cost, so that a count
			// that reads zero cannot pass for parity.
			require.Equal(t, 1.0, side["frontend StartWorkflowExecution"], w.Shape)
			require.Equal(t, float64(w.Steps), side["frontend RespondActivityTaskCompleted"], w.Shape)
			require.Equal(t, 1.0, side["visibility RecordWorkflowExecutionClosed"], w.Shape)
			require.GreaterOrEqual(t, side["history persistence UpdateWorkflowExecution"], float64(2*w.Steps), w.Shape)
			require.Positive(t, side[bench.PayloadBytes], w.Shape)
		}
		require.Empty(t, w.ExtraFixed(), "%s: agentsaga asks the server for more fixed work per plan than plain", w.Shape)
	}

	var rep bench.Report
	rep.AddServerWork(work)
	require.Len(t, rep.Targets, 1)
	require.True(t, rep.Targets[0].Met, rep.Targets[0].Got)
}

func TestServerWorkNeedsTheServersMetrics(t *testing.T) {
	_, err := bench.MeasureServerWork(context.Background(), &devstack.Stack{}, 1, []int{1})
	require.ErrorContains(t, err, "ServerMetrics")
}

func TestExtraFixedNamesTheWork(t *testing.T) {
	w := bench.ServerWork{Shape: "3 write steps", Extra: map[string]float64{
		"history persistence UpdateWorkflowExecution": 3,
		"activity payload bytes":                      2000, // not fixed work
	}}
	require.Equal(t, []string{"history persistence UpdateWorkflowExecution +3"}, w.ExtraFixed())
	var rep bench.Report
	rep.AddServerWork([]bench.ServerWork{w})
	require.False(t, rep.Targets[0].Met)
	require.True(t, strings.HasPrefix(rep.Targets[0].Got, "3 write steps: history persistence UpdateWorkflowExecution +3"), rep.Targets[0].Got)
}

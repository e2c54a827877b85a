package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/bench"
	"github.com/agentsaga/agentsaga/internal/devstack"
)

// historyBudget is what the history of a three-step agentsaga plan of the
// bench (create_ticket three times, encrypted by the stack's codec) may
// carry, in bytes by event type: the sizes measured at the commit that set
// them plus a margin for what varies between runs (timestamps and the
// provider's answer). What each is for:
var historyBudget = map[string]int{
	// The plan, its UI summary, its fingerprint memo and three search
	// attributes (plain: its input).
	"WorkflowExecutionStarted": 1280,
	// The tools' specs pinned for the plan's life (one SideEffect).
	"MarkerRecorded": 1700,
	// Three requests (key, args, fingerprint, summary, the pinned class,
	// timeout and match fields) and their UI summaries.
	"ActivityTaskScheduled": 3080,
	// Three sanitized provider results.
	"ActivityTaskCompleted": 1400,
	// The final state, for the UI's lists.
	"UpsertWorkflowSearchAttributes": 280,
	// The plan's status: every step's key, state, id and result.
	"WorkflowExecutionCompleted": 2000,
	// The tasks, as plain has them.
	"ActivityTaskStarted":   360,
	"WorkflowTaskScheduled": 360,
	"WorkflowTaskStarted":   480,
	"WorkflowTaskCompleted": 360,
}

// TestHistoryStaysInItsBudget holds what a plan carries to its budget,
// event type by event type. What agentsaga costs apart from the ledger's
// commits follows its bytes (BENCHMARKS.md, issue 22), and bytes can be
// counted where time on these machines cannot: a field added to every
// request, a larger pin or another event fails here, and the budget is
// raised only on purpose, saying in BENCHMARKS.md what the bytes buy.
func TestHistoryStaysInItsBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{UIPort: -1})
	require.NoError(t, err)
	defer st.Close()

	hs, err := bench.MeasureHistories(ctx, st, []int{3})
	require.NoError(t, err)
	require.Len(t, hs, 2)
	a, p := hs[0], hs[1]
	require.Equal(t, "agentsaga", a.Side)
	require.Equal(t, "plain", p.Side)
	t.Logf("agentsaga: %d events, %d B: %v", a.Events, a.Bytes, a.BytesByEvent)
	t.Logf("plain:     %d events, %d B: %v", p.Events, p.Bytes, p.BytesByEvent)
	sum := 0
	for typ, n := range a.BytesByEvent {
		sum += n
		budget, ok := historyBudget[typ]
		require.True(t, ok, "event type %s is not in the budget: say what it carries and why (BENCHMARKS.md), then add it", typ)
		require.LessOrEqual(t, n, budget, "%s carries %d B, over its budget of %d B", typ, n, budget)
	}
	require.Equal(t, a.Bytes, sum)
	// Plain's history is read the same way: a reader that counted nothing
	// cannot pass.
	require.Positive(t, p.BytesByEvent["ActivityTaskScheduled"])
	require.Greater(t, a.Bytes, p.Bytes)
}

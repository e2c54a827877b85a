package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// A lookup that only ever answers a lagging absent (not on the provider's
// word) settles nothing: the step is not called again as "not done" (nor
// given up after maxCalls, which would drop a refund that happened); when
// the window closes a person is asked.
func TestLaggingAbsentForTheWholeWindowAsksAPerson(t *testing.T) {
	h := newHarness(t)
	h.p.fail("refund", "commit_then_drop")
	for range 200 {
		h.p.fail("refund.lookup", "lookup_lag")
	}
	env := h.env()
	var seen workflows.Status
	env.RegisterDelayedCallback(func() {
		seen = status(t, env)
		h.p.mu.Lock()
		h.p.faults["refund.lookup"] = nil // the index caught up
		h.p.mu.Unlock()
		q := openQuestion(t, seen)
		update(env, workflows.UpdateResolve, "r", workflows.ResolveSignal{Step: 1, QuestionID: q.ID, Outcome: workflows.OutcomeRetry, By: "ops"})
	}, time.Hour)
	st := run(t, env, newPlan("pr1", step("refund", "o1", 100)))
	require.Equal(t, ledger.NeedsHuman, seen.Steps[0].State, "a lagging absent is not absent")
	require.Equal(t, workflows.QuestionOutcome, openQuestion(t, seen).Kind)
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, h.p.callsOf("refund"), 1, "never sent again on a lagging index")
	require.Equal(t, 1, h.p.count("refund"))
}

// gatedTool holds the first call of its tool inside the provider until
// released: the attempt that made it is a zombie (its activity has timed
// out as far as Temporal is concerned) that still commits.
type gatedTool struct {
	*fakeTool
	entered, release chan struct{}
	first            bool
}

func (g *gatedTool) Execute(ctx context.Context, c tool.Call) (tool.Result, error) {
	if !g.first {
		g.first = true
		close(g.entered)
		<-g.release
	}
	return g.fakeTool.Execute(ctx, c)
}

// An attempt that timed out while its call was still at the provider (a
// zombie) keeps its lease: the retry is another executor, sees the call in
// flight and never calls beside it. (Were the executor the same on every
// attempt, the retry would reconcile, find nothing yet and call again: two
// refunds once the zombie commits.)
func TestZombieAttemptNeverSharesTheRetrysLease(t *testing.T) {
	h := newHarness(t)
	var gated *gatedTool
	var ts []tool.Tool
	for _, tl := range tools(h.p) {
		if ft, ok := tl.(*fakeTool); ok && ft.spec.Name == "refund" {
			gated = &gatedTool{fakeTool: ft, entered: make(chan struct{}), release: make(chan struct{})}
			tl = gated
		}
		ts = append(ts, tl)
	}
	reg, err := tool.NewRegistry(ts...)
	require.NoError(t, err)
	h.reg = reg
	env := h.env()
	zombieDone := make(chan struct{})
	env.OnActivity(activities.ExecuteToolName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, req activities.Request) (activities.Output, error) {
			if req.Tool != "refund" {
				return h.acts.ExecuteTool(ctx, req)
			}
			switch activity.GetInfo(ctx).Attempt {
			case 1:
				go func() {
					defer close(zombieDone)
					_, _ = h.acts.ExecuteTool(context.WithoutCancel(ctx), req)
				}()
				<-gated.entered // the zombie holds the lease and is at the provider
				return activities.Output{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)
			default:
				out, err := h.acts.ExecuteTool(ctx, req)
				close(gated.release) // now the zombie commits
				<-zombieDone
				return out, err
			}
		})
	st := run(t, env, newPlan("pr2", step("refund", "o1", 100)))
	require.Equal(t, workflows.SagaSucceeded, st.State)
	require.Len(t, h.p.callsOf("refund"), 1, "the retry never called beside the zombie")
	require.Equal(t, 1, h.p.count("refund"))
	op, err := h.ledger.Get(context.Background(), "pr2:1:1:refund")
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status)
}

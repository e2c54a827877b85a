package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/workflows"
)

// eventCounts reads the history of a finished run and counts its events by
// type, and its markers by name.
func eventCounts(ctx context.Context, t *testing.T, c client.Client, id, runID string) (total int, byType map[enumspb.EventType]int, markers map[string]int) {
	t.Helper()
	byType, markers = map[enumspb.EventType]int{}, map[string]int{}
	it := c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		total++
		byType[e.GetEventType()]++
		if a := e.GetMarkerRecordedEventAttributes(); a != nil {
			markers[a.GetMarkerName()]++
		}
	}
	return total, byType, markers
}

// waitListed polls visibility until query finds exactly one workflow (the
// visibility record is written after the history, asynchronously).
func waitListed(ctx context.Context, t *testing.T, st *devstack.Stack, query string) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := st.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: st.Server.Namespace(), Query: query})
		if err == nil && len(resp.GetExecutions()) == 1 {
			return
		}
		select {
		case <-ctx.Done():
			require.FailNow(t, "not listed", "query %s: err %v", query, err)
		case <-tick.C:
		}
	}
}

// A one-write-step plan started by sagaclient writes the events of a plain
// one-activity workflow plus two: the pinned specs (SideEffect) and the
// final state for the list view. Its search attributes come with the start
// request and are upserted only when they change; no version marker is
// recorded for a plan whose steps cannot run together. A plan started by
// workflow name without them still shows its state.
func TestHistoryEventsOfAOneStepPlan(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, time.Minute)
	p := newPlan("it-events", step(t, "create_ticket", map[string]any{"subject": "history events", "order_id": "ord_1001"}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	final, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)

	total, byType, markers := eventCounts(ctx, t, st.Client, run.WorkflowID, run.RunID)
	require.Equal(t, 1, byType[enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES], "only the final state is upserted")
	require.Equal(t, map[string]int{"SideEffect": 1}, markers, "the pinned specs, and no version marker")
	require.Equal(t, 11+2, total, "a plain one-activity workflow has 11 events")
	waitListed(ctx, t, st, fmt.Sprintf("WorkflowId = '%s' AND %s = 'succeeded' AND %s = 'it-events' AND %s = false",
		run.WorkflowID, workflows.SearchAttrState, workflows.SearchAttrSession, workflows.SearchAttrNeedsHuman))

	// The same shape started by name, as the Temporal CLI would, without
	// search attributes: the workflow sets them itself.
	byName := newPlan("it-events-by-name", step(t, "create_ticket", map[string]any{"subject": "history events by name", "order_id": "ord_1001"}))
	wr, err := st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: byName.WorkflowID(), TaskQueue: workflows.TaskQueue}, workflows.WorkflowName, byName)
	require.NoError(t, err)
	var got workflows.Status
	require.NoError(t, wr.Get(ctx, &got))
	require.Equal(t, workflows.SagaSucceeded, got.State, "plan error: %s", got.Error)
	_, byType, _ = eventCounts(ctx, t, st.Client, wr.GetID(), wr.GetRunID())
	require.Equal(t, 2, byType[enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES], "running, then succeeded")
	waitListed(ctx, t, st, fmt.Sprintf("WorkflowId = '%s' AND %s = 'succeeded' AND %s = 'it-events-by-name'",
		wr.GetID(), workflows.SearchAttrState, workflows.SearchAttrSession))
}

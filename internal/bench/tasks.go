package bench

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/agentsaga/agentsaga/sagaclient"
)

// TaskHealth is what the histories of every plan of one side say about
// their workflow tasks: a timed-out task is one no worker answered in time
// (its start-to-close timeout, 10 s by default, or a sticky queue's
// schedule-to-start timeout, 5 s), a failed one a task the worker answered
// with an error; the server retries both, and both show as latency.
type TaskHealth struct {
	Side          string `json:"side"`
	Workflows     int    `json:"workflows"`
	WorkflowTasks int    `json:"workflow_tasks"`
	TimedOut      int    `json:"timed_out"`
	Failed        int    `json:"failed"`
}

// taskHealth reads the history of every plan of one side that the levels
// ran.
func (r *runner) taskHealth(ctx context.Context, agentsaga bool) (TaskHealth, error) {
	r.mu.Lock()
	runs := append([]sagaclient.Run(nil), r.all[agentsaga]...)
	r.mu.Unlock()
	h := TaskHealth{Side: "plain", Workflows: len(runs)}
	if agentsaga {
		h.Side = "agentsaga"
	}
	for _, run := range runs {
		it := r.st.Client.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return h, fmt.Errorf("bench: read the history of %s: %w", run.WorkflowID, err)
			}
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
				h.WorkflowTasks++
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
				h.TimedOut++
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				h.Failed++
			}
		}
	}
	return h, nil
}

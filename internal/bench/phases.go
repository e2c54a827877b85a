package bench

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/agentsaga/agentsaga/sagaclient"
)

// Phases is where one sequential one-write-step plan spends its time on
// each side, from the event times of finished histories (medians over
// Plans plans per side, run alternately). Client is the end-to-end time
// seen by the caller minus the workflow's own life (start call, result
// wait, decoding).
type Phases struct {
	Plans     int          `json:"plans"`
	Agentsaga []PhaseTimes `json:"agentsaga"`
	Plain     []PhaseTimes `json:"plain"`
}

// PhaseTimes is one phase's median on one side.
type PhaseTimes struct {
	Phase string  `json:"phase"`
	P50Ms float64 `json:"p50_ms"`
}

// phaseNames in order; a one-activity workflow's events mark them.
var phaseNames = []string{
	"started -> first workflow task picked up",
	"first workflow task (worker)",
	"activity scheduled -> completed",
	"activity completed -> second workflow task picked up",
	"second workflow task (worker) -> closed",
	"client (start call, result wait)",
}

// phases runs n one-step plans per side, alternately, and returns the
// medians of each phase.
func (r *runner) phases(ctx context.Context, n int) (Phases, error) {
	out := Phases{Plans: n}
	per := map[bool][][]time.Duration{true: make([][]time.Duration, len(phaseNames)), false: make([][]time.Duration, len(phaseNames))}
	for i := 0; i < n; i++ {
		for _, agentsaga := range []bool{i%2 == 0, i%2 != 0} {
			var total time.Duration
			var err error
			if agentsaga {
				_, total, err = r.onePlan(ctx, 1)
			} else {
				_, total, err = r.onePlain(ctx, 1)
			}
			if err != nil {
				return out, err
			}
			r.mu.Lock()
			run := r.last[fmt.Sprint(1, agentsaga)]
			r.mu.Unlock()
			ph, err := r.phaseTimes(ctx, run, total)
			if err != nil {
				return out, err
			}
			for k, d := range ph {
				per[agentsaga][k] = append(per[agentsaga][k], d)
			}
		}
	}
	for k, name := range phaseNames {
		out.Agentsaga = append(out.Agentsaga, PhaseTimes{Phase: name, P50Ms: dist(per[true][k]).P50Ms})
		out.Plain = append(out.Plain, PhaseTimes{Phase: name, P50Ms: dist(per[false][k]).P50Ms})
	}
	return out, nil
}

// phaseTimes splits one finished one-activity run at its events: started,
// first workflow task started and completed, activity scheduled and
// completed, second workflow task started, closed.
func (r *runner) phaseTimes(ctx context.Context, run sagaclient.Run, total time.Duration) ([]time.Duration, error) {
	var wftStarted, wftCompleted, actScheduled, actCompleted []time.Time
	var started, closed time.Time
	it := r.st.Client.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("bench: read the history of %s: %w", run.WorkflowID, err)
		}
		t := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			started = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			wftStarted = append(wftStarted, t)
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			wftCompleted = append(wftCompleted, t)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			actScheduled = append(actScheduled, t)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			actCompleted = append(actCompleted, t)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
			closed = t
		}
	}
	if len(wftStarted) != 2 || len(wftCompleted) != 2 || len(actScheduled) != 1 || len(actCompleted) != 1 || closed.IsZero() {
		return nil, fmt.Errorf("bench: %s is not a one-activity run with two workflow tasks (%d, %d, %d, %d)",
			run.WorkflowID, len(wftStarted), len(wftCompleted), len(actScheduled), len(actCompleted))
	}
	marks := []time.Time{started, wftStarted[0], wftCompleted[0], actScheduled[0], actCompleted[0], wftStarted[1], closed}
	out := []time.Duration{
		marks[1].Sub(marks[0]), marks[2].Sub(marks[1]), marks[4].Sub(marks[3]), marks[5].Sub(marks[4]), marks[6].Sub(marks[5]),
		total - closed.Sub(started),
	}
	return out, nil
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"google.golang.org/protobuf/proto"

	"github.com/agentsaga/agentsaga/internal/devstack"
)

// History is what one finished plan wrote to its history.
type History struct {
	Shape         string  `json:"shape"`
	Side          string  `json:"side"`
	Steps         int     `json:"steps"`
	Events        int     `json:"events"`
	Bytes         int     `json:"bytes"`
	EventsPerStep float64 `json:"events_per_step"`
	BytesPerStep  float64 `json:"bytes_per_step"`
	// BytesByEvent is Bytes by event type, named as the Temporal UI names
	// them ("ActivityTaskScheduled"). Every byte of a
	// history is carried at every hop (the SDK's encoding and the codec,
	// gRPC, the server's decoding, persistence and reads), so with the same
	// requests on both sides (ServerWork) they drive most of the extra
	// allocation of agentsaga's work apart from the ledger's commits
	// (BENCHMARKS.md, issue 22). They are counted, not timed: they move only when what a
	// plan carries does.
	BytesByEvent map[string]int `json:"bytes_by_event"`
}

// history reads the history of the last finished workflow of a side.
func (r *runner) history(ctx context.Context, steps int, agentsaga bool) (History, error) {
	r.mu.Lock()
	run, ok := r.last[fmt.Sprint(steps, agentsaga)]
	r.mu.Unlock()
	sideName := "plain"
	if agentsaga {
		sideName = "agentsaga"
	}
	h := History{Shape: shapeName(steps), Side: sideName, Steps: steps, BytesByEvent: map[string]int{}}
	if !ok {
		return h, fmt.Errorf("bench: no finished %s workflow of shape %q to read", sideName, h.Shape)
	}
	it := r.st.Client.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return h, fmt.Errorf("bench: read the history of %s: %w", run.WorkflowID, err)
		}
		n := proto.Size(e)
		h.Events++
		h.Bytes += n
		h.BytesByEvent[e.GetEventType().String()] += n
	}
	h.EventsPerStep = round(float64(h.Events)/float64(steps), 2)
	h.BytesPerStep = round(float64(h.Bytes)/float64(steps), 1)
	return h, nil
}

// MeasureHistories runs one plan of each of shapes (numbers of write steps;
// none means the default of Options.Shapes) on each side, one at a time, and
// returns their histories, agentsaga's then plain's for each shape. st must
// have a worker.
func MeasureHistories(ctx context.Context, st *devstack.Stack, shapes []int) ([]History, error) {
	r, shapes, stop, err := afterRunner(st, "history", shapes)
	if err != nil {
		return nil, err
	}
	defer stop()
	var out []History
	for _, steps := range shapes {
		for _, agentsaga := range []bool{true, false} {
			if _, _, err := r.oneOf(agentsaga)(ctx, steps); err != nil {
				return nil, err
			}
			h, err := r.history(ctx, steps, agentsaga)
			if err != nil {
				return nil, err
			}
			out = append(out, h)
		}
	}
	return out, nil
}

// afterRunner starts the plain side's worker on st (which must have a worker
// of its own) and returns a runner for plans run one at a time outside the
// timed batches, tagged prefix, with shapes defaulted to Options.Shapes;
// stop stops the plain worker.
func afterRunner(st *devstack.Stack, prefix string, shapes []int) (r *runner, _ []int, stop func(), err error) {
	if st.Worker == nil {
		return nil, nil, nil, errors.New("bench: the stack has no worker; start it without NoWorker")
	}
	pw, err := startPlainWorker(st.Client, st.SandboxURL)
	if err != nil {
		return nil, nil, nil, err
	}
	o := Options{}
	o.defaults()
	if len(shapes) == 0 {
		shapes = o.Shapes
	}
	return &runner{st: st, o: o, tag: prefix + strconv.FormatInt(time.Now().UnixNano(), 36)}, shapes, pw.Stop, nil
}

// oneOf is the runner's one-plan function of a side: onePlan or onePlain.
func (r *runner) oneOf(agentsaga bool) func(context.Context, int) (time.Duration, time.Duration, error) {
	if agentsaga {
		return r.onePlan
	}
	return r.onePlain
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/agentsaga/agentsaga/internal/devstack"
)

// ServerWork is what the server did per plan of one shape, on each side,
// counted by the embedded server's own metrics (devstack.Options
// ServerMetrics): the requests clients and workers made of its frontend,
// the persistence and visibility requests they caused, and the bytes of the
// activities' payloads. Unlike CPU time these counts do not move with the
// machine's noise, so one run shows whether agentsaga asks more of the
// server than plain does, and for what.
//
// Plans run one at a time, a side's after the other's, and the counters are
// read once the server has recorded the last plan's close in visibility.
// Counts of fixed work are whole numbers (FixedWork); those that depend on
// timing (polls, a task written to the backlog because no poller waited at
// that moment) may be fractions and differ between runs.
type ServerWork struct {
	Shape string `json:"shape"`
	Steps int    `json:"steps"`
	// Plans is how many plans each side ran.
	Plans     int                `json:"plans"`
	Agentsaga map[string]float64 `json:"agentsaga"`
	Plain     map[string]float64 `json:"plain"`
	// Extra is agentsaga − plain for every count that differs by at least
	// a hundredth of a request per plan.
	Extra map[string]float64 `json:"extra"`
}

// FixedWork are the counts of ServerWork that a plan of a shape makes the
// same number of times on every run: requests per workflow task and per
// activity, the writes of the workflow's state and its closed record.
// ExtraFixed compares these. The started and upserted visibility records
// are not among them: the server's visibility queue skips those of a run
// that has closed by the time it gets to them, so their count depends on
// how far it lags.
var FixedWork = []string{
	"frontend StartWorkflowExecution",
	"frontend RespondWorkflowTaskCompleted",
	"frontend RespondActivityTaskCompleted",
	"history persistence CreateWorkflowExecution",
	"history persistence UpdateWorkflowExecution",
	closedKey,
}

// ExtraFixed is Extra restricted to FixedWork, as "name +n" strings sorted
// by name; empty when agentsaga asks the server for no more fixed work than
// plain does.
func (w ServerWork) ExtraFixed() []string {
	var out []string
	for _, k := range FixedWork {
		if d, ok := w.Extra[k]; ok {
			out = append(out, fmt.Sprintf("%s %+g", k, d))
		}
	}
	return out
}

// AddServerWork records w in rep, with the target that agentsaga asks the
// server for no more fixed work per plan than plain does (issue 22). The
// bench measures it on a stack of its own after Run, since recording the
// server's metrics costs CPU the timed batches must not pay.
func (rep *Report) AddServerWork(w []ServerWork) {
	rep.ServerWork = w
	if len(w) == 0 {
		return
	}
	var extra []string
	for _, s := range w {
		for _, e := range s.ExtraFixed() {
			extra = append(extra, s.Shape+": "+e)
		}
	}
	got := "equal in every shape"
	if len(extra) > 0 {
		got = strings.Join(extra, "; ")
	}
	rep.Targets = append(rep.Targets, Target{Name: "fixed server work per plan (issue 22)", Want: "agentsaga = plain", Got: got, Met: len(extra) == 0})
}

// PayloadBytes is the ServerWork key of the activities' payload bytes (the
// input when an activity starts, the result when it completes).
const PayloadBytes = "activity payload bytes"

// backgroundPersistence are the server's persistence requests that its own
// queues, caches and membership make on timers rather than for a plan:
// left out of ServerWork, where they would be charged to whichever side
// happened to run.
var backgroundPersistence = map[string]bool{
	"GetTransferTasks": true, "GetTimerTasks": true, "GetVisibilityTasks": true, "GetReplicationTasks": true,
	"GetHistoryTasks": true, "RangeCompleteHistoryTasks": true, "RangeCompleteTimerTasks": true,
	"RangeCompleteTransferTasks": true, "RangeCompleteVisibilityTasks": true, "CompleteHistoryTask": true,
	"UpdateShard": true, "GetOrCreateShard": true, "AssertShardOwnership": true,
	"ListNamespaces": true, "GetNamespace": true, "GetMetadata": true,
	"GetClusterMetadata": true, "ListClusterMetadata": true, "GetClusterMembers": true,
	"UpsertClusterMembership": true, "PruneClusterMembership": true,
	"GetTaskQueue": true, "UpdateTaskQueue": true, "CreateTaskQueue": true, "ListTaskQueue": true,
	"CompleteTasksLessThan": true, "GetTaskQueueUserData": true, "ListTaskQueueUserDataEntries": true,
	"ListNexusEndpoints": true, "GetNexusEndpoint": true,
}

// serverWorkSettle bounds the wait for the server's visibility writes of
// the last plan of a side.
const serverWorkSettle = 30 * time.Second

// MeasureServerWork runs plans plans of each of shapes (numbers of write
// steps; none means the default of Options.Shapes) on each side, one at a
// time, and counts the server's work per plan (see ServerWork). st must
// embed a server that serves its metrics (devstack.Options ServerMetrics)
// and have a worker. Each side first runs
// two plans uncounted, so first-use work (task queues, caches) is left out.
func MeasureServerWork(ctx context.Context, st *devstack.Stack, plans int, shapes []int) ([]ServerWork, error) {
	if st.Server == nil || st.Server.MetricsURL() == "" {
		return nil, errors.New("bench: server work needs an embedded server serving its metrics; start the stack with ServerMetrics")
	}
	if plans < 1 {
		return nil, fmt.Errorf("bench: server work needs at least one plan per side, got %d", plans)
	}
	r, shapes, stop, err := afterRunner(st, "work", shapes)
	if err != nil {
		return nil, err
	}
	defer stop()
	url := st.Server.MetricsURL()
	var out []ServerWork
	for _, steps := range shapes {
		w := ServerWork{Shape: shapeName(steps), Steps: steps, Plans: plans, Extra: map[string]float64{}}
		for _, agentsaga := range []bool{false, true} {
			per, err := r.serverWork(ctx, url, steps, plans, agentsaga)
			if err != nil {
				return nil, err
			}
			if agentsaga {
				w.Agentsaga = per
			} else {
				w.Plain = per
			}
		}
		for k := range keysOf(w.Agentsaga, w.Plain) {
			if d := round(w.Agentsaga[k]-w.Plain[k], 2); d != 0 {
				w.Extra[k] = d
			}
		}
		out = append(out, w)
	}
	return out, nil
}

func keysOf(ms ...map[string]float64) map[string]bool {
	keys := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			keys[k] = true
		}
	}
	return keys
}

// serverWork runs one side's plans and returns the counts per plan.
func (r *runner) serverWork(ctx context.Context, url string, steps, plans int, agentsaga bool) (map[string]float64, error) {
	one := r.oneOf(agentsaga)
	for range 2 { // warm-up, uncounted
		if _, _, err := one(ctx, steps); err != nil {
			return nil, err
		}
	}
	// The warm-up's visibility writes must be done before the first read.
	before, err := settledCounts(ctx, url, nil, 0)
	if err != nil {
		return nil, err
	}
	for range plans {
		if _, _, err := one(ctx, steps); err != nil {
			return nil, err
		}
	}
	after, err := settledCounts(ctx, url, before, plans)
	if err != nil {
		return nil, err
	}
	per := map[string]float64{}
	for k, v := range after {
		if d := round((v-before[k])/float64(plans), 2); d != 0 {
			per[k] = d
		}
	}
	return per, nil
}

const closedKey = "visibility RecordWorkflowExecutionClosed"

// settledCounts reads the server's counters once the visibility queue has
// recorded at least closes more closed runs than base holds and two reads in
// a row agree on the visibility counts (with base nil and closes 0: just two
// reads that agree).
func settledCounts(ctx context.Context, url string, base map[string]float64, closes int) (map[string]float64, error) {
	deadline := time.Now().Add(serverWorkSettle)
	var last map[string]float64
	for {
		cur, err := readCounts(ctx, url)
		if err != nil {
			return nil, err
		}
		if cur[closedKey]-base[closedKey] >= float64(closes) && last != nil && sameVisibility(last, cur) {
			return cur, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: the server recorded %g of %d plans' closes in visibility within %s; is its visibility queue stuck?",
				cur[closedKey]-base[closedKey], closes, serverWorkSettle)
		}
		last = cur
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(settlePoll):
		}
	}
}

func sameVisibility(a, b map[string]float64) bool {
	for k := range keysOf(a, b) {
		if strings.HasPrefix(k, "visibility ") && a[k] != b[k] {
			return false
		}
	}
	return true
}

// maxMetricsBytes bounds one read of the server's metrics page (it is
// about 1-2 MB after a bench).
const maxMetricsBytes = 64 << 20

// readCounts reads the server's metrics page and sums the counters
// ServerWork reports, by key.
func readCounts(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("bench: read the server's metrics: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: read the server's metrics at %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: the server's metrics at %s answered %s", url, resp.Status)
	}
	return parseCounts(io.LimitReader(resp.Body, maxMetricsBytes))
}

// parseCounts sums the counters of a Prometheus text page into ServerWork
// keys.
func parseCounts(r io.Reader) (map[string]float64, error) {
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("bench: parse the server's metrics: %w", err)
	}
	out := map[string]float64{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			if k := workKey(name, labels(m)); k != "" {
				out[k] += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// workKey is the ServerWork key of one counter series, "" for series it
// does not report.
func workKey(family string, l map[string]string) string {
	op, svc := l["operation"], l["service_name"]
	switch family {
	case "service_requests", "service_requests_total":
		if svc == "frontend" {
			return "frontend " + op
		}
	case "persistence_requests", "persistence_requests_total":
		if (svc == "history" || svc == "matching") && !backgroundPersistence[op] {
			return svc + " persistence " + op
		}
	case "visibility_persistence_requests", "visibility_persistence_requests_total":
		return "visibility " + op
	case "activity_payload_size", "activity_payload_size_total":
		return PayloadBytes
	}
	return ""
}

package workflows_test

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/workflows"
)

// BenchmarkWorkflowTasksOfARefund replays the recorded history of one
// refund plan (v6 seed-refund: the check, the claim, the call, the record)
// through AgentPlan: every workflow task of the plan, run by the SDK as a
// worker runs them, without the server or the activities. Its time and
// allocations per replay show in `go test -run '^$' -bench
// WorkflowTasksOfARefund -benchmem ./workflows/` (issue 22: the workflow
// task of a step); the history's JSON decoding and the replayer's setup are included and the same on
// every run.
func BenchmarkWorkflowTasksOfARefund(b *testing.B) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "v6-agent-plan_it-seed-refund_*.json"))
	if err != nil || len(files) != 1 {
		b.Fatalf("want one recorded v6 seed-refund history, found %v (%v)", files, err)
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		b.Fatal(err)
	}
	reg, err := demotools.Registry(demotools.SandboxConfig("http://127.0.0.1:9"))
	if err != nil {
		b.Fatal(err)
	}
	saga := &workflows.Saga{Specs: reg.Specs()}
	logger := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	b.ReportAllocs()
	for b.Loop() {
		// The replayer consumes the history it is given: decode it afresh.
		h, err := client.HistoryFromJSON(bytes.NewReader(raw), client.HistoryJSONOptions{})
		if err != nil {
			b.Fatal(err)
		}
		r := worker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(saga.AgentPlan, workflow.RegisterOptions{Name: workflows.WorkflowName})
		if err := r.ReplayWorkflowHistory(logger, h); err != nil {
			b.Fatal(err)
		}
	}
}

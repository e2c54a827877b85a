package workflows_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// upgraded returns specs as a later release might ship them: a higher
// approval threshold and a newly required argument. Plans recorded before
// must replay unchanged, because each plan pinned the specs it started with.
func upgraded(specs tool.Specs) tool.Specs {
	out := tool.Specs{}
	for name, s := range specs {
		if s.Approval != nil {
			a := *s.Approval
			a.AboveMinor *= 10
			s.Approval = &a
		}
		fields := make([]tool.Field, len(s.Args.Fields))
		copy(fields, s.Args.Fields)
		for i := range fields {
			fields[i].Required = true
		}
		s.Args.Fields = fields
		out[name] = s
	}
	return out
}

// TestReplayRecordedHistories replays every recorded AgentPlan history (the
// integration scenarios, recorded with AGENTSAGA_RECORD_HISTORIES, see
// integration/histories_test.go) with the current workflow code, under the
// current demo tool specs and under upgraded ones. A change that would break
// a plan in flight fails here (TMPRL1100): guard it with workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories under testdata/histories: record them (see integration/histories_test.go)")
	reg, err := demotools.Registry(demotools.SandboxConfig("http://127.0.0.1:9"))
	require.NoError(t, err)
	logger := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	ring, _, _ := keyring(t)
	for name, saga := range map[string]*workflows.Saga{
		"current specs":  {Specs: reg.Specs()},
		"upgraded specs": {Specs: upgraded(reg.Specs())},
		// Histories recorded since identities are recorded whole replay the
		// same when an operators file is added later.
		"operators file added": {Specs: reg.Specs(), Operators: ring},
	} {
		t.Run(name, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			// The workers' own registration, pinned (sagaworker.RegisterWorkflows):
			// a versioning behaviour changes no command.
			sagaworker.RegisterWorkflows(r, saga)
			n := 0
			for _, f := range files {
				if saga.Operators != nil && !strings.HasPrefix(filepath.Base(f), "v") {
					continue // v1 (no prefix): recorded before the identity verdict was recorded whole
				}
				n++
				require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(logger, f), "replay %s", filepath.Base(f))
			}
			require.NotZero(t, n)
		})
	}
}

// A worker from before start attributes upserted on every change, whatever
// the start request carried: a client upgraded before its workers (or a
// plan started by hand with the attributes) left such histories. The
// choice is pinned by the worker, not read from the start, so they replay:
// every pre-v4 history is replayed again with the three start attributes
// in its started event (added, or there already in a session run continued
// as new).
func TestReplayOldWorkerHistoriesStartedWithAttributes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	reg, err := demotools.Registry(demotools.SandboxConfig("http://127.0.0.1:9"))
	require.NoError(t, err)
	saga := &workflows.Saga{Specs: reg.Specs()}
	r := worker.NewWorkflowReplayer()
	sagaworker.RegisterWorkflows(r, saga)
	logger := log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	attr := func(v any, typ string) *commonpb.Payload {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		p.Metadata["type"] = []byte(typ)
		return p
	}
	n := 0
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "v4-") {
			continue
		}
		h, err := client.HistoryFromJSON(openFile(t, f), client.HistoryJSONOptions{})
		require.NoError(t, err, f)
		started := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes()
		require.NotNil(t, started, f)
		if len(started.GetSearchAttributes().GetIndexedFields()) == 0 {
			// The run's own session, as sagaclient would set it (a
			// different value would be a change, upserted either way).
			var in struct {
				SessionID string `json:"session_id"`
			}
			require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(started.GetInput(), &in), f)
			require.NotEmpty(t, in.SessionID, f)
			session := in.SessionID
			started.SearchAttributes = &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
				workflows.SearchAttrSession:    attr(session, "Keyword"),
				workflows.SearchAttrState:      attr(string(workflows.SagaRunning), "Keyword"),
				workflows.SearchAttrNeedsHuman: attr(false, "Bool"),
			}}
		} // else a session run continued as new: the attributes came along
		require.Contains(t, started.GetSearchAttributes().GetIndexedFields(), workflows.SearchAttrState, f)
		n++
		require.NoError(t, r.ReplayWorkflowHistory(logger, h), "replay %s with start attributes", filepath.Base(f))
	}
	require.NotZero(t, n)
}

func openFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

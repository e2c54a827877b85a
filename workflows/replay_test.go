package workflows_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/demotools"
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
			r.RegisterWorkflowWithOptions(saga.AgentPlan, workflow.RegisterOptions{Name: workflows.WorkflowName})
			r.RegisterWorkflowWithOptions(saga.AgentSession, workflow.RegisterOptions{Name: workflows.SessionWorkflowName})
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

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/proxy"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/workflows"
)

// envRecordHistories names a directory: when set, TestMain writes the history
// of every finished AgentPlan of the shared stack there, for the replay test
// of package workflows (workflows/testdata/histories). Record them with
//
//	AGENTSAGA_RECORD_HISTORIES=$PWD/workflows/testdata/histories go test ./integration/
const envRecordHistories = "AGENTSAGA_RECORD_HISTORIES"

// recordHistories writes the finished AgentPlan histories of c to dir, one
// JSON file per workflow (the format of `temporal workflow show --output
// json`), and returns how many it wrote.
func recordHistories(ctx context.Context, c client.Client, namespace, dir string, ring *codec.Keyring) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("make %s: %w", dir, err)
	}
	var token []byte
	n := 0
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, NextPageToken: token,
			Query: fmt.Sprintf("WorkflowType IN ('%s', '%s') AND ExecutionStatus != 'Running'", workflows.WorkflowName, workflows.SessionWorkflowName),
		})
		if err != nil {
			return n, fmt.Errorf("list workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				continue // a test's cleanup, not a scenario
			}
			id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			h := &historypb.History{}
			it := c.GetWorkflowHistory(ctx, id, run, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					return n, fmt.Errorf("history of %s: %w", id, err)
				}
				h.Events = append(h.Events, ev)
			}
			// The stack's key is per run: store the histories decrypted,
			// so the replay test needs no key.
			if ring != nil {
				dec := codec.New(ring)
				err := proxy.VisitPayloads(ctx, h, proxy.VisitPayloadsOptions{
					Visitor: func(_ *proxy.VisitPayloadsContext, p []*commonpb.Payload) ([]*commonpb.Payload, error) {
						return dec.Decode(p)
					},
				})
				if err != nil {
					// Sealed with a key of its own (the TypeScript planner's
					// codec test): not a scenario to replay.
					fmt.Fprintf(os.Stderr, "integration: history of %s not recorded: %v\n", id, err)
					continue
				}
			}
			b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(h)
			if err != nil {
				return n, fmt.Errorf("encode history of %s: %w", id, err)
			}
			name := strings.NewReplacer(":", "_", "/", "_").Replace(id) + "_" + run[len(run)-8:] + ".json"
			if err := os.WriteFile(filepath.Join(dir, name), append(b, '\n'), 0o644); err != nil {
				return n, fmt.Errorf("write history of %s: %w", id, err)
			}
			n++
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return n, nil
		}
	}
}

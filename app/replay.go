package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/workflows"
)

// MaxReplay is the most open workflows one `worker replay` replays; a
// namespace with more is checked a version at a time (--version).
const MaxReplay = 10000

// ReplayFailedError is returned by Replay when a history did not replay with
// this binary's workflow code: moving those workflows to this build would
// block them.
type ReplayFailedError struct {
	Failed, Total int
}

func (e ReplayFailedError) Error() string {
	return fmt.Sprintf("%d of %d open workflows do not replay with this build: do not move them to it (fix the change with workflow.GetVersion, or let them finish on their build)", e.Failed, e.Total)
}

// Replay runs `worker replay`: it replays the history of every open
// AgentPlan and AgentSession on the task queue (or only those pinned to
// --version DEPLOYMENT:BUILD) with this binary's workflow code, the SDK's
// WorkflowReplayer, and prints one line per workflow. It returns a
// ReplayFailedError when any history fails to replay, nil when all do: the
// proof a team runs with a new build before it moves pinned plans to it.
func Replay(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("worker replay", flag.ContinueOnError)
	var t config.Temporal
	t.Register(fs)
	onVersion := fs.String("version", "", "replay only the workflows pinned to this worker deployment version, DEPLOYMENT:BUILD (as `temporal worker deployment describe-version` names it); default every open plan and session on the task queue")
	operatorsFile := fs.String("operators", os.Getenv(config.EnvOperators), "the operators file the worker runs with (env "+config.EnvOperators+")")
	limit := fs.Int("max", MaxReplay, fmt.Sprintf("replay at most this many workflows, 1 to %d; more is an error", MaxReplay))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return UsageError{err}
	}
	if fs.NArg() > 0 {
		return UsageError{fmt.Errorf("worker replay takes no arguments, got %q", fs.Args())}
	}
	if *limit < 1 || *limit > MaxReplay {
		return UsageError{fmt.Errorf("--max %d: give 1 to %d", *limit, MaxReplay)}
	}
	if strings.ContainsAny(t.TaskQueue, `"'\`) {
		return UsageError{fmt.Errorf("--task-queue %q holds a quote or backslash", t.TaskQueue)}
	}
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running' AND WorkflowType IN ('%s', '%s')",
		t.TaskQueue, workflows.WorkflowName, workflows.SessionWorkflowName)
	if *onVersion != "" {
		name, build, ok := strings.Cut(*onVersion, ":")
		if !ok || sagaworker.CheckDeployment(worker.WorkerDeploymentVersion{DeploymentName: name, BuildID: build}) != nil || strings.ContainsAny(*onVersion, `"'\`) {
			return UsageError{fmt.Errorf("--version %q is not DEPLOYMENT:BUILD (a deployment name without '.' or ':', a build ID without quotes, each at most %d bytes)", redact.String(*onVersion), sagaworker.MaxDeploymentIDBytes)}
		}
		query += fmt.Sprintf(" AND TemporalWorkerDeploymentVersion = '%s'", *onVersion)
	}
	var saga workflows.Saga
	if *operatorsFile != "" {
		ring, err := operators.Load(*operatorsFile)
		if err != nil {
			return UsageError{fmt.Errorf("--operators: %w", err)}
		}
		saga.Operators = ring
	}
	opts, err := t.ClientOptions()
	if err != nil {
		return UsageError{err}
	}
	ring, _, err := t.Keyring()
	if err != nil {
		return UsageError{fmt.Errorf("--codec-keys: %w", err)}
	}
	// Read histories as the worker does; plaintext is accepted since
	// replaying decodes what is recorded and decides nothing.
	codec.WorkerClientOptions(&opts, ring, true)
	log := slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	opts.Logger = sdklog.NewStructuredLogger(log)
	c, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w (set --address or %s)", t.Address, err, config.EnvAddress)
	}
	defer c.Close()

	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: opts.DataConverter, FailureConverter: opts.FailureConverter})
	if err != nil {
		return fmt.Errorf("make the replayer: %w", err)
	}
	sagaworker.RegisterWorkflows(r, &saga)
	quiet := sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	total, failed := 0, 0
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: t.Namespace, Query: query, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("list the open workflows (%s): %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			total++
			if total > *limit {
				return fmt.Errorf("more than --max %d open workflows: replay them a version at a time (--version) or raise --max", *limit)
			}
			ex := e.GetExecution()
			// The SDK logs a failed replay's panic with its stack; the
			// line below says what failed.
			err := r.ReplayWorkflowExecution(ctx, c.WorkflowService(), quiet, t.Namespace,
				workflow.Execution{ID: ex.GetWorkflowId(), RunID: ex.GetRunId()})
			on := versionOf(ctx, c, ex.GetWorkflowId(), ex.GetRunId())
			if err != nil {
				failed++
				fmt.Fprintf(out, "FAIL %s (run %s, on %s): %v\n", ex.GetWorkflowId(), ex.GetRunId(), on, err)
				continue
			}
			fmt.Fprintf(out, "ok   %s (run %s, on %s)\n", ex.GetWorkflowId(), ex.GetRunId(), on)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	fmt.Fprintf(out, "replayed %d open workflows with this build: %d failed\n", total, failed)
	if failed > 0 {
		return ReplayFailedError{Failed: failed, Total: total}
	}
	return nil
}

// versionOf names the worker deployment version workflow id's run is on,
// as Temporal's versioning info says (the list answer does not carry it).
func versionOf(ctx context.Context, c client.Client, id, runID string) string {
	d, err := c.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return "unknown version: " + err.Error()
	}
	v := d.GetWorkflowExecutionInfo().GetVersioningInfo().GetDeploymentVersion()
	if v == nil {
		return "unversioned"
	}
	return v.GetDeploymentName() + ":" + v.GetBuildId()
}

package sagaclient

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// starts is a Temporal client for Start and WaitRun: ExecuteWorkflow makes
// a run unless held is set, in which case it fails as the server does for
// an ID in use; DescribeWorkflowExecution answers held's memo.
type starts struct {
	client.Client
	held      *string // fingerprint memo of the run holding the ID
	heldRun   string
	executes  []client.StartWorkflowOptions
	describes []string // run IDs asked for
	gets      []string // run IDs waited for
}

func (s *starts) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	s.executes = append(s.executes, o)
	if s.held != nil {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", s.heldRun)
	}
	return run{id: o.ID, runID: "run-new"}, nil
}

func (s *starts) DescribeWorkflowExecution(_ context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	s.describes = append(s.describes, runID)
	p, err := converter.GetDefaultDataConverter().ToPayload(*s.held)
	if err != nil {
		return nil, err
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{workflows.MemoPlanFingerprint: p}},
	}}, nil
}

func (s *starts) GetWorkflow(_ context.Context, id, runID string) client.WorkflowRun {
	s.gets = append(s.gets, runID)
	return run{id: id, runID: runID}
}

type run struct{ id, runID string }

func (r run) GetID() string                  { return r.id }
func (r run) GetRunID() string               { return r.runID }
func (r run) GetFirstExecutionRunID() string { return r.runID }
func (r run) Get(_ context.Context, v any) error {
	*(v.(*workflows.Status)) = workflows.Status{WorkflowID: r.id, State: workflows.SagaSucceeded}
	return nil
}
func (r run) GetWithOptions(ctx context.Context, v any, _ client.WorkflowRunGetOptions) error {
	return r.Get(ctx, v)
}

func ticketPlan(subject string) plan.Plan {
	args, _ := json.Marshal(map[string]string{"subject": subject})
	return plan.Plan{SessionID: "sess-42", Turn: 1, Steps: []plan.Step{{Tool: "create_ticket", Args: args}}}
}

// A start that makes the run costs one call: the run carries this plan's
// fingerprint, so nothing is described; and the start fails (rather than
// silently attaching) when the ID is in use, which is what sends the other
// path through the fingerprint check.
func TestStartThatMakesTheRunDescribesNothing(t *testing.T) {
	f := &starts{}
	p := ticketPlan("a")
	fp, err := p.Fingerprint()
	require.NoError(t, err)
	r, err := New(f, Options{}).Start(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, Run{WorkflowID: p.WorkflowID(), RunID: "run-new", PlanFingerprint: fp}, r)
	require.Empty(t, f.describes)
	require.Len(t, f.executes, 1)
	o := f.executes[0]
	require.Equal(t, fp, o.Memo[workflows.MemoPlanFingerprint])
	require.True(t, o.WorkflowExecutionErrorWhenAlreadyStarted, "an ID in use must come back as an error, never as the other run")
	require.NotEqual(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, o.WorkflowIDConflictPolicy, "USE_EXISTING answers a running other plan without an error")
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, o.WorkflowIDReusePolicy)
}

// The same plan again attaches to the run that holds the ID, after one
// describe of that very run.
func TestStartOfTheSamePlanAttaches(t *testing.T) {
	p := ticketPlan("a")
	fp, _ := p.Fingerprint()
	f := &starts{held: &fp, heldRun: "run-old"}
	r, err := New(f, Options{}).Start(context.Background(), p)
	require.NoError(t, err)
	require.Equal(t, "run-old", r.RunID)
	require.Equal(t, []string{"run-old"}, f.describes)
}

// Another plan under the same session and turn is refused naming both
// fingerprints.
func TestStartOfAnotherPlanConflicts(t *testing.T) {
	held := "fp-of-the-plan-that-runs"
	f := &starts{held: &held, heldRun: "run-old"}
	p := ticketPlan("b")
	fp, _ := p.Fingerprint()
	_, err := New(f, Options{}).Start(context.Background(), p)
	var conflict *ConflictError
	require.True(t, errors.As(err, &conflict), "got %v", err)
	require.Equal(t, &ConflictError{WorkflowID: p.WorkflowID(), Existing: held, Requested: fp}, conflict)
}

// WaitRun waits for the run Start returned (no lookup of the current run);
// Wait asks for the current one.
func TestWaitRunUsesTheRunID(t *testing.T) {
	f := &starts{}
	c := New(f, Options{})
	s, err := c.WaitRun(context.Background(), Run{WorkflowID: wf, RunID: "run-7"})
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, s.State)
	_, err = c.Wait(context.Background(), wf)
	require.NoError(t, err)
	require.Equal(t, []string{"run-7", ""}, f.gets)
}

// BenchmarkStart measures the client side of Start (fingerprint, options,
// one start call on a fake that answers at once).
func BenchmarkStart(b *testing.B) {
	f := &starts{}
	c := New(f, Options{})
	p := ticketPlan("a")
	ctx := context.Background()
	for b.Loop() {
		f.executes = f.executes[:0]
		if _, err := c.Start(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	if len(f.describes) != 0 {
		b.Fatalf("Start described %d runs: the benchmark measures the attach path, not a fresh start", len(f.describes))
	}
}

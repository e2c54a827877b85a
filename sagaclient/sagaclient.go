// Package sagaclient is the Go API for planners and operators: start a plan
// (attaching to the same plan, refusing a different one under the same
// session and turn), read its status, approve and resolve its steps, and list
// the plans that wait for a person.
package sagaclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Client wraps a Temporal client.
type Client struct {
	c         client.Client
	taskQueue string
	catalog   tool.Catalog
}

// Options configure a Client.
type Options struct {
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Catalog, when set, validates plans before they are sent, so bad
	// input is refused with every problem named and nothing started.
	Catalog tool.Catalog
}

// New returns a Client over c.
func New(c client.Client, o Options) *Client {
	if o.TaskQueue == "" {
		o.TaskQueue = workflows.TaskQueue
	}
	return &Client{c: c, taskQueue: o.TaskQueue, catalog: o.Catalog}
}

// ConflictError is returned when a different plan is started under a
// session and turn that already have one.
type ConflictError struct {
	WorkflowID string
	Existing   string // fingerprint of the plan that runs or ran
	Requested  string // fingerprint of the plan refused
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("plan conflict on %s: it already holds plan %s, refused plan %s; a changed plan needs a new turn", e.WorkflowID, e.Existing, e.Requested)
}

// Run identifies a started (or attached) plan.
type Run struct {
	WorkflowID      string `json:"workflow_id"`
	RunID           string `json:"run_id"`
	PlanFingerprint string `json:"plan_fingerprint"`
}

// Start starts p, or attaches to the run of the same plan if one exists
// (running or finished), so nothing runs twice. A different plan under the
// same session and turn returns a *ConflictError naming both fingerprints.
func (c *Client) Start(ctx context.Context, p plan.Plan) (Run, error) {
	if c.catalog != nil {
		if err := p.Validate(c.catalog); err != nil {
			return Run{}, err
		}
	}
	fp, err := p.Fingerprint()
	if err != nil {
		return Run{}, err
	}
	id := p.WorkflowID()
	opts := client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                c.taskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		Memo:                     map[string]any{workflows.MemoPlanFingerprint: fp},
	}
	runID := ""
	wr, err := c.c.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, p)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		runID = wr.GetRunID()
	case errors.As(err, &started):
		runID = started.RunId // a finished run holds the ID
	default:
		return Run{}, fmt.Errorf("start %s: %w", id, err)
	}
	existing, err := c.fingerprint(ctx, id, runID)
	if err != nil {
		return Run{}, err
	}
	if existing != fp {
		return Run{}, &ConflictError{WorkflowID: id, Existing: existing, Requested: fp}
	}
	return Run{WorkflowID: id, RunID: runID, PlanFingerprint: fp}, nil
}

func (c *Client) fingerprint(ctx context.Context, id, runID string) (string, error) {
	d, err := c.c.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return "", fmt.Errorf("describe %s: %w", id, err)
	}
	p := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoPlanFingerprint]
	if p == nil {
		return "", fmt.Errorf("workflow %s has no %s memo: it was not started as an agentsaga plan; use a new session or turn", id, workflows.MemoPlanFingerprint)
	}
	var fp string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &fp); err != nil {
		return "", fmt.Errorf("read plan fingerprint of %s: %w", id, err)
	}
	return fp, nil
}

// Status queries a plan's status (running or finished; a finished plan
// needs a worker to answer).
func (c *Client) Status(ctx context.Context, workflowID string) (workflows.Status, error) {
	v, err := c.c.QueryWorkflow(ctx, workflowID, "", workflows.QueryStatus)
	if err != nil {
		return workflows.Status{}, fmt.Errorf("query status of %s: %w", workflowID, err)
	}
	var s workflows.Status
	if err := v.Get(&s); err != nil {
		return workflows.Status{}, fmt.Errorf("decode status of %s: %w", workflowID, err)
	}
	return s, nil
}

// Wait blocks until the plan finishes and returns its final status.
func (c *Client) Wait(ctx context.Context, workflowID string) (workflows.Status, error) {
	var s workflows.Status
	err := c.c.GetWorkflow(ctx, workflowID, "").Get(ctx, &s)
	if err != nil {
		return s, fmt.Errorf("wait for %s: %w", workflowID, err)
	}
	return s, nil
}

// Approve sends an `approve` signal. When a.Fingerprint is empty the step's
// current fingerprint is read from the status first, so the approval binds
// to the arguments the operator saw.
func (c *Client) Approve(ctx context.Context, workflowID string, a workflows.ApproveSignal) error {
	if a.By == "" {
		return errors.New("approve: by is required: name who decided")
	}
	if a.Fingerprint == "" {
		s, err := c.Status(ctx, workflowID)
		if err != nil {
			return err
		}
		if a.Step < 1 || a.Step > len(s.Steps) {
			return fmt.Errorf("approve: step %d does not exist: %s has steps 1 to %d", a.Step, workflowID, len(s.Steps))
		}
		a.Fingerprint = s.Steps[a.Step-1].Fingerprint
	}
	if err := c.c.SignalWorkflow(ctx, workflowID, "", workflows.SignalApprove, a); err != nil {
		return fmt.Errorf("signal approve to %s: %w", workflowID, err)
	}
	return nil
}

// Resolve sends a `resolve` signal deciding a step that waits for a human.
func (c *Client) Resolve(ctx context.Context, workflowID string, r workflows.ResolveSignal) error {
	if r.By == "" {
		return errors.New("resolve: by is required: name who decided")
	}
	switch r.Outcome {
	case workflows.OutcomeSucceeded, workflows.OutcomeFailed, workflows.OutcomeRetry:
	default:
		return fmt.Errorf("resolve: outcome %q is not one of succeeded, failed, retry", r.Outcome)
	}
	if err := c.c.SignalWorkflow(ctx, workflowID, "", workflows.SignalResolve, r); err != nil {
		return fmt.Errorf("signal resolve to %s: %w", workflowID, err)
	}
	return nil
}

// Escalation is a plan that waits for a person.
type Escalation struct {
	WorkflowID string                 `json:"workflow_id"`
	Since      time.Time              `json:"started_at"`
	State      workflows.SagaState    `json:"state"`
	Steps      []workflows.StepStatus `json:"waiting_steps"`
}

// Escalations lists running plans that wait for a person, found through the
// search attribute AgentSagaNeedsHuman.
func (c *Client) Escalations(ctx context.Context) ([]Escalation, error) {
	q := fmt.Sprintf("%s = true AND ExecutionStatus = 'Running'", workflows.SearchAttrNeedsHuman)
	var out []Escalation
	var token []byte
	for {
		resp, err := c.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			return nil, fmt.Errorf("list plans waiting for a human: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			id := e.GetExecution().GetWorkflowId()
			esc := Escalation{WorkflowID: id, Since: e.GetStartTime().AsTime()}
			if s, err := c.Status(ctx, id); err == nil {
				esc.State = s.State
				for _, st := range s.Steps {
					if st.Waiting != "" {
						esc.Steps = append(esc.Steps, st)
					}
				}
			}
			out = append(out, esc)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

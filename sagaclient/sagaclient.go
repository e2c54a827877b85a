// Package sagaclient is the Go API for planners and operators: start a plan
// (attaching to the same plan, refusing a different one under the same
// session and turn), read its status, answer its open questions (approve and
// resolve, sent as Temporal Updates, signed with an operator key when one is
// configured), cancel it, and list the plans that wait for a person.
//
// Cancel asks the workflow to stop: it compensates what it did (reversals run
// in a disconnected context). Terminating a workflow (temporal workflow
// terminate, or the UI's Terminate button) does NOT compensate: it stops the
// history at once and leaves every effect in place; use it only on a plan
// whose effects you will reverse by hand.
package sagaclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Client wraps a Temporal client.
type Client struct {
	c         client.Client
	taskQueue string
	catalog   tool.Catalog
	key       *operators.Key
	now       func() time.Time
}

// Options configure a Client.
type Options struct {
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// Catalog, when set, validates plans before they are sent, so bad
	// input is refused with every problem named and nothing started.
	Catalog tool.Catalog
	// Key, when set, signs every decision (see package operators): By
	// becomes the key's name, and Signature covers the decision's
	// SigningBytes (its run, read from the status when not given, and its
	// SentAt, the current time, included). Without a key the decision
	// carries the typed By, which the workflow records as unverified (or
	// refuses, when the worker has an operators file).
	Key *operators.Key
	// Now is the clock for SentAt; nil means time.Now.
	Now func() time.Time
}

// New returns a Client over c.
func New(c client.Client, o Options) *Client {
	if o.TaskQueue == "" {
		o.TaskQueue = workflows.TaskQueue
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Client{c: c, taskQueue: o.TaskQueue, catalog: o.Catalog, key: o.Key, now: o.Now}
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
	// The start either makes the run, with this plan's fingerprint in its
	// memo, or fails with the run that holds the ID (running or
	// finished). Only then is the held plan's fingerprint read, so the
	// common path costs one call, not a start and a describe.
	opts := client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                c.taskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     map[string]any{workflows.MemoPlanFingerprint: fp},
		StaticSummary:                            workflows.StaticSummary(p),
		TypedSearchAttributes:                    workflows.StartAttributes(p.SessionID),
	}
	wr, err := c.c.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, p)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		// This call made the run (a retried request with the same
		// request ID included): its memo is fp.
		return Run{WorkflowID: id, RunID: wr.GetRunID(), PlanFingerprint: fp}, nil
	case errors.As(err, &started):
	default:
		return Run{}, fmt.Errorf("start %s: %w", id, err)
	}
	existing, err := c.fingerprint(ctx, id, started.RunId)
	if err != nil {
		return Run{}, err
	}
	if existing != fp {
		// A plan the workflow refused as invalid ran nothing: its session
		// and turn stay free for the corrected plan, which starts a new
		// run under the same ID (allowed only after a failed run, and
		// only this once: a second start meets the run it makes).
		if refused, err := c.refusal(ctx, id, started.RunId); err != nil {
			return Run{}, err
		} else if refused != nil {
			opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY
			wr, err := c.c.ExecuteWorkflow(ctx, opts, workflows.WorkflowName, p)
			if err != nil {
				return Run{}, fmt.Errorf("start %s after the refused plan %s: %w", id, existing, err)
			}
			return Run{WorkflowID: id, RunID: wr.GetRunID(), PlanFingerprint: fp}, nil
		}
		return Run{}, &ConflictError{WorkflowID: id, Existing: existing, Requested: fp}
	}
	return Run{WorkflowID: id, RunID: started.RunId, PlanFingerprint: fp}, nil
}

// RefusedError is a plan the workflow refused as invalid (a field, a tool
// or an argument its worker does not accept). Nothing ran and nothing was
// recorded in the ledger: its session and turn stay free, and Start of the
// corrected plan under them runs it.
type RefusedError struct {
	WorkflowID, RunID string
	// Reason is the workflow's own words: every problem, by field.
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("plan %s was refused as invalid, nothing ran (correct it and run it again under the same session and turn): %s", e.WorkflowID, e.Reason)
}

// refusal returns the RefusedError of run runID of id when the workflow
// refused its plan as invalid, else nil.
func (c *Client) refusal(ctx context.Context, id, runID string) (*RefusedError, error) {
	d, err := c.c.DescribeWorkflowExecution(ctx, id, runID)
	if err != nil {
		return nil, fmt.Errorf("describe %s: %w", id, err)
	}
	if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		return nil, nil
	}
	err = c.c.GetWorkflow(ctx, id, runID).Get(ctx, nil)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !strings.HasPrefix(app.Type(), workflows.ErrInvalidPlan) {
		return nil, nil
	}
	return &RefusedError{WorkflowID: id, RunID: runID, Reason: app.Message()}, nil
}

// Checked waits until a worker has checked the plan of run r against its
// tools (the run's first workflow task) and returns a *RefusedError when it
// was refused, nil when it was accepted. It reads the run's history (a long
// poll, no query); ctx bounds the wait, so give it a deadline: without a
// worker on the task queue nothing checks the plan, and Checked returns
// ctx's error.
func (c *Client) Checked(ctx context.Context, r Run) error {
	it := c.c.GetWorkflowHistory(ctx, r.WorkflowID, r.RunID, true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	completed := false
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read the history of %s: %w", r.WorkflowID, err)
		}
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			completed = true
		case enumspb.EVENT_TYPE_MARKER_RECORDED: // the pinned specs
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
			refused, err := c.refusal(ctx, r.WorkflowID, r.RunID)
			if err != nil || refused == nil {
				return err
			}
			return refused
		default:
			if completed { // the first task went past the check
				return nil
			}
		}
	}
	return ctx.Err()
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
		// A refused plan never registered its status query: say so.
		if refused, rerr := c.refusal(ctx, workflowID, ""); rerr == nil && refused != nil {
			return workflows.Status{}, refused
		}
		return workflows.Status{}, fmt.Errorf("query status of %s: %w", workflowID, err)
	}
	var s workflows.Status
	if err := v.Get(&s); err != nil {
		return workflows.Status{}, fmt.Errorf("decode status of %s: %w", workflowID, err)
	}
	return s, nil
}

// Wait blocks until the plan finishes and returns its final status. It
// first asks the server which run holds workflowID (one describe call);
// WaitRun, given the Run that Start returned, skips that.
func (c *Client) Wait(ctx context.Context, workflowID string) (workflows.Status, error) {
	return c.wait(ctx, workflowID, "")
}

// WaitRun blocks until the run r (as Start returned it) finishes and
// returns its final status.
func (c *Client) WaitRun(ctx context.Context, r Run) (workflows.Status, error) {
	return c.wait(ctx, r.WorkflowID, r.RunID)
}

func (c *Client) wait(ctx context.Context, workflowID, runID string) (workflows.Status, error) {
	var s workflows.Status
	err := c.c.GetWorkflow(ctx, workflowID, runID).Get(ctx, &s)
	if err != nil {
		return s, fmt.Errorf("wait for %s: %w", workflowID, err)
	}
	return s, nil
}

// ErrNoOpenQuestion is returned by Approve and Resolve when the step has no
// open question a decision could answer. Nothing is queued for later: decide
// when the status shows the question.
var ErrNoOpenQuestion = errors.New("no open question")

// ErrNotRunning is returned by Cancel for a plan that has ended (or never
// existed).
var ErrNotRunning = errors.New("the plan is not running")

// RejectedError is a decision the workflow's validator refused: not the open
// question, a stale question id or fingerprint, a bad identity or signature,
// and so on. Reason is the workflow's own words. Nothing was applied.
type RejectedError struct {
	WorkflowID string
	Update     string // approve or resolve
	QuestionID string
	Reason     string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%s refused by %s (question %s): %s", e.Update, e.WorkflowID, e.QuestionID, e.Reason)
}

// DecisionUpdateID is the Update ID of a decision: the same decision (same
// question, same decider, same answer) always gets the same ID, so a double
// click is one Update and is applied once.
func DecisionUpdateID(questionID, by, answer string) string {
	// Update IDs are stored in plain text by the server (payloads are
	// encrypted, IDs are not): hash the decider's name and answer away.
	sum := sha256.Sum256([]byte(questionID + "\x00" + by + "\x00" + answer))
	return "decision:" + hex.EncodeToString(sum[:16])
}

func approveAnswer(a workflows.ApproveSignal) string {
	ans := "reject"
	if a.Approved {
		ans = "approve"
	}
	if a.Override {
		ans += "+override"
	}
	return ans
}

func resolveAnswer(r workflows.ResolveSignal) string {
	ans := string(r.Outcome)
	if r.ExternalID != "" {
		ans += "=" + r.ExternalID
	}
	return ans
}

// OpenQuestion finds, in the status s, the open question a decision about
// step answers: the one named id when id is given (of any kind, on any
// step), else the step's open question of one of kinds. Approve and Resolve
// find it so; a client that shows the card first (starter approve, the
// console) finds it with this and passes its id, fingerprint, run and card
// digest.
func OpenQuestion(s workflows.Status, step int, id string, kinds ...string) (workflows.Question, bool) {
	return openQuestion(s, step, id, kinds...)
}

func openQuestion(s workflows.Status, step int, id string, kinds ...string) (workflows.Question, bool) {
	for _, q := range s.Questions {
		if id != "" {
			if q.ID == id {
				return q, true
			}
			continue
		}
		if q.Step == step && slices.Contains(kinds, q.Kind) {
			return q, true
		}
	}
	return workflows.Question{}, false
}

func (c *Client) identify(by string) (string, error) {
	if c.key != nil {
		if by != "" && by != c.key.Name {
			return "", fmt.Errorf("by %q differs from the key's operator %q: a signed decision is made by the key's owner; drop --by", by, c.key.Name)
		}
		return c.key.Name, nil
	}
	if err := operators.ValidName(by); err != nil {
		return "", fmt.Errorf("by: %w (name who decides, or sign with an operator key)", err)
	}
	return by, nil
}

// Approve answers the open approval question of step a.Step with an Update
// and returns what the workflow did. When a.QuestionID, a.Fingerprint or
// a.RunID is empty, the status is read first: the decision names the run it
// answers, and binds to the step's open approval question and the arguments
// the operator saw; a step without one returns ErrNoOpenQuestion. A decision
// naming a question that is closed already is sent as it is: the same
// decision again returns Applied false, any other the workflow's refusal.
// With a Key the decision is signed. A decision the workflow refuses returns
// a *RejectedError with its reason.
func (c *Client) Approve(ctx context.Context, workflowID string, a workflows.ApproveSignal) (workflows.DecisionResult, error) {
	by, err := c.identify(a.By)
	if err != nil {
		return workflows.DecisionResult{}, fmt.Errorf("approve: %w", err)
	}
	a.By = by
	if a.QuestionID == "" || a.Fingerprint == "" || a.RunID == "" {
		s, err := c.Status(ctx, workflowID)
		if err != nil {
			return workflows.DecisionResult{}, err
		}
		if a.RunID == "" {
			a.RunID = s.RunID
		}
		if err := approvalOf(s, workflowID, &a); err != nil {
			return workflows.DecisionResult{}, err
		}
	}
	a.SentAt, a.Signature = c.now().UTC(), ""
	if c.key != nil {
		a.Signature = operators.Sign(c.key, a.SigningBytes(workflowID))
	}
	return c.decide(ctx, workflowID, workflows.UpdateApprove, a.QuestionID, DecisionUpdateID(a.QuestionID, a.By, approveAnswer(a)), a.SentAt, a)
}

// approvalOf completes a's question id and fingerprint from the status s,
// when either is missing, from the step's open approval question.
func approvalOf(s workflows.Status, workflowID string, a *workflows.ApproveSignal) error {
	if a.QuestionID != "" && a.Fingerprint != "" {
		return nil
	}
	q, ok := openQuestion(s, a.Step, a.QuestionID, workflows.QuestionApproval)
	switch {
	case ok:
		a.Step, a.QuestionID = q.Step, q.ID
		if a.Fingerprint == "" {
			a.Fingerprint = q.Fingerprint
		}
	case a.QuestionID != "" && a.Step >= 1 && a.Step <= len(s.Steps):
		// A named question that is no longer open: send it anyway, so
		// a repeated decision gets its first answer (same Update ID)
		// and any other gets the workflow's reason.
		if a.Fingerprint == "" {
			a.Fingerprint = s.Steps[a.Step-1].Fingerprint
		}
	default:
		return noQuestion(s, workflowID, a.Step, a.QuestionID, "approval")
	}
	return nil
}

// Resolve answers the open question of step r.Step (its unknown outcome, a
// conflict, or a failed reversal) with an Update, as Approve does.
func (c *Client) Resolve(ctx context.Context, workflowID string, r workflows.ResolveSignal) (workflows.DecisionResult, error) {
	switch r.Outcome {
	case workflows.OutcomeSucceeded, workflows.OutcomeFailed, workflows.OutcomeRetry:
	default:
		return workflows.DecisionResult{}, fmt.Errorf("resolve: outcome %q is not one of succeeded, failed, retry", r.Outcome)
	}
	by, err := c.identify(r.By)
	if err != nil {
		return workflows.DecisionResult{}, fmt.Errorf("resolve: %w", err)
	}
	r.By = by
	if r.QuestionID == "" || r.RunID == "" {
		s, err := c.Status(ctx, workflowID)
		if err != nil {
			return workflows.DecisionResult{}, err
		}
		if r.RunID == "" {
			r.RunID = s.RunID
		}
		if r.QuestionID == "" {
			q, ok := openQuestion(s, r.Step, "", workflows.QuestionOutcome, workflows.QuestionReversal)
			if !ok {
				return workflows.DecisionResult{}, noQuestion(s, workflowID, r.Step, "", "outcome or reversal")
			}
			r.QuestionID = q.ID
		}
	}
	r.SentAt, r.Signature = c.now().UTC(), ""
	if c.key != nil {
		r.Signature = operators.Sign(c.key, r.SigningBytes(workflowID))
	}
	return c.decide(ctx, workflowID, workflows.UpdateResolve, r.QuestionID, DecisionUpdateID(r.QuestionID, r.By, resolveAnswer(r)), r.SentAt, r)
}

func noQuestion(s workflows.Status, workflowID string, step int, id, kind string) error {
	if id != "" {
		return fmt.Errorf("%w: question %s is not open in %s (plan state %s); run `starter status %s` for the open questions", ErrNoOpenQuestion, id, workflowID, s.State, workflowID)
	}
	state := "does not exist"
	if step >= 1 && step <= len(s.Steps) {
		state = "is " + string(s.Steps[step-1].State)
	}
	return fmt.Errorf("%w: step %d of %s has no open %s question (the step %s, the plan is %s); nothing is queued for later: decide when `starter status %s` shows the question", ErrNoOpenQuestion, step, workflowID, kind, state, s.State, workflowID)
}

// decide sends decision arg, sent at sentAt, as Update name. The Update ID
// is the decision's (DecisionUpdateID): Temporal answers a repeated one with
// the first one's result, so a result naming another sent_at than this
// decision's is reported as the repeat it is (Applied false).
func (c *Client) decide(ctx context.Context, workflowID, name, questionID, updateID string, sentAt time.Time, arg any) (workflows.DecisionResult, error) {
	var res workflows.DecisionResult
	h, err := c.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID:     updateID,
		WorkflowID:   workflowID,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &res)
	}
	var app *temporal.ApplicationError
	var notFound *serviceerror.NotFound
	switch {
	case err == nil && res.Applied && !res.SentAt.IsZero() && !res.SentAt.Equal(sentAt):
		res.Applied = false
		res.Message = fmt.Sprintf("already applied: question %s was %s by %s (sent %s); nothing happened twice", res.QuestionID, res.Message, res.By, res.SentAt.UTC().Format(time.RFC3339Nano))
		return res, nil
	case err == nil:
		return res, nil
	case errors.As(err, &app):
		return res, &RejectedError{WorkflowID: workflowID, Update: name, QuestionID: questionID, Reason: app.Message()}
	case errors.As(err, &notFound):
		return res, fmt.Errorf("%s to %s: the plan is not running (finished, or no such workflow ID), so no question is open: %w", name, workflowID, err)
	case ctx.Err() != nil:
		return res, fmt.Errorf("%s to %s: no answer before the deadline; is a worker polling task queue %s? %w", name, workflowID, c.taskQueue, err)
	}
	return res, fmt.Errorf("%s to %s: %w", name, workflowID, err)
}

// Cancel asks the plan to stop. The workflow compensates what it did
// (reversals newest first) and ends compensated, or compensation_failed for a
// human to decide. Terminate, by contrast, does not compensate (see the
// package documentation).
// A plan that has ended already returns an error wrapping ErrNotRunning.
func (c *Client) Cancel(ctx context.Context, workflowID string) error {
	d, err := c.c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return fmt.Errorf("cancel %s: %w: no such workflow ID", workflowID, ErrNotRunning)
		}
		return fmt.Errorf("cancel %s: describe: %w", workflowID, err)
	}
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return fmt.Errorf("cancel %s: %w: it ended %s; nothing to cancel (see its status)", workflowID, ErrNotRunning, strings.ToLower(strings.TrimPrefix(st.String(), "WorkflowExecutionStatus")))
	}
	if err := c.c.CancelWorkflow(ctx, workflowID, ""); err != nil {
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return fmt.Errorf("cancel %s: the plan is not running (finished, or no such workflow ID); nothing to cancel: %w", workflowID, err)
		}
		return fmt.Errorf("cancel %s: %w", workflowID, err)
	}
	return nil
}

// Escalation is a plan that waits for a person.
type Escalation struct {
	WorkflowID string              `json:"workflow_id"`
	Since      time.Time           `json:"started_at"`
	State      workflows.SagaState `json:"state"`
	// OpenSince is when the oldest open question was opened (the plan's
	// start when the status could not be read or lists no question).
	OpenSince time.Time `json:"open_since"`
	// Questions are the open questions, oldest first, each with its card.
	Questions []workflows.Question `json:"questions"`
	// Steps are the steps that wait.
	Steps []workflows.StepStatus `json:"waiting_steps"`
	// StatusError says why the status could not be read (no worker, for
	// example); the plan is listed anyway.
	StatusError string `json:"status_error,omitempty"`
}

// neededHuman is the visibility query of the running plans that wait for
// a person (of agentsaga's own workflow types: another workflow given the
// search attribute is not listed).
var neededHuman = fmt.Sprintf("%s = true AND ExecutionStatus = 'Running' AND WorkflowType IN ('%s', '%s')",
	workflows.SearchAttrNeedsHuman, workflows.WorkflowName, workflows.SessionWorkflowName)

// Escalations lists running plans that wait for a person, found through the
// search attribute AgentSagaNeedsHuman, with their open questions and whole
// cards (each plan's status), sorted by the age of their oldest open
// question, oldest first. Waiting lists them without a query per plan.
func (c *Client) Escalations(ctx context.Context) ([]Escalation, error) {
	out := []Escalation{}
	err := c.listWaiting(ctx, func(id string, since time.Time, _ *commonpb.Memo) {
		s, err := c.Status(ctx, id)
		out = append(out, escalation(id, since, s, err))
	})
	if err != nil {
		return nil, err
	}
	SortEscalations(out)
	return out, nil
}

// listWaiting calls each with every running plan that waits for a person,
// page by page of visibility.
func (c *Client) listWaiting(ctx context.Context, each func(id string, since time.Time, memo *commonpb.Memo)) error {
	var token []byte
	for {
		resp, err := c.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: neededHuman, NextPageToken: token, PageSize: waitingPage})
		if err != nil {
			return fmt.Errorf("list plans waiting for a human: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			each(e.GetExecution().GetWorkflowId(), e.GetStartTime().AsTime(), e.GetMemo())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// waitingPage is the visibility page size of listWaiting.
const waitingPage = 1000

// Waiting is a plan that waits for a person, with the index of its open
// questions as it published them (workflows.OpenQuestions): each question
// with the short fields of its card; Status has the cards whole.
type Waiting struct {
	WorkflowID string    `json:"workflow_id"`
	Since      time.Time `json:"started_at"`
	workflows.OpenQuestions
	// StatusError says why a plan that published no index (started
	// before plans did) could not be read either; it is listed anyway.
	StatusError string `json:"status_error,omitempty"`
}

// Waiting lists the running plans that wait for a person with their open
// questions, in one visibility query (in pages): each plan's questions
// come from its memo (workflows.MemoOpenQuestions), and only a plan
// started before plans published them there is asked for its status.
// Plans come oldest open question first.
func (c *Client) Waiting(ctx context.Context) ([]Waiting, error) {
	out := []Waiting{}
	oldest := map[string]time.Time{}
	err := c.listWaiting(ctx, func(id string, since time.Time, memo *commonpb.Memo) {
		w := Waiting{WorkflowID: id, Since: since}
		if !published(memo.GetFields()[workflows.MemoOpenQuestions], &w.OpenQuestions) {
			s, err := c.Status(ctx, id)
			if err != nil {
				w.StatusError = err.Error()
			}
			w.State, w.SignedDecisions, w.Questions = s.State, s.SignedDecisions, []workflows.QuestionIndex{}
			for _, q := range s.Questions {
				var toolName string
				if q.Step >= 1 && q.Step <= len(s.Steps) {
					toolName = s.Steps[q.Step-1].Tool
				}
				w.Questions = append(w.Questions, workflows.IndexOf(q, toolName))
			}
		}
		first := since // the plan's start when no question is listed
		for i, q := range w.Questions {
			if i == 0 || q.OpenedAt.Before(first) {
				first = q.OpenedAt
			}
		}
		oldest[id] = first
		out = append(out, w)
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := oldest[out[i].WorkflowID], oldest[out[j].WorkflowID]
		if !a.Equal(b) {
			return a.Before(b)
		}
		return out[i].WorkflowID < out[j].WorkflowID
	})
	return out, nil
}

// published reads the MemoOpenQuestions memo p (decoded: see
// codec.DecodeMemos) into into; false when there is none, or one this
// client cannot read.
func published(p *commonpb.Payload, into *workflows.OpenQuestions) bool {
	return p != nil && converter.GetDefaultDataConverter().FromPayload(p, into) == nil && into.Questions != nil
}

func escalation(id string, since time.Time, s workflows.Status, err error) Escalation {
	esc := Escalation{WorkflowID: id, Since: since, OpenSince: since, Questions: []workflows.Question{}}
	if err != nil {
		esc.StatusError = err.Error()
		return esc
	}
	esc.State = s.State
	for _, st := range s.Steps {
		if st.Waiting != "" {
			esc.Steps = append(esc.Steps, st)
		}
	}
	esc.Questions = append(esc.Questions, s.Questions...)
	var oldest time.Time
	for _, q := range s.Questions {
		if !q.OpenedAt.IsZero() && (oldest.IsZero() || q.OpenedAt.Before(oldest)) {
			oldest = q.OpenedAt
		}
	}
	if !oldest.IsZero() {
		esc.OpenSince = oldest
	}
	return esc
}

// SortEscalations orders escalations by the age of their oldest open
// question, oldest first (ties by workflow ID, so the order is stable).
func SortEscalations(list []Escalation) {
	sort.SliceStable(list, func(i, j int) bool {
		if !list[i].OpenSince.Equal(list[j].OpenSince) {
			return list[i].OpenSince.Before(list[j].OpenSince)
		}
		return list[i].WorkflowID < list[j].WorkflowID
	})
}

// ErrSessionEnded is returned by Turn for a session whose workflow has
// ended: its ID is not started again; start a new session.
var ErrSessionEnded = errors.New("the session has ended: start a new session (a new session_id)")

// SessionOptions configure Turn's start of a session workflow.
type SessionOptions struct {
	// RequestedBy names the principal who sends the turns (four eyes): the
	// session's requester when Turn starts it, and the requester of every
	// turn Turn sends whose TurnRequest.RequestedBy is empty, also into a
	// session someone else started.
	RequestedBy string
	// KeepFailedTurns keeps the writes of a turn whose step failed.
	KeepFailedTurns bool
	// TurnsPerRun continues the session as new after that many turns
	// (besides whenever Temporal suggests it); zero means only then.
	TurnsPerRun int
}

// Turn sends one model turn of an interactive session with Update-with-Start:
// it starts the session's AgentSession workflow (ID agent-session:{session})
// if it is not running and sends Update `turn` with Update ID
// {session}:{turn}. It returns the turn's results, or the open question when
// a step waits for a person; sending the same turn again returns the first
// result without a call, and another payload under the same turn is refused.
func (c *Client) Turn(ctx context.Context, session string, t workflows.TurnRequest, o SessionOptions) (workflows.TurnResult, error) {
	id := workflows.SessionWorkflowID(session)
	if t.RequestedBy == "" {
		// The turn names its sender: a session started by someone else
		// keeps its own requester, and four eyes must see this one.
		t.RequestedBy = o.RequestedBy
	}
	start := c.c.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                c.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		// An ended session is not started again under its ID.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		StaticSummary:         "agent session " + session,
		TypedSearchAttributes: workflows.StartAttributes(session),
	}, workflows.SessionWorkflowName, workflows.SessionStart{SessionID: session, RequestedBy: o.RequestedBy, KeepFailedTurns: o.KeepFailedTurns, TurnsPerRun: o.TurnsPerRun})
	h, err := c.c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID: workflows.TurnUpdateID(session, t.Turn), UpdateName: workflows.UpdateTurn,
			Args: []any{t}, WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return workflows.TurnResult{}, fmt.Errorf("send turn %d of session %s: %w", t.Turn, session, ErrSessionEnded)
	}
	if err != nil {
		return workflows.TurnResult{}, fmt.Errorf("send turn %d of session %s: %w", t.Turn, session, err)
	}
	var res workflows.TurnResult
	if err := h.Get(ctx, &res); err != nil {
		return res, fmt.Errorf("turn %d of session %s: %w", t.Turn, session, err)
	}
	// Temporal answers a repeated Update ID with the first result: check it
	// is this turn's, and read a waiting turn's current state.
	fp, err := plan.Plan{SessionID: session, Turn: t.Turn, Parallel: t.Parallel, Steps: t.Steps}.Fingerprint()
	if err != nil {
		return res, err
	}
	if res.Fingerprint != fp {
		return res, &ConflictError{WorkflowID: id, Existing: res.Fingerprint, Requested: fp}
	}
	if res.State == workflows.TurnWaiting || res.State == workflows.TurnRunning {
		v, err := c.c.QueryWorkflow(ctx, id, "", workflows.QueryTurn, t.Turn)
		if err != nil {
			return res, fmt.Errorf("read turn %d of session %s: %w", t.Turn, session, err)
		}
		if err := v.Get(&res); err != nil {
			return res, fmt.Errorf("decode turn %d of session %s: %w", t.Turn, session, err)
		}
	}
	return res, nil
}

// ReadTurn reads turn of session as the session records it now, also once
// the session has ended (a query, answered from its history).
func (c *Client) ReadTurn(ctx context.Context, session string, turn int) (workflows.TurnResult, error) {
	var res workflows.TurnResult
	v, err := c.c.QueryWorkflow(ctx, workflows.SessionWorkflowID(session), "", workflows.QueryTurn, turn)
	if err != nil {
		return res, fmt.Errorf("read turn %d of session %s: %w", turn, session, err)
	}
	if err := v.Get(&res); err != nil {
		return res, fmt.Errorf("decode turn %d of session %s: %w", turn, session, err)
	}
	return res, nil
}

// EndSession ends a session: outcome "failed" compensates every write it
// made, "succeeded" keeps them. It returns the session's final status.
func (c *Client) EndSession(ctx context.Context, session, outcome, by string) (workflows.Status, error) {
	h, err := c.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflows.SessionWorkflowID(session), UpdateID: "end", UpdateName: workflows.UpdateEnd,
		Args: []any{workflows.EndRequest{Outcome: outcome, By: by}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return workflows.Status{}, fmt.Errorf("end session %s: %w", session, err)
	}
	if err := h.Get(ctx, nil); err != nil {
		return workflows.Status{}, fmt.Errorf("end session %s: %w", session, err)
	}
	return c.Wait(ctx, workflows.SessionWorkflowID(session))
}

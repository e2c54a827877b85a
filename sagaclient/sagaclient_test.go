package sagaclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/workflows"
)

// fake is a Temporal client answering the status query and recording
// updates and cancels; every other method panics (nil embedded interface).
type fake struct {
	client.Client
	status    workflows.Status
	updates   []client.UpdateWorkflowOptions
	updateErr error // returned by the handle's Get
	result    workflows.DecisionResult
	cancels   []string
	cancelErr error
	execution enumspb.WorkflowExecutionStatus
}

func (f *fake) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if f.execution == enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: f.execution}}, nil
}

func (f *fake) QueryWorkflow(_ context.Context, id, _ string, q string, _ ...any) (converter.EncodedValue, error) {
	if q != workflows.QueryStatus {
		return nil, errors.New("unexpected query " + q)
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(f.status)
	if err != nil {
		return nil, err
	}
	return client.NewValue(p), nil
}

func (f *fake) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.updates = append(f.updates, o)
	return handle{o: o, err: f.updateErr, res: f.result}, nil
}

func (f *fake) CancelWorkflow(_ context.Context, id, _ string) error {
	f.cancels = append(f.cancels, id)
	return f.cancelErr
}

type handle struct {
	o   client.UpdateWorkflowOptions
	err error
	res workflows.DecisionResult
}

func (h handle) Get(_ context.Context, v any) error {
	if h.err != nil {
		return h.err
	}
	*(v.(*workflows.DecisionResult)) = h.res
	return nil
}
func (h handle) RunID() string      { return "" }
func (h handle) UpdateID() string   { return h.o.UpdateID }
func (h handle) WorkflowID() string { return h.o.WorkflowID }

const wf = "agent-plan:sess-42:1"

var clock = time.Date(2025, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))

func waiting() workflows.Status {
	return workflows.Status{
		WorkflowID: wf, RunID: "run-1", State: workflows.SagaWaitingApproval,
		Steps: []workflows.StepStatus{
			{Step: 1, Fingerprint: "fp1", State: ledger.Succeeded},
			{Step: 2, Fingerprint: "fp2", State: ledger.NeedsHuman, Waiting: "resolve"},
			{Step: 3, Fingerprint: "fp3-now", State: ledger.Pending, Waiting: "approval"},
		},
		Questions: []workflows.Question{
			{ID: "q-2-outcome-1", Kind: workflows.QuestionOutcome, Step: 2, Fingerprint: "fp2", OpenedAt: clock.Add(-time.Hour)},
			{ID: "q-3-approval-1", Kind: workflows.QuestionApproval, Step: 3, Fingerprint: "fp3-now", OpenedAt: clock.Add(-time.Minute)},
		},
	}
}

func key(t *testing.T, name string, seed byte) (*operators.Key, *operators.Keyring) {
	k, err := operators.NewKey(name, bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	require.NoError(t, err)
	b, _ := json.Marshal(operators.File{Operators: []operators.Operator{k.Entry()}})
	ring, err := operators.Parse(b)
	require.NoError(t, err)
	return k, ring
}

func TestSignedApprovalAnswersTheOpenQuestion(t *testing.T) {
	f := &fake{status: waiting(), result: workflows.DecisionResult{QuestionID: "q-3-approval-1", Applied: true, By: "alice", Verified: true}}
	k, ring := key(t, "alice", 1)
	c := New(f, Options{Key: k, Now: func() time.Time { return clock }})
	res, err := c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, Reason: "customer verified"})
	require.NoError(t, err)
	require.True(t, res.Applied)
	require.Len(t, f.updates, 1)
	u := f.updates[0]
	require.Equal(t, workflows.UpdateApprove, u.UpdateName)
	require.Equal(t, wf, u.WorkflowID)
	require.Equal(t, DecisionUpdateID("q-3-approval-1", "alice", "approve"), u.UpdateID)
	require.Equal(t, client.WorkflowUpdateStageCompleted, u.WaitForStage)
	sent := u.Args[0].(workflows.ApproveSignal)
	require.Equal(t, "q-3-approval-1", sent.QuestionID)
	require.Equal(t, "fp3-now", sent.Fingerprint)
	require.Equal(t, "alice", sent.By)
	require.Equal(t, "run-1", sent.RunID, "the signature names the run the status is of")
	require.Equal(t, clock.UTC(), sent.SentAt)
	require.Equal(t, time.UTC, sent.SentAt.Location())
	// The workflow's validator would accept it ...
	require.NoError(t, ring.Verify(sent.By, operators.ActionApprove, sent.SigningBytes(wf), sent.Signature))
	// ... and refuse it for another plan, another answer, another question.
	require.ErrorIs(t, ring.Verify(sent.By, operators.ActionApprove, sent.SigningBytes("agent-plan:sess-42:2"), sent.Signature), operators.ErrBadSignature)
	for _, edit := range []func(*workflows.ApproveSignal){
		func(a *workflows.ApproveSignal) { a.Approved = false },
		func(a *workflows.ApproveSignal) { a.Override = true },
		func(a *workflows.ApproveSignal) { a.QuestionID = "q-3-approval-2" },
		func(a *workflows.ApproveSignal) { a.Fingerprint = "fp3-other" },
		func(a *workflows.ApproveSignal) { a.Reason += "!" },
		func(a *workflows.ApproveSignal) { a.SentAt = a.SentAt.Add(time.Second) },
		func(a *workflows.ApproveSignal) { a.RunID = "run-2" },
	} {
		a := sent
		edit(&a)
		require.ErrorIs(t, ring.Verify(a.By, operators.ActionApprove, a.SigningBytes(wf), a.Signature), operators.ErrBadSignature, "%+v", a)
	}
}

func TestDoubleClickIsOneUpdateID(t *testing.T) {
	f := &fake{status: waiting()}
	k, _ := key(t, "alice", 1)
	now := clock
	c := New(f, Options{Key: k, Now: func() time.Time { now = now.Add(time.Second); return now }})
	for range 2 {
		_, err := c.Resolve(context.Background(), wf, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeFailed})
		require.NoError(t, err)
	}
	require.Len(t, f.updates, 2)
	require.Equal(t, f.updates[0].UpdateID, f.updates[1].UpdateID, "the same decision must reuse its Update ID")
	require.Equal(t, DecisionUpdateID("q-2-outcome-1", "alice", "failed"), f.updates[0].UpdateID)
	// A different answer is a different decision.
	_, err := c.Resolve(context.Background(), wf, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: "msg_81"})
	require.NoError(t, err)
	require.Equal(t, DecisionUpdateID("q-2-outcome-1", "alice", "succeeded=msg_81"), f.updates[2].UpdateID)
	require.Len(t, DecisionUpdateID(string(make([]byte, 500)), "a", "b"), len("decision:")+32)
	require.NotContains(t, DecisionUpdateID("q1", "alice", "approve"), "alice", "the decider's name never reaches the server in plain text")
}

// Temporal answers a repeated Update ID with the first decision's result:
// the client reports the repeat as not applied (issue 16, item 14).
func TestRepeatedUpdateIDIsReportedNotApplied(t *testing.T) {
	now := clock
	first := clock.Add(time.Second).UTC()
	f := &fake{status: waiting(), result: workflows.DecisionResult{QuestionID: "q-3-approval-1", Applied: true, By: "bob", SentAt: first, Message: "approved"}}
	c := New(f, Options{Now: func() time.Time { now = now.Add(time.Second); return now }})
	res, err := c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, By: "bob"})
	require.NoError(t, err)
	require.True(t, res.Applied, "the first click")
	res, err = c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, By: "bob"})
	require.NoError(t, err)
	require.False(t, res.Applied, "the second click got the first one's result")
	require.Contains(t, res.Message, "already applied")
	require.Equal(t, f.updates[0].UpdateID, f.updates[1].UpdateID)

	// A worker from before sent_at was returned: its word is taken.
	f.result.SentAt = time.Time{}
	res, err = c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, By: "bob"})
	require.NoError(t, err)
	require.True(t, res.Applied)
}

func TestResolveNeverAnswersAnApprovalQuestion(t *testing.T) {
	f := &fake{status: waiting()}
	c := New(f, Options{})
	_, err := c.Resolve(context.Background(), wf, workflows.ResolveSignal{Step: 3, Outcome: workflows.OutcomeSucceeded, By: "bob"})
	require.ErrorIs(t, err, ErrNoOpenQuestion)
	require.ErrorContains(t, err, "step 3 of "+wf+" has no open outcome or reversal question")
	_, err = c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 2, Approved: true, By: "bob"})
	require.ErrorIs(t, err, ErrNoOpenQuestion)
	_, err = c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 9, Approved: true, By: "bob"})
	require.ErrorContains(t, err, "does not exist")
	_, err = c.Approve(context.Background(), wf, workflows.ApproveSignal{QuestionID: "q-3-approval-0", Approved: true, By: "bob"})
	require.ErrorContains(t, err, "question q-3-approval-0 is not open")
	require.Empty(t, f.updates, "nothing may be sent when no question is open")
}

func TestRepeatedDecisionOnAClosedQuestionReachesTheWorkflow(t *testing.T) {
	// The question was answered: the status lists it no more. Sent again
	// with its id, the decision keeps its Update ID, so Temporal returns
	// the first result instead of applying anything twice.
	f := &fake{status: waiting(), result: workflows.DecisionResult{QuestionID: "q-3-approval-0", Applied: false, By: "bob"}}
	c := New(f, Options{})
	res, err := c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, QuestionID: "q-3-approval-0", Approved: true, By: "bob"})
	require.NoError(t, err)
	require.False(t, res.Applied)
	require.Equal(t, DecisionUpdateID("q-3-approval-0", "bob", "approve"), f.updates[0].UpdateID)
	require.Equal(t, "fp3-now", f.updates[0].Args[0].(workflows.ApproveSignal).Fingerprint)
}

func TestUnsignedDecisionCarriesTheTypedName(t *testing.T) {
	f := &fake{status: waiting()}
	c := New(f, Options{})
	_, err := c.Resolve(context.Background(), wf, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeRetry, By: "bob"})
	require.NoError(t, err)
	sent := f.updates[0].Args[0].(workflows.ResolveSignal)
	require.Equal(t, "bob", sent.By)
	require.Equal(t, "q-2-outcome-1", sent.QuestionID)
	require.Empty(t, sent.Signature)
	require.False(t, sent.SentAt.IsZero(), "sent_at tells this decision from a repeat (recorded unverified)")
	require.Equal(t, "run-1", sent.RunID)

	for _, by := range []string{"", "bo\x1b[2Jb", string(make([]byte, 65))} {
		_, err = c.Resolve(context.Background(), wf, workflows.ResolveSignal{Step: 2, Outcome: workflows.OutcomeRetry, By: by})
		require.ErrorIs(t, err, operators.ErrBadName)
	}
	_, err = c.Resolve(context.Background(), wf, workflows.ResolveSignal{Step: 2, Outcome: "maybe", By: "bob"})
	require.ErrorContains(t, err, "not one of succeeded, failed, retry")

	k, _ := key(t, "alice", 1)
	_, err = New(f, Options{Key: k}).Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, By: "bob"})
	require.ErrorContains(t, err, `differs from the key's operator "alice"`)
	require.Len(t, f.updates, 1)
}

func TestExplicitQuestionAndFingerprintSkipTheStatus(t *testing.T) {
	f := &fake{} // an empty status: reading it would find no question
	c := New(f, Options{})
	_, err := c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, QuestionID: "q-3-approval-1", Fingerprint: "fp3-seen", Approved: false, By: "bob", Override: true})
	require.NoError(t, err)
	require.Equal(t, DecisionUpdateID("q-3-approval-1", "bob", "reject+override"), f.updates[0].UpdateID)
	require.Equal(t, "fp3-seen", f.updates[0].Args[0].(workflows.ApproveSignal).Fingerprint)
}

func TestRejectionCarriesTheWorkflowsReason(t *testing.T) {
	f := &fake{status: waiting(), updateErr: temporal.NewApplicationError("approval by the plan's requester alice is refused (four eyes)", "DecisionRefused")}
	c := New(f, Options{})
	_, err := c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, By: "alice"})
	var rej *RejectedError
	require.ErrorAs(t, err, &rej)
	require.Equal(t, "approval by the plan's requester alice is refused (four eyes)", rej.Reason)
	require.Equal(t, "q-3-approval-1", rej.QuestionID)
	require.Equal(t, "approve refused by "+wf+" (question q-3-approval-1): approval by the plan's requester alice is refused (four eyes)", err.Error())

	f.updateErr = serviceerror.NewNotFound("workflow execution already completed")
	_, err = c.Approve(context.Background(), wf, workflows.ApproveSignal{Step: 3, Approved: true, By: "alice"})
	require.False(t, errors.As(err, &rej))
	require.ErrorContains(t, err, "the plan is not running")
}

func TestCancel(t *testing.T) {
	f := &fake{execution: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
	c := New(f, Options{})
	require.NoError(t, c.Cancel(context.Background(), wf))
	require.Equal(t, []string{wf}, f.cancels)

	f.execution = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED
	err := c.Cancel(context.Background(), wf)
	require.ErrorIs(t, err, ErrNotRunning)
	require.ErrorContains(t, err, "it ended completed; nothing to cancel")
	f.execution = enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED
	require.ErrorIs(t, c.Cancel(context.Background(), wf), ErrNotRunning)
	require.Len(t, f.cancels, 1, "an ended plan is not sent a cancel")

	f.execution = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	f.cancelErr = serviceerror.NewNotFound("workflow not found")
	require.ErrorContains(t, c.Cancel(context.Background(), wf), "nothing to cancel")
}

func TestEscalationsOldestOpenQuestionFirst(t *testing.T) {
	start := clock.Add(-24 * time.Hour)
	young := waiting()
	young.Questions = young.Questions[1:] // opened a minute ago
	old := waiting()                      // oldest question an hour ago
	list := []Escalation{
		escalation("agent-plan:young:1", start, young, nil),
		escalation("agent-plan:unreadable:1", clock.Add(-30*time.Minute), workflows.Status{}, errors.New("no worker")),
		escalation("agent-plan:old:1", start, old, nil),
	}
	SortEscalations(list)
	var ids []string
	for _, e := range list {
		ids = append(ids, e.WorkflowID)
	}
	require.Equal(t, []string{"agent-plan:old:1", "agent-plan:unreadable:1", "agent-plan:young:1"}, ids)
	require.Equal(t, clock.Add(-time.Hour), list[0].OpenSince)
	require.Len(t, list[0].Questions, 2)
	require.Len(t, list[0].Steps, 2)
	require.Equal(t, "no worker", list[1].StatusError)
}

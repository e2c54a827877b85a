package sagaclient

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentsaga/agentsaga/workflows"
)

// listing is a fake whose visibility lists plans (in pages of two) and
// counts the status queries.
type listing struct {
	fake
	plans   []*workflowpb.WorkflowExecutionInfo
	queries int
	pages   int
}

func (l *listing) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	l.pages++
	from := 0
	if len(req.GetNextPageToken()) > 0 {
		from = int(req.GetNextPageToken()[0])
	}
	to := min(from+2, len(l.plans))
	resp := &workflowservice.ListWorkflowExecutionsResponse{Executions: l.plans[from:to]}
	if to < len(l.plans) {
		resp.NextPageToken = []byte{byte(to)}
	}
	return resp, nil
}

func (l *listing) QueryWorkflow(ctx context.Context, id, runID string, q string, args ...any) (converter.EncodedValue, error) {
	l.queries++
	return l.fake.QueryWorkflow(ctx, id, runID, q, args...)
}

func listed(t *testing.T, id string, memo *workflows.OpenQuestions) *workflowpb.WorkflowExecutionInfo {
	e := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id}, StartTime: timestamppb.New(clock.Add(-2 * 3600e9))}
	if memo != nil {
		p, err := converter.GetDefaultDataConverter().ToPayload(*memo)
		require.NoError(t, err)
		e.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{workflows.MemoOpenQuestions: p}}
	}
	return e
}

// The console and `starter escalations` list every waiting question with
// one visibility query: a plan that publishes its questions in its memo is
// never asked for its status; only a plan started before it is.
func TestEscalationsReadPublishedQuestionsWithoutAStatusQuery(t *testing.T) {
	st := waiting()
	published := func(kind string, step int) *workflows.OpenQuestions {
		return &workflows.OpenQuestions{State: workflows.SagaNeedsHuman, SignedDecisions: true, Questions: []workflows.OpenQuestion{{
			Question: workflows.Question{ID: "q1-" + kind, Kind: kind, Step: step, Key: "k", OpenedAt: clock.Add(-30 * 60e9), Card: workflows.Card{Rule: "why " + kind}},
			Tool:     "apply_refund",
		}}}
	}
	l := &listing{fake: fake{status: st}, plans: []*workflowpb.WorkflowExecutionInfo{
		listed(t, "agent-plan:a:1", published(workflows.QuestionApproval, 1)),
		listed(t, "agent-plan:b:1", published(workflows.QuestionOutcome, 2)),
		listed(t, "agent-plan:old:1", nil), // started before plans published their questions
		listed(t, "agent-plan:c:1", &workflows.OpenQuestions{State: workflows.SagaNeedsHuman, Questions: []workflows.OpenQuestion{}}),
	}}
	c := New(l, Options{})
	list, err := c.Escalations(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, l.pages, "two pages of visibility")
	require.Equal(t, 1, l.queries, "only the plan without the memo is asked for its status")
	require.Len(t, list, 4)
	byID := map[string]Escalation{}
	for _, e := range list {
		byID[e.WorkflowID] = e
	}
	a := byID["agent-plan:a:1"]
	require.Equal(t, workflows.SagaNeedsHuman, a.State)
	require.True(t, a.SignedDecisions)
	require.Len(t, a.Questions, 1)
	require.True(t, clock.Add(-30*60e9).Equal(a.OpenSince), "open since its question")
	require.Equal(t, []workflows.StepStatus{{Step: 1, Key: "k", Tool: "apply_refund", Waiting: "approval", LastError: "why approval"}}, a.Steps)
	require.Equal(t, "resolve", byID["agent-plan:b:1"].Steps[0].Waiting)
	require.Len(t, byID["agent-plan:old:1"].Questions, 2, "read from its status")
	require.Empty(t, byID["agent-plan:c:1"].Questions)
}

package sagaclient

import (
	"context"
	"testing"
	"time"

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
	e := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id}, StartTime: timestamppb.New(clock.Add(-2 * time.Hour))}
	if memo != nil {
		p, err := converter.GetDefaultDataConverter().ToPayload(*memo)
		require.NoError(t, err)
		e.Memo = &commonpb.Memo{Fields: map[string]*commonpb.Payload{workflows.MemoOpenQuestions: p}}
	}
	return e
}

// The console lists every waiting question with one visibility query: a
// plan that publishes its questions in its memo is never asked for its
// status; only a plan started before it is.
func TestWaitingReadsPublishedQuestionsWithoutAStatusQuery(t *testing.T) {
	published := func(id string, opened time.Time) *workflows.OpenQuestions {
		return &workflows.OpenQuestions{State: workflows.SagaNeedsHuman, SignedDecisions: true, Questions: []workflows.QuestionIndex{{
			ID: id, Kind: workflows.QuestionOutcome, Step: 1, Key: "k-" + id, Tool: "send_email", OpenedAt: opened, Object: "to ana@example.com"}}}
	}
	l := &listing{fake: fake{status: waiting()}, plans: []*workflowpb.WorkflowExecutionInfo{
		listed(t, "agent-plan:a:1", published("qa", clock.Add(-10*time.Minute))),
		listed(t, "agent-plan:b:1", published("qb", clock.Add(-30*time.Minute))),
		listed(t, "agent-plan:old:1", nil), // started before plans published their questions
		listed(t, "agent-plan:c:1", &workflows.OpenQuestions{State: workflows.SagaNeedsHuman, Questions: []workflows.QuestionIndex{}}),
	}}
	list, err := New(l, Options{}).Waiting(context.Background())
	require.NoError(t, err)
	require.Equal(t, 2, l.pages, "two pages of visibility")
	require.Equal(t, 1, l.queries, "only the plan without the memo is asked for its status")
	var ids []string
	for _, w := range list {
		ids = append(ids, w.WorkflowID)
	}
	require.Equal(t, []string{"agent-plan:c:1", "agent-plan:old:1", "agent-plan:b:1", "agent-plan:a:1"}, ids, "oldest open question first (a plan with none: its start)")
	b := list[2]
	require.True(t, b.SignedDecisions)
	require.Equal(t, "to ana@example.com", b.Questions[0].Object)
	old := list[1]
	require.Len(t, old.Questions, 2, "read from its status and indexed")
	require.Equal(t, "q-2-outcome-1", old.Questions[0].ID)
	require.Empty(t, list[0].Questions)
}

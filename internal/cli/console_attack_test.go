package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// A plan's index is a memo any client starting a workflow can set: when its
// plan's status cannot be read, the page shows the index's own text
// (object, reason, requester, key). That text is masked and bounded as a
// card's is, never shown as the memo says it.
func TestConsoleIndexLinesAreMaskedAndBounded(t *testing.T) {
	sc := statusClient{statuses: map[string]workflows.Status{}} // no worker answers
	c, err := newConsole(sagaclient.New(sc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	huge := strings.Repeat("x", 1<<20)
	forged := workflows.QuestionIndex{
		ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1, Key: "k" + huge,
		Object: "card 4111111111111111 " + huge, Reason: "pay 4242424242424242", RequestedBy: "bob " + huge,
	}
	it := c.item(sagaclient.Waiting{WorkflowID: "agent-plan:forged:1"}, forged, time.Now())
	page, _ := c.complete(t.Context(), []consoleItem{it})
	require.Len(t, page, 1)
	shown := page[0]
	for _, l := range shown.Lines {
		require.False(t, strings.Contains(l.Value, "4111111111111111") || strings.Contains(l.Value, "4242424242424242"), "%s shows a card number", l.Label)
		require.LessOrEqual(t, len(l.Value), workflows.MaxCardLineLen+3, l.Label)
	}
	forged.ID, forged.Kind, forged.Answers = "q"+huge, "k"+huge, make([]string, 100000)
	wide := c.item(sagaclient.Waiting{WorkflowID: "agent-plan:forged:2"}, forged, time.Now())
	require.LessOrEqual(t, len(wide.QuestionID), workflows.MaxQuestionIDLen+3)
	require.LessOrEqual(t, len(wide.Kind), workflows.MaxCardLineLen+3)
	require.LessOrEqual(t, len(wide.Answers), maxIndexAnswers)
	for name, v := range map[string]string{"object": shown.Object, "requester": shown.Requester, "key": shown.Key} {
		require.False(t, strings.Contains(v, "4111111111111111"), "%s shows a card number", name)
		require.LessOrEqual(t, len(v), workflows.MaxCardLineLen+3, name)
	}
}

// flakyListing lists one plan with one published question, then fails.
type flakyListing struct {
	statusClient
	calls int
}

func (f *flakyListing) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.calls++
	if f.calls > 1 {
		return nil, errors.New("visibility unavailable")
	}
	memo, err := converter.GetDefaultDataConverter().ToPayload(workflows.OpenQuestions{
		State: workflows.SagaWaitingApproval, Questions: []workflows.QuestionIndex{{ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1}},
	})
	if err != nil {
		return nil, err
	}
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{{
		Execution: &commonpb.WorkflowExecution{WorkflowId: "agent-plan:a:1"},
		Memo:      &commonpb.Memo{Fields: map[string]*commonpb.Payload{workflows.MemoOpenQuestions: memo}},
	}}}, nil
}

// A listing that fails does not wipe the open questions the latest good
// listing found: the page keeps them (and says the listing failed) instead
// of showing an empty queue until the next listing succeeds.
func TestConsoleFailedListingKeepsTheLastQuestions(t *testing.T) {
	clock := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	defer func(orig func() time.Time) { now = orig }(now)
	now = func() time.Time { return clock }
	fc := &flakyListing{}
	c, err := newConsole(sagaclient.New(fc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	wl, err := c.waiting(t.Context())
	require.NoError(t, err)
	require.NoError(t, wl.err)
	require.Len(t, wl.list, 1)

	clock = clock.Add(2 * listFresh)
	_, _ = c.waiting(t.Context()) // starts the listing that fails
	c.listMu.Lock()
	done := c.listing
	c.listMu.Unlock()
	if done != nil {
		<-done
	}
	wl, err = c.waiting(t.Context())
	require.NoError(t, err)
	require.Error(t, wl.err, "the page says the listing failed")
	require.Len(t, wl.list, 1, "and still shows what the last good listing found")
}

// A workflow any client starts with AgentSagaNeedsHuman=true and a forged
// memo of old questions (opened_at 1970, no worker to answer its status)
// does not take the "mine" page's slots ahead of a real question the
// operator can decide: the page is filled past what its status cannot
// confirm.
func TestConsoleForgedIndexDoesNotCrowdOutMine(t *testing.T) {
	card := workflows.Card{Change: "apply_refund: refund", Key: "s:1:1:apply_refund"}
	real := workflows.Question{ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1, Key: card.Key, Answers: []string{"approve", "reject"}, Card: card, OpenedAt: time.Now()}
	sc := statusClient{statuses: map[string]workflows.Status{"agent-plan:real:1": {WorkflowID: "agent-plan:real:1", Questions: []workflows.Question{real}}}}
	c, err := newConsole(sagaclient.New(sc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	at := time.Now()
	items := []consoleItem{c.item(sagaclient.Waiting{WorkflowID: "agent-plan:real:1"}, workflows.IndexOf(real, "apply_refund"), at)}
	for i := range 3 {
		items = append(items, c.item(sagaclient.Waiting{WorkflowID: fmt.Sprintf("forged:%d", i)},
			workflows.QuestionIndex{ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1, OpenedAt: time.Unix(0, 0)}, at))
	}
	f, ferr := parseFind(url.Values{"size": {"3"}})
	require.NoError(t, ferr)
	page, total, _, _ := c.pageOf(t.Context(), items, f)
	require.Equal(t, 4, total, "the forged entries match (they are listed)")
	var mine []string
	for _, it := range page {
		if it.MayDecide {
			mine = append(mine, it.WorkflowID)
		}
	}
	require.Contains(t, mine, "agent-plan:real:1", "the real question is on the first page of mine")
}

// countingStatus counts the status queries.
type countingStatus struct {
	statusClient
	queries *atomic.Int32
}

func (s countingStatus) QueryWorkflow(ctx context.Context, id, runID, name string, args ...any) (converter.EncodedValue, error) {
	s.queries.Add(1)
	return s.statusClient.QueryWorkflow(ctx, id, runID, name, args...)
}

// A question shown once whose plan then leaves the listing without a
// decision (terminated, or a forged index that is gone, or a plan whose
// status cannot be read) is asked about for maxSettleReads polls, not on
// every poll until maxSeen other questions evict it.
func TestConsoleSettleGivesUpOnAQuestionClosedWithoutDecision(t *testing.T) {
	n := &atomic.Int32{}
	sc := countingStatus{statusClient{statuses: map[string]workflows.Status{"agent-plan:gone:1": {WorkflowID: "agent-plan:gone:1"}}}, n}
	c, err := newConsole(sagaclient.New(sc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	c.remember([]consoleItem{{WorkflowID: "agent-plan:gone:1", QuestionID: "q1-step1-approval"}})
	for range 10 {
		c.settle(t.Context(), map[string]bool{})
	}
	require.LessOrEqual(t, n.Load(), int32(3), "status queries for one plan gone without a decision, over 10 polls")
}

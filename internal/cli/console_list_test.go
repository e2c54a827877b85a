package cli

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// listingClient is a Temporal client whose visibility lists no plan, one
// listing at a time when gate is set (each waits for a value on gate).
type listingClient struct {
	client.Client
	lists atomic.Int32
	gate  chan struct{}
}

func (l *listingClient) ListWorkflow(ctx context.Context, _ *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	l.lists.Add(1)
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{}}, nil
}

// The console lists the open questions once for many polls and searches:
// the first request waits for a listing, later ones are answered from the
// latest while it is younger than listFresh; an older one still answers
// while the next is made in the background, and a decision made here
// starts a new one.
func TestConsoleListsOnceForManyRequests(t *testing.T) {
	clock := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	defer func(orig func() time.Time) { now = orig }(now)
	now = func() time.Time { return clock }
	fc := &listingClient{gate: make(chan struct{})}
	c, err := newConsole(sagaclient.New(fc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	ctx := t.Context()

	first := make(chan waitingList)
	go func() {
		wl, err := c.waiting(ctx)
		require.NoError(t, err)
		first <- wl
	}()
	fc.gate <- struct{}{} // the first listing ends only now
	wl := <-first
	require.Equal(t, clock, wl.at)
	require.Equal(t, int32(1), fc.lists.Load())

	clock = clock.Add(listFresh / 2)
	again, err := c.waiting(ctx)
	require.NoError(t, err)
	require.Equal(t, wl.at, again.at, "a fresh listing answers")
	c.listMu.Lock()
	require.Nil(t, c.listing, "and nothing is listed again")
	c.listMu.Unlock()

	clock = clock.Add(listFresh)
	stale, err := c.waiting(ctx)
	require.NoError(t, err)
	require.Equal(t, wl.at, stale.at, "an old listing still answers at once")
	c.listMu.Lock()
	done := c.listing
	c.listMu.Unlock()
	require.NotNil(t, done, "while the next is made")
	_, err = c.waiting(ctx)
	require.NoError(t, err)
	fc.gate <- struct{}{}
	<-done
	require.Equal(t, int32(2), fc.lists.Load(), "one listing under way at a time")
	next, err := c.waiting(ctx)
	require.NoError(t, err)
	require.Equal(t, clock, next.at)

	c.relist() // as a decision does
	fc.gate = nil
	_, err = c.waiting(ctx)
	require.NoError(t, err)
	c.listMu.Lock()
	done = c.listing
	c.listMu.Unlock()
	if done != nil {
		<-done
	}
	require.Equal(t, int32(3), fc.lists.Load(), "a decision made here lists again at the next poll")
}

// statusClient answers the status query from statuses by workflow ID (an
// ID it does not hold: no worker answers).
type statusClient struct {
	client.Client
	statuses map[string]workflows.Status
}

func (s statusClient) QueryWorkflow(_ context.Context, id, _ string, _ string, _ ...any) (converter.EncodedValue, error) {
	st, ok := s.statuses[id]
	if !ok {
		return nil, errors.New("no worker answered the query")
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(st)
	if err != nil {
		return nil, err
	}
	return client.NewValue(p), nil
}

func (s statusClient) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}, nil
}

// The page's questions come from their plans' status, not from the index
// a plan's memo holds (any client starting a workflow could set a memo): a
// question the status does not hold is left out, and one whose status
// cannot be read is shown without buttons, saying why.
func TestConsolePageIsWhatTheStatusSays(t *testing.T) {
	card := workflows.Card{Change: "apply_refund: refund", Object: "order_id ord_1", Rule: "amount over 500.00 EUR", Key: "s:1:1:apply_refund"}
	real := workflows.Question{ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1, Key: card.Key, Answers: []string{"approve", "reject"}, Card: card}
	sc := statusClient{statuses: map[string]workflows.Status{
		"agent-plan:real:1":   {WorkflowID: "agent-plan:real:1", Questions: []workflows.Question{real}},
		"agent-plan:forged:1": {WorkflowID: "agent-plan:forged:1"},
	}}
	c, err := newConsole(sagaclient.New(sc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	index := func(id string) consoleItem {
		return c.item(sagaclient.Waiting{WorkflowID: id}, workflows.QuestionIndex{ID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1, Key: "k", Object: "order_id ord_X"}, time.Now())
	}
	page, problems := c.complete(t.Context(), []consoleItem{index("agent-plan:real:1"), index("agent-plan:forged:1"), index("agent-plan:down:1")})
	require.Len(t, page, 2, "the question its plan's status does not hold is left out")
	require.Equal(t, "agent-plan:real:1", page[0].WorkflowID)
	require.Equal(t, cardLines(card), page[0].Lines, "the card as the status shows it")
	require.Equal(t, workflows.CardDigest(card), page[0].CardDigest)
	require.True(t, page[0].MayDecide)
	require.Equal(t, "agent-plan:down:1", page[1].WorkflowID)
	require.False(t, page[1].MayDecide, "no buttons for what only the index vouches for")
	require.Contains(t, page[1].Unconfirmed, "could not be read")
	require.Len(t, problems, 1)
	require.Contains(t, problems[0], "agent-plan:down:1")
}

// A console lists as it starts, so the page's first poll finds the listing
// done or under way instead of starting it.
func TestConsoleListsAsItStarts(t *testing.T) {
	fc := &listingClient{gate: make(chan struct{})}
	c, err := newConsole(sagaclient.New(fc, sagaclient.Options{}), "alice", true, nil, time.Second, func(id string) string { return id }, "127.0.0.1:1")
	require.NoError(t, err)
	c.prime()
	c.prime() // once
	fc.gate <- struct{}{}
	wl, err := c.waiting(t.Context())
	require.NoError(t, err)
	require.NoError(t, wl.err)
	require.Equal(t, int32(1), fc.lists.Load(), "the first poll used the listing the start made")
}

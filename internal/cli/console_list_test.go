package cli

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/sagaclient"
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

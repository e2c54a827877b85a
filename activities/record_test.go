package activities_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
)

// The worker stops (the activity's context is cancelled) just as the
// provider answers: the outcome is still recorded in the ledger, so the
// sure effect never becomes an unknown one for a person.
func TestOutcomeRecordedWhenTheWorkerStops(t *testing.T) {
	bg, stop := context.WithCancel(context.Background())
	defer stop()
	ft := writeTool("send_email", tool.NonIdempotentWrite)
	ft.execute = func(n int, call tool.Call) (tool.Result, error) {
		stop() // the worker's hard stop cancels the activity's context
		return tool.Result{ExternalID: "msg_1", Data: call.Args}, nil
	}
	bg2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	failing := writeTool("apply_refund", tool.NonIdempotentWrite)
	failing.execute = func(n int, call tool.Call) (tool.Result, error) {
		stop2()
		return tool.Result{}, tool.Fail(tool.KindRejected, "declined", context.Canceled)
	}
	e := newEnv(t, nil, ft, failing)
	e.te.SetWorkerOptions(worker.Options{BackgroundActivityContext: bg})

	req := request(t, "s:1:1:send_email", "send_email", `{"order_id":"o-1","amount_minor":100}`)
	out, err := e.execute(req)
	require.NoError(t, err, "the provider answered: the call succeeded")
	require.Equal(t, "msg_1", out.ExternalID)
	op, err := e.store.Get(context.Background(), req.Key)
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status, "recorded on a context the stop does not cancel")
	require.Equal(t, "msg_1", op.ExternalID)

	// A failed call's outcome is recorded on the same detached context.
	e.te.SetWorkerOptions(worker.Options{BackgroundActivityContext: bg2})
	req = request(t, "s:1:2:apply_refund", "apply_refund", `{"order_id":"o-1","amount_minor":100}`)
	_, err = e.execute(req)
	require.Error(t, err)
	op, err = e.store.Get(context.Background(), req.Key)
	require.NoError(t, err)
	require.Equal(t, ledger.FailedFinal, op.Status)
}

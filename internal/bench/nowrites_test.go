package bench_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/bench"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// The no-commits side of a commit split runs plans to the end and writes
// nothing to the ledger: its figures are the engine without its commits.
func TestWithoutLedgerWritesRecordsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{UIPort: -1, NoWorker: true})
	require.NoError(t, err)
	defer st.Close()
	// The no-commits worker as bench.Run starts it for Options.CommitSplit.
	w, err := st.WorkerOn(bench.NoCommitsTaskQueue, bench.WithoutLedgerWrites(st.Ledger))
	require.NoError(t, err)
	require.NoError(t, w.Start())
	defer w.Stop()
	plans := st.PlansOn(bench.NoCommitsTaskQueue)
	p := plan.Plan{SessionID: "nowrites", Turn: 1, Steps: []plan.Step{{Tool: demotools.CreateTicket, Args: []byte(`{"subject":"measured"}`)}}}
	run, err := plans.Start(ctx, p)
	require.NoError(t, err)
	s, err := plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, s.State)
	_, err = st.Ledger.Get(ctx, s.Steps[0].Key)
	require.True(t, errors.Is(err, ledger.ErrNotFound), "the step's key reached the ledger: %v", err)

	// And it keeps no promise: the same key executes again.
	nw := bench.WithoutLedgerWrites(st.Ledger)
	req := ledger.ClaimRequest{Key: "k:1:1:create_ticket", ActionType: "create_ticket", RequestHash: "h", Executor: "e", Lease: time.Minute}
	for range 2 {
		c, err := nw.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, ledger.Execute, c.Verdict)
	}
}

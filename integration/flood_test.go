package integration

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/workflows"
)

// envFloodSignals sets how many refused signals TestFloodOfRefusedSignals
// sends (default floodSignals).
const envFloodSignals = "AGENTSAGA_FLOOD_SIGNALS"

// floodSignals is the default flood: 10,000 signals take about half a
// minute on a 2-core machine.
const floodSignals = 10_000

// floodPayload is the size of each refused signal's oversize fingerprint
// and reason: eight times the fingerprint limit, half the reason limit.
const floodPayload = 1024

// Item 13 of issue 16: anyone who can signal may send a flood of refused
// decisions with oversize fields. The plan stays alive, its status
// readable and small, what it records for refusals bounded (the first
// MaxRefusedRecorded, clipped, then only a count), and its history grows
// by the signals themselves and their workflow tasks, nothing else; after
// the flood a proper approval still completes it, with one refund at the
// provider and the invoice posted before kept.
//
// Long run (a bigger flood): AGENTSAGA_FLOOD_SIGNALS=20000 go test
// ./integration/ -run TestFloodOfRefusedSignals -count=1 -timeout 20m
func TestFloodOfRefusedSignals(t *testing.T) {
	n := floodSignals
	if v := os.Getenv(envFloodSignals); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, envFloodSignals)
	}
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 8*time.Minute)
	p := newPlan("it-flood",
		step(t, "create_invoice", map[string]any{"customer_id": "cus_ana", "order_id": "ord_it_flood", "amount_minor": 4200, "currency": "EUR", "description": "flood test"}),
		step(t, "apply_refund", map[string]any{"order_id": "ord_it_flood", "amount_minor": 60000, "currency": "EUR", "reason": "flood test"}))
	before := allEffects(ctx, t, sb)
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(2, workflows.QuestionApproval))
	q := waiting.Questions[0]
	start, err := st.Client.DescribeWorkflowExecution(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)
	startBytes := start.GetWorkflowExecutionInfo().GetHistorySizeBytes()

	big := strings.Repeat("f", floodPayload)
	flood := workflows.ApproveSignal{Step: 2, QuestionID: q.ID, Fingerprint: big, By: "mallory", Approved: true, Reason: big}
	payload, err := json.Marshal(flood)
	require.NoError(t, err)
	began := time.Now()
	var sent atomic.Int64
	// The first MaxRefusedRecorded arrive, and are handled, before the
	// flood: a fast flood can take the history past RefusalHistoryBound
	// before the workflow has handled that many, and then records fewer.
	first := min(n, workflows.MaxRefusedRecorded)
	for i := range first {
		require.NoError(t, st.Client.SignalWorkflow(ctx, run.WorkflowID, "", workflows.SignalApprove, flood), "signal %d", i)
		sent.Add(1)
	}
	waitStatus(ctx, t, st, run.WorkflowID, func(s workflows.Status) bool { return s.RefusedSignals == first })
	var wg sync.WaitGroup
	const senders = 8
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := first + w; i < n; i += senders {
				if err := st.Client.SignalWorkflow(ctx, run.WorkflowID, "", workflows.SignalApprove, flood); err != nil {
					t.Errorf("signal %d: %v", i, err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, n, sent.Load())
	s := waitStatus(ctx, t, st, run.WorkflowID, func(s workflows.Status) bool { return s.RefusedSignals == n })
	t.Logf("%d refused signals of %d bytes sent and refused in %s", n, len(payload), time.Since(began).Round(time.Millisecond))

	// The status is readable and small; what it records is bounded.
	require.Equal(t, workflows.SagaWaitingApproval, s.State)
	require.Len(t, s.Steps[1].Decisions, workflows.MaxRefusedRecorded)
	for _, d := range s.Steps[1].Decisions {
		require.Contains(t, d.Refused, "fingerprint is 1024 bytes, the limit is 128")
		require.LessOrEqual(t, len(d.Note), workflows.MaxRefusedNoteLen+len("…"))
	}
	raw, err := json.Marshal(s)
	require.NoError(t, err)
	require.Less(t, len(raw), 128<<10, "status of %d bytes", len(raw))

	// The history holds the signals as Temporal stores them and the tasks
	// that took them, and the first MaxRefusedRecorded audit records:
	// per signal, its payload and at most 1 KB more.
	desc, err := st.Client.DescribeWorkflowExecution(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)
	info := desc.GetWorkflowExecutionInfo()
	grew := info.GetHistorySizeBytes() - startBytes
	bound := int64(n)*int64(len(payload)+1024) + 1<<20
	t.Logf("history: %d events, %d bytes (grew %d, bound %d)", info.GetHistoryLength(), info.GetHistorySizeBytes(), grew, bound)
	require.Less(t, grew, bound)
	require.Less(t, info.GetHistoryLength(), int64(4*n+1000), "a signal costs at most its event and one workflow task")

	// A proper approval still completes the plan.
	res, err := st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 2, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "bob", Approved: true, Reason: "after the flood"})
	require.NoError(t, err)
	require.True(t, res.Applied)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	after := allEffects(ctx, t, sb)
	require.Equal(t, countKind(before, "refund")+1, countKind(after, "refund"), "one refund at the provider")
	require.Equal(t, countKind(before, "invoice")+1, countKind(after, "invoice"), "the invoice stays posted")
	require.Equal(t, countKind(before, "invoice_storno"), countKind(after, "invoice_storno"), "and is not reversed")

	trail, err := st.Ledger.Decisions(context.WithoutCancel(ctx), p.Key(2))
	require.NoError(t, err)
	require.Len(t, trail, workflows.MaxRefusedRecorded+1, "the recorded refusals and bob's approval")
}

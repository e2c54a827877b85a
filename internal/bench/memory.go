package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// settlePoll is how often memory's readiness checks are repeated.
const settlePoll = 50 * time.Millisecond

func (r *runner) memory(ctx context.Context, n int) (Memory, error) {
	m := Memory{Plans: n}
	// Plain first, then agentsaga; each against its own baseline.
	heap, rss, settle, _, err := r.waiting(ctx, n, false)
	if err != nil {
		return m, err
	}
	m.PlainHeapKBPer, m.PlainRSSKBPer, m.PlainSettleMs = heap, rss, settle
	heap, rss, settle, errs, err := r.waiting(ctx, n, true)
	if err != nil {
		return m, err
	}
	m.AgentsagaHeapKBPer, m.AgentsagaRSSKBPer, m.AgentsagaSettleMs, m.AgentsagaStartErrors = heap, rss, settle, errs
	m.HeapRatio = ratio(m.AgentsagaHeapKBPer, m.PlainHeapKBPer)
	return m, nil
}

// waiting starts n waiting workflows of one side, measures the growth per
// workflow and terminates them.
func (r *runner) waiting(ctx context.Context, n int, agentsaga bool) (heapKB, rssKB, settleMs float64, startErrs int, err error) {
	heap0, rss0 := memNow()
	ids := make([]string, 0, n)
	t0 := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	var firstErr error
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			id, err := r.startWaiting(ctx, agentsaga)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				startErrs++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			ids = append(ids, id)
		}()
	}
	wg.Wait()
	if len(ids) == 0 {
		return 0, 0, 0, startErrs, fmt.Errorf("bench: no waiting plan started: %w", firstErr)
	}
	for _, id := range ids {
		if err := r.awaitWaiting(ctx, id, agentsaga); err != nil {
			return 0, 0, 0, startErrs, err
		}
	}
	settleMs = ms(time.Since(t0))
	heap1, rss1 := memNow()
	heapKB = round(float64(int64(heap1)-int64(heap0))/1024/float64(len(ids)), 2)
	rssKB = round(float64(int64(rss1)-int64(rss0))/1024/float64(len(ids)), 2)
	for _, id := range ids {
		if err := r.st.Client.TerminateWorkflow(ctx, id, "", "bench: memory measured"); err != nil {
			return heapKB, rssKB, settleMs, startErrs, fmt.Errorf("bench: terminate %s: %w", id, err)
		}
	}
	return heapKB, rssKB, settleMs, startErrs, nil
}

func (r *runner) startWaiting(ctx context.Context, agentsaga bool) (string, error) {
	if agentsaga {
		args, _ := json.Marshal(map[string]any{"customer_id": "cus_ana", "amount_minor": demotools.PaymentApprovalAboveMinor + 100,
			"currency": "EUR", "payment_method": "tok_visa"})
		p := plan.Plan{SessionID: fmt.Sprintf("bench-%s-w%d", r.tag, r.next()), Turn: 1,
			Steps: []plan.Step{{Tool: demotools.CreatePayment, Args: args}}}
		run, err := r.st.Plans.Start(ctx, p)
		return run.WorkflowID, err
	}
	id := fmt.Sprintf("bench-plain-wait:%s:%d", r.tag, r.next())
	_, err := r.st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: PlainTaskQueue}, PlainWaitWorkflow, PlainInput{Key: id})
	return id, err
}

// awaitWaiting returns once the workflow waits: an agentsaga plan reports
// waiting_approval; a plain one has completed its first workflow task.
func (r *runner) awaitWaiting(ctx context.Context, id string, agentsaga bool) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if agentsaga {
			s, err := r.st.Plans.Status(ctx, id)
			if err == nil && s.State == workflows.SagaWaitingApproval {
				return nil
			}
		} else {
			d, err := r.st.Client.DescribeWorkflowExecution(ctx, id, "")
			if err == nil && d.GetPendingWorkflowTask() == nil && d.GetWorkflowExecutionInfo().GetHistoryLength() >= 4 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s did not reach its wait within two minutes; is the worker running?", id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %w", ctx.Err())
		case <-time.After(settlePoll):
		}
	}
}

// memNow runs the GC and returns the Go heap in use and the resident set
// size, in bytes.
func memNow() (heap, rss uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, rssBytes()
}

// rssBytes reads VmRSS from /proc/self/status (0 where there is none).
func rssBytes() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

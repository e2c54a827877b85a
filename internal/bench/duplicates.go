package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/workflows"
)

// mailOp is the sandbox's name of the mail relay's send operation.
const mailOp = "mail.send"

// duplicates starts one send_email plan n times at once and counts what
// reached the mail relay, which has no idempotency key: every request that
// arrives is one more email.
func (r *runner) duplicates(ctx context.Context, n int) (Duplicates, error) {
	d := Duplicates{Starts: n}
	sb := sandbox.NewClient(r.st.SandboxURL, nil).WithToken(r.st.SandboxToken)
	calls0, err := sb.Calls(ctx, mailOp)
	if err != nil {
		return d, fmt.Errorf("bench: read the sandbox's call counts: %w", err)
	}
	mails0, err := sb.Effects(ctx, "mail")
	if err != nil {
		return d, fmt.Errorf("bench: read the mail relay's store: %w", err)
	}
	args, _ := json.Marshal(map[string]string{"to": "ana@example.com", "subject": "bench " + r.tag, "body": "one email, started many times"})
	p := plan.Plan{SessionID: "bench-" + r.tag + "-dup", Turn: 1, Steps: []plan.Step{{Tool: demotools.SendEmail, Args: args}}}
	runs := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	t0 := time.Now()
	var firstErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			run, err := r.st.Plans.Start(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				d.StartErrors++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			runs[run.RunID] = true
		}()
	}
	close(gate)
	wg.Wait()
	d.RunIDs = len(runs)
	if d.StartErrors > 0 {
		r.o.Logger.Warn("bench: concurrent starts failed", "failed", d.StartErrors, "first_error", firstErr)
	}
	s, err := r.st.Plans.Wait(ctx, p.WorkflowID())
	if err != nil {
		return d, err
	}
	d.Sec = round(time.Since(t0).Seconds(), 2)
	if s.State != workflows.SagaSucceeded {
		return d, fmt.Errorf("bench: the duplicated plan %s ended %s, not succeeded", p.WorkflowID(), s.State)
	}
	calls1, err := sb.Calls(ctx, mailOp)
	if err != nil {
		return d, fmt.Errorf("bench: read the sandbox's call counts: %w", err)
	}
	mails1, err := sb.Effects(ctx, "mail")
	if err != nil {
		return d, fmt.Errorf("bench: read the mail relay's store: %w", err)
	}
	d.ProviderCalls = calls1[mailOp] - calls0[mailOp]
	d.Effects = len(mails1) - len(mails0)
	d.Duplicates = max(0, d.Effects-1)
	return d, nil
}

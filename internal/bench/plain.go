package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/httptool"
)

// Names of the plain side, on a task queue of its own so that the two sides
// never share pollers.
const (
	PlainTaskQueue    = "agentsaga-bench-plain"
	PlainWorkflow     = "BenchPlainTickets"
	PlainWaitWorkflow = "BenchPlainWait"
	plainActivity     = "BenchPlainCreateTicket"
	plainSignal       = "approve"
)

// PlainInput is the plain workflow's argument: one create_ticket call per
// subject, one after another, each under key Key:i (as agentsaga keys its
// steps).
type PlainInput struct {
	Key      string   `json:"key"`
	Subjects []string `json:"subjects"`
}

// ticketCall is one plain activity's argument.
type ticketCall struct {
	Key     string `json:"key"`
	Subject string `json:"subject"`
}

// plainTickets is the plain workflow: the same CRM calls as the agentsaga
// plan, as plain activities (no ledger, no saga state).
func plainTickets(ctx workflow.Context, in PlainInput) ([]string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 2},
	})
	ids := make([]string, 0, len(in.Subjects))
	for i, s := range in.Subjects {
		var id string
		if err := workflow.ExecuteActivity(ctx, plainActivity, ticketCall{Key: fmt.Sprintf("%s:%d", in.Key, i+1), Subject: s}).Get(ctx, &id); err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// plainWait waits for one signal: the plain counterpart of a plan waiting
// for an approval.
func plainWait(ctx workflow.Context, in PlainInput) error {
	workflow.GetSignalChannel(ctx, plainSignal).Receive(ctx, nil)
	return nil
}

// plainActivities makes the CRM call with the HTTP client code the
// create_ticket tool uses (package httptool), so the two sides differ by
// agentsaga alone.
type plainActivities struct{ crm *httptool.Client }

func (a plainActivities) createTicket(ctx context.Context, c ticketCall) (string, error) {
	raw, err := a.crm.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: "/v1/tickets", Key: c.Key,
		Body: map[string]string{"external_ref": c.Key, "subject": c.Subject}})
	if err != nil {
		return "", err
	}
	var t struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &t); err != nil || t.ID == "" {
		return "", fmt.Errorf("bench: the CRM answered without a ticket id: %s", raw)
	}
	return t.ID, nil
}

// startPlainWorker starts the plain side's worker on c.
func startPlainWorker(c client.Client, sandboxURL string) (worker.Worker, error) {
	w := worker.New(c, PlainTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(plainTickets, workflow.RegisterOptions{Name: PlainWorkflow})
	w.RegisterWorkflowWithOptions(plainWait, workflow.RegisterOptions{Name: PlainWaitWorkflow})
	a := plainActivities{crm: httptool.New(sandboxURL+"/crm", nil)}
	w.RegisterActivityWithOptions(a.createTicket, activity.RegisterOptions{Name: plainActivity})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the plain worker: %w", err)
	}
	return w, nil
}

// Package demo runs the product's stories on a running stack, with faults
// injected into the sandbox providers, and checks every claim by counting
// effects in the providers' own stores:
//
//	(a) refund: query_order -> check_refund_policy -> apply_refund whose
//	    response is lost after commit; ends in exactly one refund.
//	(b) saga: invoice -> payment -> ticket rejected for good; ends in storno
//	    of payment and invoice.
//	(c) email whose response is lost, with no lookup: needs_human, resolved
//	    by the `resolve` signal as an operator would.
//	(d) the refund again with a changed amount: conflict, no call.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// Report is what the demo saw.
type Report struct {
	UI      string  `json:"ui,omitempty"`
	Stories []Story `json:"stories"`
	OK      bool    `json:"ok"`
}

// Story is one story's outcome.
type Story struct {
	Name       string              `json:"name"`
	Title      string              `json:"title"`
	WorkflowID string              `json:"workflow_id"`
	State      workflows.SagaState `json:"state,omitempty"`
	Steps      []Step              `json:"steps,omitempty"`
	Notes      []string            `json:"notes,omitempty"`
	Checks     []Check             `json:"checks"`
}

// Step is one step as the workflow reported it.
type Step struct {
	Key          string `json:"key"`
	State        string `json:"state"`
	Attempts     int    `json:"attempts"`
	ExternalID   string `json:"external_id,omitempty"`
	Compensation string `json:"compensation,omitempty"`
}

// Check is one claim compared with what the providers' stores hold.
type Check struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	OK   bool   `json:"ok"`
}

func (s *Story) check(what string, want, got any) {
	w, g := fmt.Sprint(want), fmt.Sprint(got)
	s.Checks = append(s.Checks, Check{What: what, Want: w, Got: g, OK: w == g})
}

func (s *Story) record(st workflows.Status) {
	s.State = st.State
	s.Steps = nil
	for _, x := range st.Steps {
		line := Step{Key: x.Key, State: string(x.State), Attempts: x.Attempts, ExternalID: x.ExternalID}
		if x.Compensation != nil {
			line.Compensation = fmt.Sprintf("%s %s (%s)", x.Compensation.Key, x.Compensation.State, x.Compensation.ExternalID)
		}
		s.Steps = append(s.Steps, line)
	}
}

type runner struct {
	st *devstack.Stack
	sb *sandbox.Client
}

// Run runs the four stories on st and returns the report; Report.OK is false
// when any count differs from what the story promises.
func Run(ctx context.Context, st *devstack.Stack) (Report, error) {
	r := runner{st: st, sb: sandbox.NewClient(st.SandboxURL, nil)}
	rep := Report{UI: st.Server.UIURL()}
	for _, story := range []func(context.Context) (Story, error){r.refund, r.saga, r.email, r.conflict} {
		s, err := story(ctx)
		if err != nil {
			return rep, err
		}
		rep.Stories = append(rep.Stories, s)
	}
	rep.OK = true
	for _, s := range rep.Stories {
		for _, c := range s.Checks {
			rep.OK = rep.OK && c.OK
		}
	}
	return rep, nil
}

func mustPlan(session string, steps ...plan.Step) plan.Plan {
	return plan.Plan{SessionID: session, Turn: 1, RequestID: "demo", Steps: steps}
}

func step(tool string, args map[string]any) plan.Step {
	b, _ := json.Marshal(args)
	return plan.Step{Tool: tool, Args: b}
}

func refundPlan(amount int) plan.Plan {
	return mustPlan("demo-refund",
		step("query_order", map[string]any{"order_id": "ord_1001"}),
		step("check_refund_policy", map[string]any{"order_id": "ord_1001", "amount_minor": amount}),
		step("apply_refund", map[string]any{"order_id": "ord_1001", "amount_minor": amount, "currency": "EUR", "reason": "arrived damaged"}),
	)
}

func (r runner) count(ctx context.Context, kind string) (int, error) {
	effects, err := r.sb.Effects(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("read sandbox effects: %w", err)
	}
	n := 0
	for _, e := range effects {
		if e.Kind == kind {
			n++
		}
	}
	return n, nil
}

func (r runner) calls(ctx context.Context, op string) (int, error) {
	m, err := r.sb.Calls(ctx, op)
	if err != nil {
		return 0, fmt.Errorf("read sandbox calls: %w", err)
	}
	return m[op], nil
}

func (r runner) startAndWait(ctx context.Context, p plan.Plan) (workflows.Status, error) {
	run, err := r.st.Plans.Start(ctx, p)
	if err != nil {
		return workflows.Status{}, err
	}
	return r.st.Plans.Wait(ctx, run.WorkflowID)
}

func (r runner) refund(ctx context.Context) (Story, error) {
	s := Story{Name: "a", Title: "refund whose response is lost after commit", WorkflowID: refundPlan(12900).WorkflowID()}
	if err := r.sb.Fault(ctx, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop, Count: 1}); err != nil {
		return s, err
	}
	st, err := r.startAndWait(ctx, refundPlan(12900))
	if err != nil {
		return s, err
	}
	s.record(st)
	s.Notes = append(s.Notes, "refunds.create committed and the connection was closed before the answer; the step was UNKNOWN and reconciled by key")
	refunds, err := r.count(ctx, "refund")
	if err != nil {
		return s, err
	}
	sent, err := r.calls(ctx, "refunds.create")
	if err != nil {
		return s, err
	}
	s.check("plan state", workflows.SagaSucceeded, st.State)
	s.check("apply_refund state", "succeeded", st.Steps[2].State)
	s.check("refunds in the acquirer's store", 1, refunds)
	s.check("refund requests sent", 1, sent)
	return s, nil
}

func (r runner) saga(ctx context.Context) (Story, error) {
	p := mustPlan("demo-saga",
		step("create_invoice", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1002", "amount_minor": 4900, "currency": "EUR", "description": "express delivery"}),
		step("create_payment", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1002", "amount_minor": 4900, "currency": "EUR", "payment_method": "tok_visa"}),
		step("create_ticket", map[string]any{"subject": "Schedule express delivery", "order_id": "ord_1002", "priority": "high"}),
	)
	s := Story{Name: "b", Title: "invoice -> payment -> ticket rejected for good: storno of payment and invoice", WorkflowID: p.WorkflowID()}
	if err := r.sb.Fault(ctx, sandbox.FaultSpec{Op: "tickets.create", Fault: sandbox.Reject, Count: 1, Status: 403, Code: "crm_queue_closed", Message: "the delivery queue is closed"}); err != nil {
		return s, err
	}
	st, err := r.startAndWait(ctx, p)
	if err != nil {
		return s, err
	}
	s.record(st)
	s.check("plan state", workflows.SagaCompensated, st.State)
	for kind, want := range map[string]int{"invoice": 1, "invoice_storno": 1, "payment": 1, "payment_reversal": 1, "ticket": 0} {
		got, err := r.count(ctx, kind)
		if err != nil {
			return s, err
		}
		s.check(kind+" rows in the providers' stores", want, got)
	}
	return s, nil
}

func (r runner) email(ctx context.Context) (Story, error) {
	p := mustPlan("demo-email",
		step("query_order", map[string]any{"order_id": "ord_1001"}),
		step("send_email", map[string]any{"to": "ana@example.com", "subject": "Your refund", "body": "We refunded 129.00 EUR."}),
	)
	s := Story{Name: "c", Title: "email whose response is lost, with no lookup: a human resolves it", WorkflowID: p.WorkflowID()}
	if err := r.sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1}); err != nil {
		return s, err
	}
	run, err := r.st.Plans.Start(ctx, p)
	if err != nil {
		return s, err
	}
	waiting, err := r.awaitHuman(ctx, run.WorkflowID, 2)
	if err != nil {
		return s, err
	}
	s.check("step 2 state while waiting", "needs_human", waiting.Steps[1].State)
	// The operator checks the mail relay's log and finds the message.
	effects, err := r.sb.Effects(ctx, sandbox.Mail)
	if err != nil {
		return s, err
	}
	msgID := ""
	if len(effects) > 0 {
		msgID = effects[0].ID
	}
	_, err = r.st.Plans.Resolve(ctx, run.WorkflowID, workflows.ResolveSignal{
		Step: 2, Outcome: workflows.OutcomeSucceeded, ExternalID: msgID, By: "demo-operator", Note: "found in the mail relay log",
	})
	if err != nil {
		return s, err
	}
	s.Notes = append(s.Notes, fmt.Sprintf("the plan waited in needs_human; resolved by Update `resolve` {step: 2, outcome: succeeded, external_id: %s, by: demo-operator}", msgID))
	st, err := r.st.Plans.Wait(ctx, run.WorkflowID)
	if err != nil {
		return s, err
	}
	s.record(st)
	sent, err := r.calls(ctx, "mail.send")
	if err != nil {
		return s, err
	}
	s.check("plan state", workflows.SagaSucceeded, st.State)
	s.check("emails in the mail relay's store", 1, len(effects))
	s.check("email requests sent (never resent blindly)", 1, sent)
	return s, nil
}

// awaitHuman polls the status query until step n waits for a person.
func (r runner) awaitHuman(ctx context.Context, id string, n int) (workflows.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := r.st.Plans.Status(ctx, id)
		if err == nil && len(st.Steps) >= n && st.Steps[n-1].Waiting == "resolve" {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("step %d of %s never came to wait for a human: %w", n, id, ctx.Err())
		case <-tick.C:
		}
	}
}

func (r runner) conflict(ctx context.Context) (Story, error) {
	changed := refundPlan(12800)
	s := Story{Name: "d", Title: "the same refund re-sent with a changed amount: conflict, no call", WorkflowID: changed.WorkflowID()}
	before, err := r.calls(ctx, "refunds.create")
	if err != nil {
		return s, err
	}
	_, err = r.st.Plans.Start(ctx, changed)
	var conflict *sagaclient.ConflictError
	refused := errors.As(err, &conflict)
	if err != nil && !refused {
		return s, err
	}
	if refused {
		s.Notes = append(s.Notes, err.Error())
	}
	after, err := r.calls(ctx, "refunds.create")
	if err != nil {
		return s, err
	}
	refunds, err := r.count(ctx, "refund")
	if err != nil {
		return s, err
	}
	s.check("changed plan refused as a conflict", true, refused)
	s.check("new refund requests sent", 0, after-before)
	s.check("refunds in the acquirer's store", 1, refunds)
	return s, nil
}

package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/plan"
)

// Answer is what the chaos operator answers to a plan's approval question.
type Answer string

// The approval answers.
const (
	AnswerApprove Answer = "approve"
	AnswerReject  Answer = "reject"
	// AnswerLeave leaves the question open: the plan must end waiting for
	// a human and be listed by escalations.
	AnswerLeave Answer = "leave"
	// AnswerOverride approves through a guard clash shown on the card.
	AnswerOverride Answer = "override"
)

// PlanSpec is one plan of a run and everything the seed decided about it.
type PlanSpec struct {
	Index    int       `json:"index"`
	Template string    `json:"template"`
	Plan     plan.Plan `json:"plan"`
	// Faults are injected into the sandbox just before the plan starts.
	// The sandbox queues faults per operation, so a fault hits the next
	// request to its operation, whichever plan sends it.
	Faults []sandbox.FaultSpec `json:"faults,omitempty"`
	// Starts is how many clients start the plan at once (1 or 10).
	Starts int `json:"starts"`
	// Early sends an approval before the question can be open.
	Early bool `json:"early,omitempty"`
	// Approval answers the plan's approval questions that show no clash;
	// Held answers those that do (a guard held the call).
	Approval Answer `json:"approval"`
	Held     Answer `json:"held"`
	// Absent is the outcome (retry or failed) the operator gives to an
	// outcome question when the provider shows no effect.
	Absent string `json:"absent"`
	// Duplicate sends every decision twice at once, then once more by a
	// second operator after it was applied.
	Duplicate bool `json:"duplicate,omitempty"`
	// Subjects are the unique e-mail subjects of the plan's send_email
	// steps, by step number.
	Subjects map[int]string `json:"subjects,omitempty"`
}

// Schedule is every random choice of a run, made from the seed before
// anything runs: the same seed gives the same schedule.
type Schedule struct {
	Seed  uint64      `json:"seed"`
	Plans []*PlanSpec `json:"plans"`
	// RestartBefore is the plan index before whose start the Temporal
	// server is restarted on its SQLite file (-1: none).
	RestartBefore int `json:"restart_before"`
	// ArmBefore is the plan index before whose start the proxy is armed to
	// withhold the answer of the next committed keyed write, whose worker
	// is then killed.
	ArmBefore int `json:"arm_before"`
	// Kills are random SIGKILLs: after plan Kill.After started, wait
	// Kill.Wait and kill the worker Kill.Pick (modulo the live workers).
	Kills []Kill `json:"kills"`
}

// Kill is one random SIGKILL of a worker process.
type Kill struct {
	After int           `json:"after"`
	Wait  time.Duration `json:"wait"`
	Pick  int           `json:"pick"`
}

// template names.
const (
	tplRefund   = "refund"
	tplPayment  = "payment"
	tplTicket   = "ticket"
	tplSagaFail = "saga_fail"
	tplParallel = "parallel"
	tplRepeat   = "repeat_refund"
)

// keyedLookup pairs each keyed forward write with the lookup its reconcile
// calls.
var keyedLookup = map[string]string{
	"refunds.create":  "refunds.lookup",
	"payments.create": "payments.lookup",
	"tickets.create":  "tickets.search",
	"invoices.create": "invoices.lookup",
}

// templateOps lists the operations a template calls: forward writes
// first, then reads, then the reversal writes it may call.
var templateOps = map[string]struct{ writes, reads, reversals []string }{
	tplRefund:   {writes: []string{"refunds.create"}, reads: []string{"orders.get"}},
	tplPayment:  {writes: []string{"payments.create", "invoices.create", "mail.send"}, reversals: []string{"payments.reverse", "invoices.storno"}},
	tplTicket:   {writes: []string{"tickets.create", "mail.send"}, reversals: []string{"tickets.close"}},
	tplSagaFail: {writes: []string{"payments.create", "tickets.create", "invoices.create"}, reads: []string{"orders.refund_policy"}, reversals: []string{"payments.reverse", "tickets.close", "invoices.storno"}},
	tplParallel: {writes: []string{"tickets.create", "invoices.create"}, reads: []string{"orders.get"}},
	tplRepeat:   {writes: []string{"refunds.create"}},
}

// NewSchedule makes the schedule of a run of n plans from seed. tag makes
// the run's sessions, orders and subjects unique (it is not a random
// choice: runs on fresh data directories may use a fixed tag). short
// leaves out the delay past a tool's timeout and schedules one random kill.
func NewSchedule(seed uint64, n int, tag string, short bool) (*Schedule, error) {
	if n < 1 {
		return nil, fmt.Errorf("chaos: %d plans: run at least 1", n)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	s := &Schedule{Seed: seed, RestartBefore: -1}
	if n >= 2 {
		s.RestartBefore = n/2 + rng.IntN(max(1, n/6))
	}
	s.ArmBefore = min(n-1, max(1, n/4+rng.IntN(max(1, n/8))))
	kills := 1
	if !short {
		kills = n/40 + 1
	}
	for range kills {
		s.Kills = append(s.Kills, Kill{After: rng.IntN(n), Wait: time.Duration(rng.IntN(2000)) * time.Millisecond, Pick: rng.IntN(1 << 16)})
	}

	refunded := []string{} // orders refunded by earlier plans
	forced := 0            // fault kinds forced so far, in sandbox.FaultKinds order
	left := false          // one approval left open so far
	early := false         // one early decision so far
	dup := false           // one approval sent twice so far
	for i := range n {
		ps := &PlanSpec{Index: i, Starts: 1, Approval: AnswerApprove, Held: AnswerReject, Absent: "retry", Subjects: map[int]string{}}
		session := fmt.Sprintf("chaos-%s-%04d", tag, i)
		order := fmt.Sprintf("ord_c%s_%04d", tag, i)
		ps.Plan = plan.Plan{SessionID: session, Turn: 1, RequestID: "chaos-" + session}
		pick := rng.IntN(100)
		switch {
		case pick < 28:
			ps.Template = tplRefund
		case pick < 48:
			ps.Template = tplPayment
		case pick < 64:
			ps.Template = tplTicket
		case pick < 80:
			ps.Template = tplSagaFail
		case pick < 92:
			ps.Template = tplParallel
		default:
			ps.Template = tplRepeat
		}
		if ps.Template == tplRepeat && len(refunded) == 0 {
			ps.Template = tplRefund
		}
		subject := func(step int) string {
			sub := fmt.Sprintf("chaos %s plan %d step %d", tag, i, step)
			ps.Subjects[step] = sub
			return sub
		}
		small := func(lo, hi int) int { return lo + rng.IntN(hi-lo) }
		wantApproval := !(early && dup) || (!left && i >= n/3)
		var steps []plan.Step
		switch ps.Template {
		case tplRefund:
			amount := small(1000, 45000)
			if rng.IntN(100) < 30 || wantApproval {
				amount = small(demotools.RefundApprovalAboveMinor+100, 150000)
			}
			steps = append(steps,
				step(demotools.QueryOrder, map[string]any{"order_id": []string{"ord_1001", "ord_1002"}[rng.IntN(2)]}),
				step(demotools.ApplyRefund, map[string]any{"order_id": order, "amount_minor": amount, "currency": "EUR", "reason": "chaos " + session}))
			refunded = append(refunded, order)
		case tplRepeat:
			prior := refunded[rng.IntN(len(refunded))]
			steps = append(steps, step(demotools.ApplyRefund, map[string]any{"order_id": prior, "amount_minor": small(1000, 45000), "currency": "EUR", "reason": "chaos repeat " + session}))
			if rng.IntN(100) < 25 {
				ps.Held = AnswerOverride
			}
		case tplPayment:
			amount := small(1000, 400000)
			if rng.IntN(100) < 25 || wantApproval {
				amount = small(demotools.PaymentApprovalAboveMinor+100, 900000)
			}
			steps = append(steps,
				step(demotools.CreatePayment, map[string]any{"customer_id": "cus_ana", "order_id": order, "amount_minor": amount, "currency": "EUR", "payment_method": "tok_visa", "description": "chaos " + session}),
				step(demotools.CreateInvoice, map[string]any{"customer_id": "cus_ana", "order_id": order, "amount_minor": amount, "currency": "EUR", "description": "chaos " + session}),
				step(demotools.SendEmail, map[string]any{"to": "ana@example.com", "subject": subject(3), "body": "Your payment was taken."}))
		case tplTicket:
			steps = append(steps,
				step(demotools.CreateTicket, map[string]any{"subject": "chaos " + session, "body": "customer called", "order_id": order, "priority": "normal"}),
				step(demotools.SendEmail, map[string]any{"to": "ana@example.com", "subject": subject(2), "body": "We opened a ticket."}))
		case tplSagaFail:
			// ord_1003 was delivered outside its refund window: the last
			// step fails for good and the plan compensates.
			steps = append(steps,
				step(demotools.CreatePayment, map[string]any{"customer_id": "cus_cleo", "order_id": order, "amount_minor": small(1000, 90000), "currency": "EUR", "payment_method": "tok_visa", "description": "chaos " + session}),
				step(demotools.CreateTicket, map[string]any{"subject": "chaos " + session, "order_id": order}),
				step(demotools.CreateInvoice, map[string]any{"customer_id": "cus_cleo", "order_id": order, "amount_minor": small(1000, 90000), "currency": "EUR"}),
				step(demotools.CheckRefundPolicy, map[string]any{"order_id": "ord_1003"}))
		case tplParallel:
			ps.Plan.Parallel = true
			steps = append(steps,
				step(demotools.QueryOrder, map[string]any{"order_id": "ord_1002"}),
				step(demotools.CreateTicket, map[string]any{"subject": "chaos " + session, "order_id": order, "priority": "high"}),
				step(demotools.CreateInvoice, map[string]any{"customer_id": "cus_ben", "order_id": order, "amount_minor": small(1000, 90000), "currency": "EUR"}))
		}
		ps.Plan.Steps = steps

		// Decisions.
		if needsApproval(ps.Plan) {
			// The first approval plans cover an early decision, a
			// duplicated one and a question left open.
			// An early decision is sent right after the start: it comes
			// before the question only when a step runs first.
			canEarly := !approvalStep(ps.Plan, 1)
			switch r := rng.IntN(100); {
			case (!early && canEarly) || !dup:
				ps.Early, early = canEarly, early || canEarly
				ps.Duplicate, dup = true, true
			case !left && i >= n/3:
				ps.Approval, left = AnswerLeave, true
			case r < 12:
				ps.Approval = AnswerReject
			case r < 16:
				ps.Approval = AnswerLeave
			case r < 40:
				ps.Early = canEarly
			}
		}
		if rng.IntN(100) < 20 {
			ps.Duplicate = true
		}
		if rng.IntN(100) < 35 {
			ps.Absent = "failed"
		}
		if i%23 == 5 || (n < 23 && i == n/2+1) {
			ps.Starts = 10
		}

		// Faults: the first faulted plans cover every kind once.
		if rng.IntN(100) < 45 || forced < len(sandbox.FaultKinds) {
			count := 1 + rng.IntN(2)
			for range count {
				kind := sandbox.FaultKinds[rng.IntN(len(sandbox.FaultKinds))]
				if forced < len(sandbox.FaultKinds) {
					kind = sandbox.FaultKinds[forced]
					forced++
				}
				ps.Faults = append(ps.Faults, faultsFor(rng, ps.Template, kind, short)...)
			}
		}
		s.Plans = append(s.Plans, ps)
	}
	return s, nil
}

// faultsFor returns the faults that make kind happen on an operation the
// template calls. A lookup fault comes with a commit_then_drop on the write
// whose reconcile calls that lookup, so the lookup is reached.
func faultsFor(rng *rand.Rand, tpl string, kind sandbox.FaultKind, short bool) []sandbox.FaultSpec {
	ops := templateOps[tpl]
	anyOf := func(lists ...[]string) string {
		var all []string
		for _, l := range lists {
			all = append(all, l...)
		}
		return all[rng.IntN(len(all))]
	}
	switch kind {
	case sandbox.LookupUnavailable, sandbox.LookupLag:
		var keyed []string
		for _, w := range ops.writes {
			if keyedLookup[w] != "" {
				keyed = append(keyed, w)
			}
		}
		if len(keyed) == 0 {
			keyed = []string{"refunds.create"}
		}
		w := keyed[rng.IntN(len(keyed))]
		return []sandbox.FaultSpec{{Op: w, Fault: sandbox.CommitThenDrop}, {Op: keyedLookup[w], Fault: kind}}
	case sandbox.Delay:
		op := anyOf(ops.writes, ops.reads)
		d := time.Duration(100+rng.IntN(1400)) * time.Millisecond
		// Past the tool's 10 s timeout: the call times out while the
		// provider still works. Never on the mail relay, which has no key
		// (an operator looking too early would be told wrong).
		if !short && rng.IntN(100) < 15 && op != "mail.send" && keyedLookup[op] != "" {
			d = 11 * time.Second
		}
		return []sandbox.FaultSpec{{Op: op, Fault: kind, Delay: d}}
	case sandbox.SlowCommit:
		// The provider commits after the request, the caller may have
		// given up by then (past the tool's 10 s timeout, not in short
		// runs); never on the mail relay, which has no key.
		w := anyOf(ops.writes)
		if keyedLookup[w] == "" {
			w = "refunds.create"
			if len(ops.writes) > 0 && keyedLookup[ops.writes[0]] != "" {
				w = ops.writes[0]
			}
		}
		d := time.Duration(200+rng.IntN(1800)) * time.Millisecond
		if !short && rng.IntN(100) < 15 {
			d = 12 * time.Second
		}
		return []sandbox.FaultSpec{{Op: w, Fault: kind, Delay: d}}
	case sandbox.VisibilityLag:
		// A lost answer whose lookup does not see the commit for a while.
		var keyed []string
		for _, w := range ops.writes {
			if keyedLookup[w] != "" {
				keyed = append(keyed, w)
			}
		}
		if len(keyed) == 0 {
			keyed = []string{"refunds.create"}
		}
		w := keyed[rng.IntN(len(keyed))]
		lag := time.Duration(300+rng.IntN(2700)) * time.Millisecond
		return []sandbox.FaultSpec{{Op: w, Fault: sandbox.CommitThenDrop}, {Op: keyedLookup[w], Fault: kind, Delay: lag}}
	case sandbox.HTTP503, sandbox.HTTP429:
		return []sandbox.FaultSpec{{Op: anyOf(ops.writes, ops.reads), Fault: kind}}
	case sandbox.Reject:
		// A rejected write fails its step: later steps are not run and
		// earlier ones are compensated. Sometimes a reversal is rejected
		// instead, which asks a person.
		if len(ops.reversals) > 0 && rng.IntN(100) < 30 {
			return []sandbox.FaultSpec{{Op: anyOf(ops.reversals), Fault: kind}}
		}
		return []sandbox.FaultSpec{{Op: anyOf(ops.writes), Fault: kind}}
	default: // commit_then_drop, drop_before_commit
		return []sandbox.FaultSpec{{Op: anyOf(ops.writes), Fault: kind}}
	}
}

func step(name string, args map[string]any) plan.Step {
	b, err := json.Marshal(args)
	if err != nil {
		panic(fmt.Sprintf("chaos: args of %s: %v", name, err)) // maps of strings and ints always marshal
	}
	return plan.Step{Tool: name, Args: b}
}

// needsApproval reports whether a step of p crosses an approval threshold
// of the demo tools.
func needsApproval(p plan.Plan) bool {
	for n := range p.Steps {
		if approvalStep(p, n+1) {
			return true
		}
	}
	return false
}

// approvalStep reports whether step n (from 1) of p needs approval by its
// amount.
func approvalStep(p plan.Plan, n int) bool {
	st := p.Steps[n-1]
	var a struct {
		AmountMinor int64 `json:"amount_minor"`
	}
	_ = json.Unmarshal(st.Args, &a)
	switch st.Tool {
	case demotools.ApplyRefund:
		return a.AmountMinor > demotools.RefundApprovalAboveMinor
	case demotools.CreatePayment:
		return a.AmountMinor > demotools.PaymentApprovalAboveMinor
	}
	return false
}

// Package workflows holds the AgentPlan saga: one Temporal workflow per agent
// plan, one keyed ExecuteTool activity per step, a stack of reversals
// (storno) for the steps that succeeded, reconcile before any retry or
// compensation, and a wait for a human whenever the truth cannot be
// established.
package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// Saga runs plans against the tools it knows. Register its AgentPlan method
// under WorkflowName. Specs must be the specs of the worker's registry: they
// are code, so they are the same on every replay.
type Saga struct {
	Specs tool.Specs
}

// Reconcile schedule for UNKNOWN outcomes: first look after firstReconcile,
// doubling up to maxReconcileGap, until the tool's window closes.
const (
	firstReconcile  = 2 * time.Second
	maxReconcileGap = time.Minute
	// System is who the saga records as the author of its own ledger
	// entries (marking a reversed step compensated).
	System = "agentsaga"
)

// ActivityOptions returns the options of a tool call: ActivityID is the
// operation key (so the Temporal UI shows it), the timeout and retry policy
// come from the tool's spec and class. Which failures are retried is decided
// per attempt by activities.Classify; the policy bounds how often.
func ActivityOptions(spec tool.Spec, key string) workflow.ActivityOptions {
	rp := spec.RetryPolicy()
	return workflow.ActivityOptions{
		ActivityID:          key,
		StartToCloseTimeout: spec.Timeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    rp.InitialInterval,
			BackoffCoefficient: rp.BackoffCoefficient,
			MaximumInterval:    rp.MaximumInterval,
			MaximumAttempts:    rp.MaxAttempts,
		},
	}
}

var bookkeeping = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second},
}

var (
	saSession    = temporal.NewSearchAttributeKeyKeyword(SearchAttrSession)
	saState      = temporal.NewSearchAttributeKeyKeyword(SearchAttrState)
	saNeedsHuman = temporal.NewSearchAttributeKeyBool(SearchAttrNeedsHuman)
)

// AgentPlan runs plan p. It returns the final Status; a plan that failed and
// was compensated completes normally with State compensated (the workflow
// did its job), so callers read the state, not the error.
func (s *Saga) AgentPlan(ctx workflow.Context, p plan.Plan) (Status, error) {
	if err := p.Validate(s.Specs); err != nil {
		return Status{}, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidPlan", nil)
	}
	r, err := newRun(ctx, s.Specs, p)
	if err != nil {
		return Status{}, err
	}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) { return r.st, nil }); err != nil {
		return Status{}, fmt.Errorf("register status query: %w", err)
	}
	r.listen(ctx)
	r.setState(ctx, SagaRunning)

	for n := 1; n <= len(p.Steps); n++ {
		if r.runStep(ctx, n) {
			continue
		}
		r.st.Error = fmt.Sprintf("step %d (%s) failed: %s", n, r.step(n).Tool, r.step(n).LastError)
		r.reconcileFailed(ctx, n)
		r.compensate(ctx)
		return r.st, ctx.Err()
	}
	if ctx.Err() != nil {
		r.compensate(ctx)
		return r.st, ctx.Err()
	}
	r.setState(ctx, SagaSucceeded)
	return r.st, nil
}

// run is the state of one plan execution.
type run struct {
	specs     tool.Specs
	plan      plan.Plan
	st        Status
	approvals map[int][]ApproveSignal
	resolves  map[int][]ResolveSignal
	stack     []int // steps whose reversal waits, in push order
}

func newRun(ctx workflow.Context, specs tool.Specs, p plan.Plan) (*run, error) {
	fp, err := p.Fingerprint()
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidPlan", nil)
	}
	r := &run{
		specs: specs, plan: p,
		approvals: map[int][]ApproveSignal{}, resolves: map[int][]ResolveSignal{},
		st: Status{
			WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, SessionID: p.SessionID, Turn: p.Turn,
			RequestID: p.RequestID, PlanFingerprint: fp,
		},
	}
	for n, s := range p.Steps {
		sfp, err := p.StepFingerprint(n + 1)
		if err != nil {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidPlan", nil)
		}
		r.st.Steps = append(r.st.Steps, StepStatus{
			Step: n + 1, Key: p.Key(n + 1), Tool: s.Tool, Class: specs[s.Tool].Class,
			Fingerprint: sfp, State: ledger.Pending,
		})
	}
	return r, nil
}

func (r *run) step(n int) *StepStatus { return &r.st.Steps[n-1] }

// listen collects signals in the background; waits look at what arrived, so
// a signal sent before the workflow reaches its gate is not lost.
func (r *run) listen(ctx workflow.Context) {
	approveCh := workflow.GetSignalChannel(ctx, SignalApprove)
	resolveCh := workflow.GetSignalChannel(ctx, SignalResolve)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var a ApproveSignal
			approveCh.Receive(ctx, &a)
			if msg := r.checkSignal(a.Step, a.By); msg != "" {
				r.refuse(ctx, a.Step, Decision{Kind: SignalApprove, By: a.By, Approved: a.Approved, Note: a.Reason, Refused: msg})
				continue
			}
			r.approvals[a.Step] = append(r.approvals[a.Step], a)
		}
	})
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var s ResolveSignal
			resolveCh.Receive(ctx, &s)
			msg := r.checkSignal(s.Step, s.By)
			if msg == "" && s.Outcome != OutcomeSucceeded && s.Outcome != OutcomeFailed && s.Outcome != OutcomeRetry {
				msg = fmt.Sprintf("outcome %q is not one of succeeded, failed, retry", s.Outcome)
			}
			if msg != "" {
				r.refuse(ctx, s.Step, Decision{Kind: SignalResolve, By: s.By, Outcome: s.Outcome, Note: s.Note, Refused: msg})
				continue
			}
			r.resolves[s.Step] = append(r.resolves[s.Step], s)
		}
	})
}

func (r *run) checkSignal(step int, by string) string {
	switch {
	case step < 1 || step > len(r.st.Steps):
		return fmt.Sprintf("step %d does not exist: the plan has steps 1 to %d", step, len(r.st.Steps))
	case by == "":
		return "by is required: name who decided"
	}
	return ""
}

func (r *run) refuse(ctx workflow.Context, step int, d Decision) {
	d.At = workflow.Now(ctx)
	workflow.GetLogger(ctx).Warn("signal refused", "step", step, "kind", d.Kind, "reason", d.Refused)
	if step >= 1 && step <= len(r.st.Steps) {
		r.step(step).Decisions = append(r.step(step).Decisions, d)
	}
}

func (r *run) setState(ctx workflow.Context, s SagaState) {
	r.st.State = s
	human := s == SagaNeedsHuman || s == SagaWaitingApproval
	err := workflow.UpsertTypedSearchAttributes(ctx,
		saSession.ValueSet(r.plan.SessionID), saState.ValueSet(string(s)), saNeedsHuman.ValueSet(human))
	if err != nil {
		workflow.GetLogger(ctx).Warn("search attributes not updated", "error", err)
	}
}

// runStep runs step n to a settled state and reports whether it succeeded.
func (r *run) runStep(ctx workflow.Context, n int) bool {
	st := r.step(n)
	spec := r.specs[st.Tool]
	args := r.plan.Steps[n-1].Args
	approved := false
	if spec.Approval.Required(args) {
		if !r.awaitApproval(ctx, n, "the tool's approval policy matches these arguments") {
			return false
		}
		approved = true
	}
	for {
		if ctx.Err() != nil {
			st.LastError = "plan cancelled"
			st.State = ledger.FailedFinal
			return false
		}
		st.State = ledger.InProgress
		req := activities.Request{Key: st.Key, Tool: st.Tool, Args: args, Fingerprint: st.Fingerprint, RequestID: r.plan.RequestID, Approved: approved}
		out, err := r.execute(ctx, spec, req, &st.Attempts)
		if err == nil {
			r.succeeded(n, out.ExternalID, out.Result)
			return true
		}
		st.LastError, st.ErrorCode = errText(err), activities.DetailOf(err).Code
		switch {
		case activities.ErrorType(err) == activities.ErrHeld:
			if !r.awaitApproval(ctx, n, st.LastError) {
				return false
			}
			approved = true
			continue
		case spec.Class.IsWrite() && activities.IsUnknown(err) && ctx.Err() == nil:
			st.State = ledger.Unknown
			switch r.settle(ctx, n, spec, req) {
			case OutcomeSucceeded:
				return true
			case OutcomeRetry:
				continue
			}
			return false
		}
		st.State = ledger.FailedFinal
		return false
	}
}

func (r *run) execute(ctx workflow.Context, spec tool.Spec, req activities.Request, attempts *int) (activities.Output, error) {
	actx := workflow.WithActivityOptions(ctx, ActivityOptions(spec, req.Key))
	var out activities.Output
	err := workflow.ExecuteActivity(actx, activities.ExecuteToolName, req).Get(ctx, &out)
	if err == nil {
		*attempts += int(out.Attempt)
	} else if a := activities.DetailOf(err).Attempt; a > 0 {
		*attempts += int(a)
	} else {
		*attempts += 1
	}
	return out, err
}

func (r *run) succeeded(n int, externalID string, result json.RawMessage) {
	st := r.step(n)
	st.State, st.ExternalID, st.Result, st.LastError, st.ErrorCode, st.Waiting = ledger.Succeeded, externalID, result, "", "", ""
	if r.specs[st.Tool].Compensable() {
		r.stack = append(r.stack, n)
	}
}

// settle settles an UNKNOWN step: reconcile on a bounded schedule, then ask
// a human. It returns succeeded, failed or retry (call again, same key).
func (r *run) settle(ctx workflow.Context, n int, spec tool.Spec, req activities.Request) Outcome {
	st := r.step(n)
	if !spec.NoLookup {
		look, ok := r.reconcileUntil(ctx, spec, req)
		switch {
		case ok && look.Status == tool.Found:
			r.succeeded(n, look.Result.ExternalID, look.Result.Data)
			return OutcomeSucceeded
		case ok:
			return OutcomeRetry // authoritative absent: the same key may be sent again
		}
		st.LastError = fmt.Sprintf("outcome unknown after reconciling for %s: %s", spec.Window(), st.LastError)
	} else {
		st.LastError = fmt.Sprintf("%s has no way to look itself up, a person must say what happened: %s", st.Tool, st.LastError)
	}
	d := r.awaitResolve(ctx, n)
	switch d.Outcome {
	case OutcomeSucceeded:
		r.record(ctx, st.Key, ledger.Succeeded, d)
		r.succeeded(n, d.ExternalID, nil)
	case OutcomeFailed:
		r.record(ctx, st.Key, ledger.FailedFinal, d)
		st.State = ledger.FailedFinal
		st.LastError = fmt.Sprintf("resolved as failed by %s: %s", d.By, d.Note)
	case OutcomeRetry:
		r.record(ctx, st.Key, ledger.Pending, d)
	}
	return d.Outcome
}

// reconcileUntil asks the provider by key until it gives a definite answer
// (found, or authoritatively absent) or the tool's window closes. ok is false
// when the window closed without one.
func (r *run) reconcileUntil(ctx workflow.Context, spec tool.Spec, req activities.Request) (tool.Lookup, bool) {
	deadline := workflow.Now(ctx).Add(spec.Window())
	gap := firstReconcile
	for i := 1; ; i++ {
		look, err := r.reconcile(ctx, req, i)
		if err == nil && (look.Status == tool.Found || (look.Status == tool.Absent && look.Authoritative)) {
			return look, true
		}
		left := deadline.Sub(workflow.Now(ctx))
		if left <= 0 || ctx.Err() != nil {
			return tool.Lookup{}, false
		}
		if err := workflow.Sleep(ctx, min(gap, left)); err != nil {
			return tool.Lookup{}, false
		}
		gap = min(2*gap, maxReconcileGap)
	}
}

func (r *run) reconcile(ctx workflow.Context, req activities.Request, i int) (tool.Lookup, error) {
	opts := bookkeeping
	opts.ActivityID = fmt.Sprintf("%s:reconcile:%d", req.Key, i)
	opts.RetryPolicy = &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3}
	var look tool.Lookup
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.ReconcileToolName, req).Get(ctx, &look)
	return look, err
}

// awaitApproval waits for an `approve` signal for step n whose fingerprint is
// the step's. It reports whether the step was approved; a rejection fails it.
func (r *run) awaitApproval(ctx workflow.Context, n int, why string) bool {
	st := r.step(n)
	st.Waiting, st.LastError = "approval", "waiting for approval: "+why
	prev := r.st.State
	r.setState(ctx, SagaWaitingApproval)
	defer func() { st.Waiting = "" }()
	for {
		if err := workflow.Await(ctx, func() bool { return len(r.approvals[n]) > 0 }); err != nil {
			st.State, st.LastError = ledger.FailedFinal, "cancelled while waiting for approval"
			return false
		}
		a := r.approvals[n][0]
		r.approvals[n] = r.approvals[n][1:]
		d := Decision{Kind: SignalApprove, By: a.By, At: workflow.Now(ctx), Approved: a.Approved, Note: a.Reason}
		if a.Fingerprint != st.Fingerprint {
			d.Refused = fmt.Sprintf("fingerprint %s is not this step's %s: the arguments differ from what was approved; approve the current fingerprint", a.Fingerprint, st.Fingerprint)
			st.Decisions = append(st.Decisions, d)
			continue
		}
		st.Decisions = append(st.Decisions, d)
		r.setState(ctx, prev)
		if !a.Approved {
			st.State = ledger.FailedFinal
			st.LastError = fmt.Sprintf("rejected by %s: %s", a.By, a.Reason)
			return false
		}
		st.LastError = ""
		return true
	}
}

// awaitResolve marks step n needs_human and waits for a `resolve` signal.
func (r *run) awaitResolve(ctx workflow.Context, n int) Decision {
	st := r.step(n)
	compensating := st.Compensation != nil
	if !compensating {
		st.State = ledger.NeedsHuman
	}
	st.Waiting = "resolve"
	prev := r.st.State
	r.setState(ctx, SagaNeedsHuman)
	defer func() { st.Waiting = "" }()
	if err := workflow.Await(ctx, func() bool { return len(r.resolves[n]) > 0 }); err != nil {
		return Decision{Kind: SignalResolve, Outcome: OutcomeFailed, By: System, At: workflow.Now(ctx), Note: "cancelled while waiting for a human"}
	}
	s := r.resolves[n][0]
	r.resolves[n] = r.resolves[n][1:]
	d := Decision{Kind: SignalResolve, By: s.By, At: workflow.Now(ctx), Outcome: s.Outcome, ExternalID: s.ExternalID, Note: s.Note}
	st.Decisions = append(st.Decisions, d)
	r.setState(ctx, prev)
	return d
}

func (r *run) record(ctx workflow.Context, key string, status ledger.Status, d Decision) {
	rec := activities.Record{Key: key, Status: status, ExternalID: d.ExternalID, By: d.By, Note: d.Note}
	actx := workflow.WithActivityOptions(ctx, bookkeeping)
	if err := workflow.ExecuteActivity(actx, activities.RecordName, rec).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("decision not recorded in the ledger", "key", key, "error", err)
	}
}

// reconcileFailed asks the provider whether the failed step n was really not
// done. If it was, the step is a success to be reversed like the others.
func (r *run) reconcileFailed(ctx workflow.Context, n int) {
	st := r.step(n)
	spec := r.specs[st.Tool]
	if !spec.Class.IsWrite() || spec.NoLookup || st.State != ledger.FailedFinal {
		return
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	req := activities.Request{Key: st.Key, Tool: st.Tool, Args: r.plan.Steps[n-1].Args, Fingerprint: st.Fingerprint, RequestID: r.plan.RequestID}
	look, err := r.reconcile(ctx, req, 0)
	if err != nil || look.Status != tool.Found {
		return
	}
	r.record(ctx, st.Key, ledger.Succeeded, Decision{By: System, ExternalID: look.Result.ExternalID, Note: "reconcile found the effect of a step reported failed"})
	msg := st.LastError
	r.succeeded(n, look.Result.ExternalID, look.Result.Data)
	st.LastError = "reported failed but the provider has the effect: " + msg
}

// compensate pops the saga stack: each succeeded compensable step is undone
// by its reversal, newest first, in a disconnected context so a cancelled
// plan still compensates. Failed reversals are escalated to a human after
// every other reversal has run.
func (r *run) compensate(ctx workflow.Context) {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if len(r.stack) == 0 {
		r.setState(ctx, SagaFailed)
		return
	}
	r.setState(ctx, SagaCompensating)
	var failed []int
	for i := len(r.stack) - 1; i >= 0; i-- {
		if n := r.stack[i]; !r.compensateStep(ctx, n) {
			failed = append(failed, n)
		}
	}
	r.stack = nil
	for _, n := range failed {
		r.escalateCompensation(ctx, n)
	}
	for _, s := range r.st.Steps {
		if s.State == ledger.CompensationFailed {
			r.setState(ctx, SagaCompensationFailed)
			return
		}
	}
	r.setState(ctx, SagaCompensated)
}

// compensateStep runs step n's reversal with key {key}:compensate through the
// same path as any write: ledger claim, reconcile before retry, UNKNOWN
// reconciled on the compensator's schedule. It reports success.
func (r *run) compensateStep(ctx workflow.Context, n int) bool {
	st := r.step(n)
	spec := r.specs[st.Tool]
	cspec := r.specs[spec.Compensator]
	if st.Compensation == nil {
		st.Compensation = &Compensation{Key: tool.CompensationKey(st.Key), Tool: spec.Compensator}
	}
	c := st.Compensation
	st.State, c.State, c.LastError = ledger.Compensating, ledger.InProgress, ""
	args, _ := json.Marshal(tool.Reversal{
		OriginalKey: st.Key, OriginalTool: st.Tool, OriginalExternalID: st.ExternalID, OriginalArgs: r.plan.Steps[n-1].Args,
	})
	fp, _ := plan.Fingerprint(c.Tool, args)
	req := activities.Request{Key: c.Key, Tool: c.Tool, Args: args, Fingerprint: fp, RequestID: r.plan.RequestID}
	out, err := r.execute(ctx, cspec, req, &c.Attempts)
	if err != nil && activities.IsUnknown(err) {
		c.State, c.LastError = ledger.Unknown, errText(err)
		look, ok := r.reconcileUntil(ctx, cspec, req)
		switch {
		case ok && look.Status == tool.Found:
			out, err = activities.Output{ExternalID: look.Result.ExternalID}, nil
		case ok:
			out, err = r.execute(ctx, cspec, req, &c.Attempts) // provably not done: once more, same key
		}
	}
	if err != nil {
		st.State, c.State, c.LastError = ledger.CompensationFailed, ledger.FailedFinal, errText(err)
		return false
	}
	r.compensated(ctx, n, out.ExternalID, Decision{By: System, Note: "reversed by " + c.Key})
	return true
}

func (r *run) compensated(ctx workflow.Context, n int, externalID string, d Decision) {
	st := r.step(n)
	st.State, st.Compensation.State, st.Compensation.ExternalID, st.Compensation.LastError = ledger.Compensated, ledger.Succeeded, externalID, ""
	d.ExternalID = st.ExternalID
	r.record(ctx, st.Key, ledger.Compensated, d)
}

// escalateCompensation hands a failed reversal to a human: succeeded means it
// was reversed by hand, retry runs the reversal again (same key), failed
// accepts that it stays unreversed.
func (r *run) escalateCompensation(ctx workflow.Context, n int) {
	st := r.step(n)
	for st.State == ledger.CompensationFailed {
		d := r.awaitResolve(ctx, n)
		switch d.Outcome {
		case OutcomeSucceeded:
			st.Compensation.ExternalID = d.ExternalID
			r.compensated(ctx, n, d.ExternalID, d)
			return
		case OutcomeRetry:
			r.compensateStep(ctx, n)
		default:
			r.record(ctx, st.Key, ledger.CompensationFailed, d)
			return
		}
	}
}

func errText(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Message()
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return "attempt timed out: the request may have reached the provider"
	}
	return err.Error()
}

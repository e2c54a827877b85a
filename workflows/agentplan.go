// Package workflows holds the AgentPlan saga: one Temporal workflow per agent
// plan, one keyed ExecuteTool activity per step, a stack of reversals
// (storno) for the steps that succeeded, reconcile before any retry or
// compensation, and a question to a human whenever the truth cannot be
// established or a rule asks for approval.
package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// ErrPlaintextRefused is the error type of a plan (or session) a client
// sent without the codec keys to a worker that has them.
const ErrPlaintextRefused = "InvalidPlanPlaintextRefused"

// ErrInvalidPlan is the error type of a plan the workflow refused as
// invalid; ErrPlaintextRefused starts with it. Nothing of such a plan ran.
const ErrInvalidPlan = "InvalidPlan"

// Saga runs plans against the tools it knows. Register its AgentPlan method
// under WorkflowName.
type Saga struct {
	// Specs are the specs of the worker's registry. A plan pins the specs
	// of its tools when it starts (recorded in its history), so a later
	// change of a spec never changes a plan that already runs.
	Specs tool.Specs
	// Operators checks who decides. Nil accepts a typed name and records
	// it as unverified (the dev stack).
	Operators Verifier
	// Limits bound what a plan may carry (zero fields: plan.DefaultLimits).
	// The workflow enforces them for plans started by any client; a plan
	// records the verdict in its history.
	Limits plan.Limits
	// Refused, when set, is told of every decision Update its validator
	// refuses once the payload was read (an operator without the right, a
	// bad signature, four eyes, a closed question): who, which question,
	// the step's operation key, when and why, as an audit record of kind
	// "refused". A refused Update leaves no history, so this is its only
	// trace; validators are not replayed, so it is told once per attempt.
	// It must not block: sagaworker hands the record to the ledger on a
	// goroutine of its own (bounded; a record it cannot take is logged).
	Refused func(ledger.DecisionRecord)
}

// Verifier checks that a decision was signed by the operator it names and
// that the operator may take that action ("approve" or "resolve").
// *operators.Keyring implements it.
type Verifier interface {
	Verify(by, action string, msg []byte, sig string) error
}

// Reconcile schedule for UNKNOWN outcomes, and the bound on calls of one
// step whose provider keeps saying "not done".
const (
	firstReconcile  = 2 * time.Second
	maxReconcileGap = time.Minute
	// maxCalls bounds how often one step is called when each call ends
	// provably not done (a persistent 503 on a non-idempotent write); then
	// the step fails for good and the plan compensates.
	maxCalls       = 5
	firstCallRetry = 2 * time.Second
	maxCallRetry   = 2 * time.Minute
	// System is who the saga records as the author of its own changes.
	System = "agentsaga"
)

// ActivityOptions returns the options of a tool call: ActivityID is the
// operation key (so the Temporal UI shows it), Summary says what the call
// does, the timeout and retry policy come from the tool's spec and class.
// Which failures are retried is decided per attempt by activities.Classify;
// the policy bounds how often.
func ActivityOptions(spec tool.Spec, key, summary string) workflow.ActivityOptions {
	rp := spec.RetryPolicy()
	return workflow.ActivityOptions{
		ActivityID:          key,
		Summary:             summary,
		StartToCloseTimeout: spec.Timeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    rp.InitialInterval,
			BackoffCoefficient: rp.BackoffCoefficient,
			MaximumInterval:    rp.MaximumInterval,
			MaximumAttempts:    rp.MaxAttempts,
		},
	}
}

// bookkeeping is the options of ledger writes made by the workflow: bounded,
// so a permanent error never wedges a plan.
var bookkeeping = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 8,
		NonRetryableErrorTypes: []string{activities.ErrRecordRefused},
	},
}

var (
	saSession    = temporal.NewSearchAttributeKeyKeyword(SearchAttrSession)
	saState      = temporal.NewSearchAttributeKeyKeyword(SearchAttrState)
	saNeedsHuman = temporal.NewSearchAttributeKeyBool(SearchAttrNeedsHuman)
)

// StartAttributes are the search attributes a client sets when it starts a
// plan or session: the session, state running, no person needed. A run
// started with them upserts its attributes only when they change, which
// saves an event and a visibility write per plan. The worker that runs the
// plan records that choice in the plan's pinned specs (pinned), so the
// history says it: a run started without them (any Temporal client by
// workflow name), and every run a worker from before this change ran
// whatever its start carried, upserts on every state change and replays so.
func StartAttributes(session string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		saSession.ValueSet(session), saState.ValueSet(string(SagaRunning)), saNeedsHuman.ValueSet(false))
}

// startedWithAttributes reports whether the run was started with
// StartAttributes (read before the run upserts anything).
func startedWithAttributes(ctx workflow.Context) bool {
	_, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(saState)
	return ok
}

// pinned is what a plan records in its history when it starts: the specs of
// its tools (and their reversals) and the verdict of validation against them.
type pinned struct {
	Specs   tool.Specs  `json:"specs"`
	Limits  plan.Limits `json:"limits"`
	Invalid string      `json:"invalid,omitempty"`
	// UpsertOnChange: the run was started with StartAttributes, and the
	// worker that pinned this upserts search attributes only when they
	// change. Absent from pins written before, so those runs keep upserting
	// on every change.
	UpsertOnChange bool `json:"upsert_on_change,omitempty"`
}

// pin validates the plan as the workflow received it (raw, under
// workflowID) and returns the specs of its tools. The bytes are parsed as
// strictly as the CLI parses a plan (plan.ParseBytes: no key twice, UTF-8,
// no unknown fields, an integer turn), and a plan runs only under the
// workflow ID agent-plan:{session}:{turn} of its own content, so nobody
// takes another plan's keys.
func (s *Saga) pin(p plan.Plan, raw json.RawMessage, workflowID string) pinned {
	lim := s.Limits.WithDefaults()
	if _, err := plan.ParseBytes(raw, lim); err != nil {
		return pinned{Invalid: err.Error()}
	}
	// The fields first, so a plan without session_id is told so, not
	// that its ID agent-plan::1 is not its own.
	if err := p.ValidateWith(s.Specs, lim); err != nil {
		return pinned{Invalid: err.Error()}
	}
	if want := p.WorkflowID(); workflowID != want {
		return pinned{Invalid: fmt.Sprintf("this plan (session %q, turn %d) runs only under the workflow ID %q, not %q: start it under its own ID",
			clip(p.SessionID, 140), p.Turn, clip(want, 300), clip(workflowID, 300))}
	}
	out := tool.Specs{}
	for _, st := range p.Steps {
		sp := s.Specs[st.Tool]
		out[st.Tool] = sp
		if sp.Compensator != "" {
			out[sp.Compensator] = s.Specs[sp.Compensator]
		}
	}
	return pinned{Specs: out}
}

// AgentPlan runs plan p. It returns the final Status; a plan that failed and
// was compensated completes normally with State compensated (the workflow
// did its job), so callers read the state, not the error. A cancelled plan
// lets the call in flight finish, settles it, compensates, and then reports
// the cancellation.
//
// The input is the plan's JSON as the client sent it: the workflow checks its
// bytes itself (see pin), since a decoder would let a key named twice or
// bytes that are not UTF-8 through.
func (s *Saga) AgentPlan(ctx workflow.Context, raw json.RawMessage) (Status, error) {
	if codec.IsRefusedPlaintext(raw) {
		// The type says it to a client without the keys, which cannot
		// read the (encrypted) message.
		return Status{}, temporal.NewNonRetryableApplicationError(codec.PlaintextError("the plan").Error(), ErrPlaintextRefused, nil)
	}
	var p plan.Plan
	if err := json.Unmarshal(raw, &p); err != nil {
		return Status{}, temporal.NewNonRetryableApplicationError(
			"the input is not a plan (session_id, turn, request_id, requested_by, parallel, steps[] of {tool, args}): "+redact.String(err.Error()), ErrInvalidPlan, nil)
	}
	var pin pinned
	onChange := startedWithAttributes(ctx)
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		pin := s.pin(p, raw, id)
		pin.UpsertOnChange = onChange
		return pin
	}).Get(&pin)
	if err != nil {
		return Status{}, fmt.Errorf("read the pinned tool specs: %w", err)
	}
	if pin.Invalid != "" {
		return Status{}, temporal.NewNonRetryableApplicationError(pin.Invalid, ErrInvalidPlan, nil)
	}
	r, err := newRun(ctx, s, pin.Specs, p)
	if err != nil {
		return Status{}, err
	}
	r.upsertOnChange = pin.UpsertOnChange
	if err := r.register(ctx); err != nil {
		return Status{}, err
	}
	r.setState(ctx, SagaRunning)
	// Everything after a call leaves runs in a disconnected context: a
	// cancelled plan still finishes the call in flight, reconciles it and
	// compensates, so no effect is dropped.
	dctx, _ := workflow.NewDisconnectedContext(ctx)

	for _, g := range r.groups(ctx, 1, len(p.Steps), p.Parallel) {
		if ctx.Err() != nil {
			for n := g[0]; n <= len(p.Steps); n++ {
				r.step(n).LastError = "not run: the plan was cancelled"
			}
			break
		}
		failed := r.runGroup(ctx, dctx, g)
		if len(failed) == 0 {
			continue
		}
		n := r.firstCause(failed)
		r.st.Error = fmt.Sprintf("step %d (%s) failed: %s", n, r.step(n).Tool, r.step(n).LastError)
		if r.step(n).State == ledger.Compensated {
			r.st.Error = fmt.Sprintf("step %d (%s) was compensated by an earlier run of this plan (a reset replays it): the plan does not go forward", n, r.step(n).Tool)
			for m := g[len(g)-1] + 1; m <= len(p.Steps); m++ {
				r.step(m).LastError = fmt.Sprintf("not run: step %d was compensated by an earlier run of this plan", n)
			}
		}
		for _, f := range failed {
			r.reconcileFailed(dctx, f)
		}
		r.compensate(dctx)
		return r.finish(ctx, dctx)
	}
	if ctx.Err() != nil {
		if r.st.Error == "" {
			r.st.Error = "plan cancelled"
		}
		r.compensate(dctx)
		return r.finish(ctx, dctx)
	}
	r.setState(dctx, SagaSucceeded)
	return r.finish(ctx, dctx)
}

// groups splits steps first..last into the groups that run together: every
// step at once in a parallel plan; otherwise consecutive reads together and
// each write alone, in order. (Plans started before parallel groups ran
// every step alone: GetVersion keeps their replay unchanged.)
func (r *run) groups(ctx workflow.Context, first, last int, parallel bool) [][]int {
	var out [][]int
	if !r.canGroup(first, last, parallel) ||
		workflow.GetVersion(ctx, versionParallelSteps, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		for n := first; n <= last; n++ {
			out = append(out, []int{n})
		}
		return out
	}
	if parallel {
		g := make([]int, 0, last-first+1)
		for n := first; n <= last; n++ {
			g = append(g, n)
		}
		return [][]int{g}
	}
	for n := first; n <= last; n++ {
		read := !r.specs[r.step(n).Tool].Class.IsWrite()
		if k := len(out); read && k > 0 && n > first && !r.specs[r.step(n-1).Tool].Class.IsWrite() {
			out[k-1] = append(out[k-1], n)
			continue
		}
		out = append(out, []int{n})
	}
	return out
}

// canGroup reports whether any two of steps first..last would run together:
// a parallel plan of two or more steps, or two reads in a row. Otherwise
// both versions of groups run every step alone, and no version marker is
// recorded (an older history's marker is skipped on replay).
func (r *run) canGroup(first, last int, parallel bool) bool {
	if last <= first {
		return false
	}
	if parallel {
		return true
	}
	for n := first + 1; n <= last; n++ {
		if !r.specs[r.step(n).Tool].Class.IsWrite() && !r.specs[r.step(n-1).Tool].Class.IsWrite() {
			return true
		}
	}
	return false
}

// runGroup runs the steps of a group at once and returns the ones that
// failed, in step order, after every sibling in flight has settled. Steps
// that succeed push their reversals in the order they complete, so the stack
// is compensated in reverse order of completion.
func (r *run) runGroup(ctx, dctx workflow.Context, g []int) []int {
	ok := make([]bool, len(g))
	if len(g) == 1 {
		ok[0] = r.runStep(ctx, dctx, g[0])
	} else {
		// A failed sibling withdraws the others' open approvals (they
		// would only be reversed); calls in flight finish.
		gctx, withdraw := workflow.WithCancel(ctx)
		wg := workflow.NewWaitGroup(dctx)
		for i, n := range g {
			wg.Add(1)
			workflow.Go(gctx, func(ctx workflow.Context) {
				defer wg.Done()
				// Each coroutine blocks on a context of its own.
				gd, _ := workflow.NewDisconnectedContext(ctx)
				if ok[i] = r.runStep(ctx, gd, n); !ok[i] {
					withdraw()
				}
			})
		}
		wg.Wait(dctx)
		withdraw()
	}
	var failed []int
	for i, n := range g {
		if !ok[i] {
			failed = append(failed, n)
		}
	}
	return failed
}

// firstCause returns the failed step that caused a group to fail: the first
// one not merely withdrawn because a sibling failed.
func (r *run) firstCause(failed []int) int {
	for _, n := range failed {
		if !strings.HasPrefix(r.step(n).LastError, withdrawnPrefix) {
			return n
		}
	}
	return failed[0]
}

// finish waits for decision handlers still running, then returns the status
// (and the cancellation, if the plan was cancelled).
func (r *run) finish(ctx, dctx workflow.Context) (Status, error) {
	_ = workflow.Await(dctx, func() bool { return workflow.AllHandlersFinished(dctx) })
	r.drainNotifications(dctx)
	r.count(dctx, MetricPlansCompleted, map[string]string{"state": string(r.st.State)})
	return r.st, ctx.Err()
}

// run is the state of one plan execution.
type run struct {
	saga  *Saga
	specs tool.Specs
	plan  plan.Plan
	st    Status
	stack []int             // steps whose reversal waits, in push (completion) order
	qs    map[int]*question // the open question of each waiting step
	base  SagaState         // the state apart from open questions
	seq   int               // questions opened so far
	// closed remembers the decision applied to each closed question, so a
	// repeated identical decision (a double click) is recognised.
	closed     map[string]Decision
	lastClosed map[int]Decision // the decision that closed each step's latest question
	refused    int              // refused signals so far
	lastErr    map[int]string   // the error type that ended each failed step
	revErr     map[int]string   // the error type that ended each step's latest reversal
	revRound   map[int]int      // the reversal round of each step (1: {key}:compensate)
	// calls is what the calls and lookups of each operation key got
	// back, for the cards (state only: no command).
	calls map[string]*callLog
	// earlier is set when a step was found compensated by an earlier run
	// of the plan (compensatedBefore): the plan ends compensated.
	earlier bool
	// upsertOnChange skips an upsert of search attributes that would not
	// change them (as pinned: see pinned.UpsertOnChange).
	upsertOnChange bool
	// shown is what the search attributes hold (nil: not read yet).
	shown *shown
	// published is the state and open question ids last published in
	// the memo ("" when none is open; see publishQuestions).
	published string
	// notifying counts notifications in flight (see announce).
	notifying int
	// notifySettings are the worker's notification settings, read once
	// (versionNotifyDelivery); nil until read.
	notifySettings *activities.NotifyResult
}

// newRunState returns a run with its bookkeeping allocated; AgentPlan and
// AgentSession both start from it.
func newRunState(s *Saga, specs tool.Specs, p plan.Plan) *run {
	return &run{
		saga: s, specs: specs, plan: p,
		closed: map[string]Decision{}, lastClosed: map[int]Decision{}, qs: map[int]*question{}, lastErr: map[int]string{},
		revErr: map[int]string{}, revRound: map[int]int{}, calls: map[string]*callLog{},
	}
}

func newRun(ctx workflow.Context, s *Saga, specs tool.Specs, p plan.Plan) (*run, error) {
	fp, err := p.Fingerprint()
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidPlan, nil)
	}
	r := newRunState(s, specs, p)
	r.st = Status{
		WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, SessionID: p.SessionID, Turn: p.Turn,
		RequestID: redact.String(p.RequestID), PlanFingerprint: fp,
	}
	for n, s := range p.Steps {
		sfp, err := p.StepFingerprint(n + 1)
		if err != nil {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidPlan, nil)
		}
		r.st.Steps = append(r.st.Steps, StepStatus{
			Step: n + 1, Key: p.Key(n + 1), Tool: s.Tool, Class: specs[s.Tool].Class,
			Fingerprint: sfp, State: ledger.Pending,
		})
	}
	return r, nil
}

func (r *run) step(n int) *StepStatus { return &r.st.Steps[n-1] }

// setState sets the plan's base state and shows the effective one: a plan
// with an open outcome or reversal question needs a human, one with only
// approval questions waits for approval.
func (r *run) setState(ctx workflow.Context, s SagaState) {
	r.base = s
	r.refresh(ctx)
}

// refresh shows the effective state (see setState) in the status, the
// search attributes and the UI.
func (r *run) refresh(ctx workflow.Context) {
	s := r.base
	// Any order gives the same state: one question that is not an approval
	// makes it needs_human.
	//workflowcheck:ignore
	for _, q := range r.qs {
		if q.Kind != QuestionApproval {
			s = SagaNeedsHuman
			break
		}
		s = SagaWaitingApproval
	}
	r.st.State = s
	r.showAttributes(ctx, s)
	r.publishQuestions(ctx)
	r.details(ctx)
}

// showAttributes upserts the search attributes for state s (each upsert is
// a history event and a visibility write; see upsertOnChange).
func (r *run) showAttributes(ctx workflow.Context, s SagaState) {
	human := s == SagaNeedsHuman || s == SagaWaitingApproval
	want := shown{session: r.plan.SessionID, state: string(s), needsHuman: human}
	if r.upsertOnChange {
		if r.shown == nil {
			// What the run started with, read once (decoding the
			// attributes on every change cost more than the check).
			sa := workflow.GetTypedSearchAttributes(ctx)
			var cur shown
			cur.session, _ = sa.GetKeyword(saSession)
			cur.state, _ = sa.GetKeyword(saState)
			cur.needsHuman, _ = sa.GetBool(saNeedsHuman)
			r.shown = &cur
		}
		if *r.shown == want {
			return
		}
	}
	err := workflow.UpsertTypedSearchAttributes(ctx,
		saSession.ValueSet(want.session), saState.ValueSet(want.state), saNeedsHuman.ValueSet(want.needsHuman))
	if err != nil {
		workflow.GetLogger(ctx).Warn("search attributes not updated", "error", err)
		r.shown = nil // read them again next time
		return
	}
	r.shown = &want
}

// shown is the search attributes a run shows.
type shown struct {
	session, state string
	needsHuman     bool
}

func (r *run) request(n int) activities.Request {
	st := r.step(n)
	req := activities.Request{Key: st.Key, Tool: st.Tool, Args: r.plan.Steps[n-1].Args, Fingerprint: st.Fingerprint, RequestID: r.plan.RequestID,
		Pinned: activities.PinnedOf(r.specs[st.Tool])}
	req.Summary = r.summary(r.specs[st.Tool], req)
	return req
}

// runStep runs step n to a settled state and reports whether it succeeded.
// ctx is cancelled with the plan; dctx is not (calls and their settling run
// there).
func (r *run) runStep(ctx, dctx workflow.Context, n int) bool {
	st := r.step(n)
	spec := r.specs[st.Tool]
	req := r.request(n)
	hold := r.plan.Steps[n-1].Hold
	if spec.Approval.Required(req.Args) || hold != "" {
		rep := r.checkGuard(dctx, req)
		rule := hold
		if spec.Approval.Required(req.Args) {
			rule = strings.TrimPrefix(hold+"; "+r.approvalRule(spec, req.Args), "; ")
		}
		d, ok := r.askApproval(ctx, dctx, n, rule, rep)
		if !ok {
			return r.gaveUp(dctx, n, false)
		}
		if req.PermitID, ok = r.grant(dctx, n, d, rule, rep.Holders); !ok {
			return r.gaveUp(dctx, n, false)
		}
	}
	calls, notSentCalls := 0, 0
	var notSent time.Time
	for {
		if ctx.Err() != nil {
			st.State, st.LastError = ledger.FailedFinal, "plan cancelled before this step was called"
			return r.gaveUp(dctx, n, false)
		}
		st.State = ledger.InProgress
		calls++
		out, err := r.execute(dctx, spec, req, &st.Attempts)
		if err == nil {
			r.succeeded(n, out.ExternalID, out.Result)
			return true
		}
		st.LastError, st.ErrorCode = errText(err), redact.String(activities.DetailOf(err).Code)
		r.lastErr[n] = activities.ErrorType(err)
		switch {
		case activities.ErrorType(err) == activities.ErrCompensated:
			r.compensatedBefore(n)
			return false
		case activities.ErrorType(err) == activities.ErrHeld, activities.ErrorType(err) == activities.ErrClashUnseen:
			// Held, or approved on a card that missed a holder of the
			// guard: ask (again) on a fresh card.
			rep := r.checkGuard(dctx, req)
			if rep.Clash == "" {
				rep.Clash = st.LastError
			}
			rule := "the ledger held the call: " + st.LastError
			d, ok := r.askApproval(ctx, dctx, n, rule, rep)
			if !ok {
				return r.gaveUp(dctx, n, true)
			}
			if req.PermitID, ok = r.grant(dctx, n, d, rule, rep.Holders); !ok {
				return r.gaveUp(dctx, n, true)
			}
			calls--
			continue
		case spec.Class.IsWrite() && activities.IsUnknown(err):
			st.State = ledger.Unknown
			outcome, byHuman := r.settle(dctx, n, spec, req)
			switch outcome {
			case OutcomeSucceeded:
				return true
			case OutcomeRetry:
				if byHuman {
					calls = 0
					continue
				}
				if calls >= maxCalls {
					st.State = ledger.FailedFinal
					st.LastError = fmt.Sprintf("gave up after %d calls: each ended without an effect at the provider (reconciled by key): %s", calls, st.LastError)
					return r.gaveUp(dctx, n, false)
				}
				_ = workflow.NewTimerWithOptions(dctx, r.backoff(st.Key, calls, activities.DetailOf(err).RetryAfter),
					workflow.TimerOptions{Summary: fmt.Sprintf("backoff %s before call %d", st.Key, calls+1)}).Get(dctx, nil)
				continue
			}
			return false
		}
		if activities.ErrorType(err) == string(tool.KindNotSent) {
			// Provably not sent (a refused connection, a DNS failure):
			// the safest retry there is. Ride out a blip with backoff.
			if notSent.IsZero() {
				notSent = workflow.Now(dctx)
			}
			if wait, ok := r.rideOut(dctx, st.Key, notSent, &notSentCalls, activities.DetailOf(err).RetryAfter); ok {
				_ = workflow.NewTimerWithOptions(dctx, wait,
					workflow.TimerOptions{Summary: fmt.Sprintf("not sent: backoff %s before call %d", st.Key, calls+1)}).Get(dctx, nil)
				calls--
				continue
			}
		}
		st.State = ledger.FailedFinal
		if activities.ErrorType(err) == activities.ErrConflict {
			// The row under this key is another request's (or holds a
			// mismatch for a person): never touch it.
			return false
		}
		return r.gaveUp(dctx, n, false)
	}
}

// compensatedBefore marks step n as the ledger knows it: succeeded and
// compensated already, by an earlier run of this plan (a reset replays the
// plan from its start). Neither the tool nor its reversal is called; the plan
// does not go forward (the step's effect is reversed) and ends compensated
// once what this run did is unwound.
func (r *run) compensatedBefore(n int) {
	st := r.step(n)
	spec := r.specs[st.Tool]
	st.State, st.Waiting = ledger.Compensated, ""
	st.LastError = "compensated by an earlier run of this plan (found in the ledger): neither the tool nor its reversal was called"
	if spec.Compensable() && st.Compensation == nil {
		st.Compensation = &Compensation{Key: tool.CompensationKey(st.Key), Tool: spec.Compensator, State: ledger.Succeeded}
	}
	r.earlier = true
}

// gaveUp ends step n as failed without an effect and releases its ledger
// row (a pending row, or the row the ledger held for approval when held is
// set, would otherwise keep the guard scope). A row in needs_human for any
// other reason is a person's to settle and is never touched.
func (r *run) gaveUp(dctx workflow.Context, n int, held bool) bool {
	st := r.step(n)
	st.State, st.Waiting = ledger.FailedFinal, ""
	if r.specs[st.Tool].Class.IsWrite() {
		from := []ledger.Status{ledger.Pending, ledger.FailedFinal}
		if held {
			from = append(from, ledger.NeedsHuman)
		}
		r.transition(dctx, st.Key, ledger.FailedFinal, "", from...)
	}
	return false
}

// NotSentRetryFor is how long a step whose calls are provably not sent (a
// refused connection, a DNS failure: KindNotSent after the activity's own
// retries) is called again with backoff before it fails, whatever its class:
// a request that never left is the safest retry there is.
const NotSentRetryFor = time.Minute

// rideOut returns the wait before the next call of a step (or reversal) with
// key whose calls have been provably not sent since first, and whether to
// make it: while less than NotSentRetryFor has passed. calls counts the
// waits so far.
func (r *run) rideOut(ctx workflow.Context, key string, first time.Time, calls *int, retryAfter time.Duration) (time.Duration, bool) {
	left := NotSentRetryFor - workflow.Now(ctx).Sub(first)
	if left <= 0 || workflow.GetVersion(ctx, versionNotSentRidesOut, workflow.DefaultVersion, 1) != 1 {
		return 0, false
	}
	*calls++
	return min(r.backoff(key, *calls, retryAfter), max(left, time.Second)), true
}

// backoff is the wait before call number calls+1 of a step whose last call
// ended provably not done: exponential from firstCallRetry, capped, with a
// deterministic jitter from the key (so replays agree), and never shorter
// than the provider's Retry-After.
func (r *run) backoff(key string, calls int, retryAfter time.Duration) time.Duration {
	d := firstCallRetry << (calls - 1)
	if d > maxCallRetry || d <= 0 {
		d = maxCallRetry
	}
	h := fnv.New32a()
	_, _ = fmt.Fprintf(h, "%s#%d", key, calls)
	d += time.Duration(h.Sum32()%1000) * d / 4000 // up to +25%
	return max(d, retryAfter)
}

func (r *run) execute(ctx workflow.Context, spec tool.Spec, req activities.Request, attempts *int) (activities.Output, error) {
	if req.Summary == "" {
		// A step's request has its summary (request); a reversal's
		// is made here. Never empty: it holds the tool and the key.
		req.Summary = r.summary(spec, req)
	}
	actx := workflow.WithActivityOptions(ctx, ActivityOptions(spec, req.Key, req.Summary))
	var out activities.Output
	at := workflow.Now(ctx)
	err := workflow.ExecuteActivity(actx, activities.ExecuteToolName, req).Get(ctx, &out)
	before := *attempts
	if err == nil {
		*attempts += int(out.Attempt)
	} else if a := activities.DetailOf(err).Attempt; a > 0 {
		*attempts += int(a)
	} else {
		*attempts++
	}
	r.logCall(req.Key, at, spec, *attempts-before, out, err)
	return out, err
}

func (r *run) succeeded(n int, externalID string, result json.RawMessage) {
	st := r.step(n)
	st.State, st.ExternalID, st.Result, st.LastError, st.ErrorCode, st.Waiting = ledger.Succeeded, externalID, result, "", "", ""
	delete(r.calls, st.Key) // settled: no card asks about its calls (a long session keeps only live keys' logs)
	if r.specs[st.Tool].Compensable() {
		r.stack = append(r.stack, n)
	}
}

// settle settles an UNKNOWN step: reconcile on a bounded schedule, then ask
// a human. It returns succeeded, failed or retry (call again, same key), and
// whether a person decided.
func (r *run) settle(dctx workflow.Context, n int, spec tool.Spec, req activities.Request) (Outcome, bool) {
	st := r.step(n)
	since := workflow.Now(dctx)
	var rule string
	answers := []string{string(OutcomeSucceeded), string(OutcomeFailed), string(OutcomeRetry)}
	if !spec.NoLookup {
		look, tries, ok := r.reconcileUntil(dctx, spec, req)
		switch {
		case ok && look.Status == tool.Found:
			r.settled(dctx, since, "reconcile")
			r.succeeded(n, look.Result.ExternalID, look.Result.Data)
			return OutcomeSucceeded, false
		case ok && look.Status == tool.Mismatch:
			rule = fmt.Sprintf("the provider holds an effect under key %s made with other arguments (%s): it is not this step's unless a person adopts it (succeeded with its external id and why)", st.Key, look.Result.ExternalID)
			answers = r.mismatchAnswers(dctx)
		case ok:
			r.settled(dctx, since, "reconcile")
			return OutcomeRetry, false // authoritative absent: the same key may be sent again
		default:
			rule = fmt.Sprintf("outcome unknown: reconciled %d time(s) over %s and the provider could not say", tries, spec.Window())
		}
		st.LastError = rule + ": " + st.LastError
	} else {
		rule = fmt.Sprintf("%s has no way to look itself up: a person must say what happened", st.Tool)
		st.LastError = rule + ": " + st.LastError
	}
	d := r.askResolve(dctx, n, QuestionOutcome, rule, answers)
	r.settled(dctx, since, "human")
	switch d.Outcome {
	case OutcomeSucceeded:
		r.record(dctx, st.Key, ledger.Succeeded, d)
		r.succeeded(n, d.ExternalID, nil)
	case OutcomeFailed:
		r.record(dctx, st.Key, ledger.FailedFinal, d)
		st.State = ledger.FailedFinal
		st.LastError = fmt.Sprintf("resolved as failed by %s: %s", d.By, d.Note)
	case OutcomeRetry:
		r.record(dctx, st.Key, retryStatus(spec), d)
	}
	return d.Outcome, true
}

// retryStatus is the ledger state a person's `retry` of an outcome leaves a
// write in. A retry is "call again with the same key after reconciling": for
// a tool that can look itself up the row stays unknown, so the next claim
// reconciles by key first (found: succeeded, nothing sent; authoritatively
// absent: sent again; anything else: UNKNOWN again, reconciled for the
// tool's window and then asked again). Only for a tool without lookup is the
// person's word that nothing happened the last one: the row is pending and
// the call goes out.
func retryStatus(spec tool.Spec) ledger.Status {
	if spec.NoLookup {
		return ledger.Pending
	}
	return ledger.Unknown
}

// reconcileUntil asks the provider by key until it gives a definite answer
// (found, mismatch, or authoritatively absent) or the tool's window closes.
// ok is false when the window closed without one.
func (r *run) reconcileUntil(ctx workflow.Context, spec tool.Spec, req activities.Request) (tool.Lookup, int, bool) {
	deadline := workflow.Now(ctx).Add(spec.Window())
	gap := firstReconcile
	defer r.inFlight(req.Key, time.Time{})
	for i := 1; ; i++ {
		look, err := r.reconcile(ctx, req, i)
		if err == nil && look.Settles() {
			return look, i, true
		}
		left := deadline.Sub(workflow.Now(ctx))
		if left <= 0 {
			return tool.Lookup{}, i, false
		}
		next, summary := min(gap, left), "reconcile "+req.Key+": ask the provider again"
		if err == nil && !look.NotBefore.IsZero() && workflow.GetVersion(ctx, versionInFlightHorizon, workflow.DefaultVersion, 1) == 1 {
			// Absent, but the first request may still land: wait until
			// it no longer can (a durable timer), then look again.
			// Never past the window: then a person decides.
			until := look.NotBefore.Sub(workflow.Now(ctx)) + time.Second
			next = min(max(until, time.Second), left)
			summary = fmt.Sprintf("in-flight horizon %s: the first request may land until %s; then ask the provider again",
				req.Key, look.NotBefore.UTC().Format(time.RFC3339))
			r.inFlight(req.Key, look.NotBefore)
		} else {
			gap = min(2*gap, maxReconcileGap)
		}
		wait := workflow.NewTimerWithOptions(ctx, next, workflow.TimerOptions{Summary: summary})
		if err := wait.Get(ctx, nil); err != nil {
			return tool.Lookup{}, i, false
		}
	}
}

// inFlight shows on the step (or the reversal) with key until when its first
// request may still land (StepStatus.InFlightUntil); a zero until clears it.
func (r *run) inFlight(key string, until time.Time) {
	for i := range r.st.Steps {
		st := &r.st.Steps[i]
		switch {
		case st.Key == key:
			st.InFlightUntil = until
		case st.Compensation != nil && st.Compensation.Key == key:
			st.Compensation.InFlightUntil = until
		}
	}
}

func (r *run) reconcile(ctx workflow.Context, req activities.Request, i int) (tool.Lookup, error) {
	opts := bookkeeping
	opts.ActivityID = fmt.Sprintf("%s:reconcile:%d", req.Key, i)
	opts.Summary = "reconcile " + req.Key
	opts.RetryPolicy = &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumAttempts: 3}
	var look tool.Lookup
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.ReconcileToolName, req).Get(ctx, &look)
	r.logLookup(req.Key, workflow.Now(ctx), look, err)
	return look, err
}

// record writes a human's decision on key to the ledger (resolved_by is the
// person).
func (r *run) record(ctx workflow.Context, key string, status ledger.Status, d Decision) {
	r.recordOutcome(ctx, activities.Record{Key: key, Status: status, ExternalID: d.ExternalID, By: d.By, Note: d.Note})
}

// transition writes a machine change of key to the ledger; it keeps any
// human's record on the row.
func (r *run) transition(ctx workflow.Context, key string, status ledger.Status, externalID string, from ...ledger.Status) {
	r.recordOutcome(ctx, activities.Record{Key: key, Status: status, ExternalID: externalID, By: System, Machine: true, From: from})
}

func (r *run) recordOutcome(ctx workflow.Context, rec activities.Record) {
	opts := bookkeeping
	opts.Summary = fmt.Sprintf("ledger %s -> %s", rec.Key, rec.Status)
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.RecordName, rec).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Error("ledger not updated", "key", rec.Key, "status", rec.Status, "error", err)
		r.st.LedgerErrors = append(r.st.LedgerErrors, fmt.Sprintf("%s -> %s: %s", rec.Key, rec.Status, errText(err)))
	}
}

// reconcileFailed asks the provider whether the failed step n was really not
// done. If it has this step's effect, the step is a success to be reversed
// like the others; if it holds another effect under the key, a person says
// what it is.
func (r *run) reconcileFailed(dctx workflow.Context, n int) {
	st := r.step(n)
	spec := r.specs[st.Tool]
	if !spec.Class.IsWrite() || spec.NoLookup || st.State != ledger.FailedFinal || st.Attempts == 0 {
		return
	}
	switch r.lastErr[n] {
	case activities.ErrNoPermit, activities.ErrGuardRefused, activities.ErrAlreadyFinal, activities.ErrNotRegistered, activities.ErrHeld, activities.ErrClashUnseen:
		return // refused before anything was sent
	}
	look, err := r.reconcile(dctx, r.request(n), 0)
	switch {
	case err != nil:
		return
	case look.Status == tool.Found:
		r.transition(dctx, st.Key, ledger.Succeeded, look.Result.ExternalID)
		msg := st.LastError
		r.succeeded(n, look.Result.ExternalID, look.Result.Data)
		st.LastError = "reported failed but the provider has the effect: " + msg
	case look.Status == tool.Mismatch:
		rule := fmt.Sprintf("the step failed and the provider holds an effect under key %s made with other arguments (%s): it is not reversed unless a person says it is this step's", st.Key, look.Result.ExternalID)
		if len(look.Differences) > 0 {
			rule += ": " + strings.Join(look.Differences, "; ")
		}
		d := r.askResolve(dctx, n, QuestionOutcome, rule, r.mismatchAnswers(dctx))
		if d.Outcome == OutcomeSucceeded {
			// Adopted: this step's effect after all, reversed with the rest.
			r.record(dctx, st.Key, ledger.Succeeded, d)
			r.succeeded(n, d.ExternalID, nil)
			st.LastError = fmt.Sprintf("reported failed; %s adopted effect %s as this step's: %s", d.By, d.ExternalID, d.Note)
			return
		}
		r.record(dctx, st.Key, ledger.FailedFinal, d)
		st.State = ledger.FailedFinal
	}
}

// mismatchAnswers are the answers of a question about an effect the
// provider holds under a step's key made with other arguments: adopt it
// (succeeded, naming it and why) or not (failed).
func (r *run) mismatchAnswers(ctx workflow.Context) []string {
	if workflow.GetVersion(ctx, versionAdoptMismatch, workflow.DefaultVersion, 1) == 1 {
		return []string{string(OutcomeSucceeded), string(OutcomeFailed)}
	}
	return []string{string(OutcomeFailed)}
}

// compensate pops the whole saga stack (see unwind) and sets the plan's
// final state.
func (r *run) compensate(dctx workflow.Context) {
	if len(r.stack) == 0 {
		if r.earlier {
			r.setState(dctx, SagaCompensated)
			return
		}
		r.setState(dctx, SagaFailed)
		return
	}
	r.setState(dctx, SagaCompensating)
	steps := r.stack
	r.stack = nil
	r.unwind(dctx, steps)
	for _, s := range r.st.Steps {
		if s.State == ledger.CompensationFailed {
			r.setState(dctx, SagaCompensationFailed)
			return
		}
	}
	r.setState(dctx, SagaCompensated)
}

// unwind undoes steps (in push order) newest first, each by its reversal, in
// a disconnected context so a cancelled plan still compensates. Failed
// reversals are escalated to a human after every other reversal has run.
func (r *run) unwind(dctx workflow.Context, steps []int) {
	var failed []int
	for i := len(steps) - 1; i >= 0; i-- {
		if n := steps[i]; !r.compensateStep(dctx, n) {
			failed = append(failed, n)
		}
	}
	for _, n := range failed {
		r.escalateCompensation(dctx, n)
	}
}

// compensateStep runs step n's reversal with key {key}:compensate through the
// same path as any write: ledger claim, reconcile before retry, UNKNOWN
// reconciled on the compensator's schedule. It reports success.
func (r *run) compensateStep(dctx workflow.Context, n int) bool {
	st := r.step(n)
	spec := r.specs[st.Tool]
	cspec := r.specs[spec.Compensator]
	if st.Compensation == nil {
		st.Compensation = &Compensation{Key: tool.CompensationKey(st.Key), Tool: spec.Compensator}
	}
	c := st.Compensation
	st.State, c.State, c.LastError = ledger.Compensating, ledger.InProgress, ""
	req := r.reversalRequest(n)
	out, err := r.reverse(dctx, cspec, req, c)
	if err != nil {
		st.State, c.State, c.LastError = ledger.CompensationFailed, ledger.FailedFinal, errText(err)
		r.revErr[n] = activities.ErrorType(err)
		r.count(dctx, MetricCompensations, map[string]string{"result": "failed"})
		return false
	}
	r.count(dctx, MetricCompensations, map[string]string{"result": "succeeded"})
	st.State, c.State, c.ExternalID, c.LastError = ledger.Compensated, ledger.Succeeded, out.ExternalID, ""
	delete(r.calls, c.Key)
	r.transition(dctx, st.Key, ledger.Compensated, "")
	return true
}

// reverse runs a reversal to an answer: on the forward path's schedule (a
// call provably not done is made again with backoff and the provider's
// Retry-After, up to maxCalls; one provably not sent rides out a blip for
// NotSentRetryFor), an UNKNOWN one reconciled before anything is sent again.
// Plans recorded before versionReversalRetries called once more at most.
func (r *run) reverse(dctx workflow.Context, cspec tool.Spec, req activities.Request, c *Compensation) (activities.Output, error) {
	retries := workflow.GetVersion(dctx, versionReversalRetries, workflow.DefaultVersion, 1) == 1
	calls, notSentCalls := 0, 0
	var notSent time.Time
	for {
		calls++
		out, err := r.execute(dctx, cspec, req, &c.Attempts)
		if err == nil || !retries {
			if err != nil && activities.IsUnknown(err) {
				return r.reverseOnce(dctx, cspec, req, c, err)
			}
			return out, err
		}
		wait := activities.DetailOf(err).RetryAfter
		switch {
		case activities.ErrorType(err) == string(tool.KindNotSent):
			if notSent.IsZero() {
				notSent = workflow.Now(dctx)
			}
			d, ok := r.rideOut(dctx, req.Key, notSent, &notSentCalls, wait)
			if !ok {
				return out, err
			}
			calls--
			wait = d
		case activities.IsUnknown(err):
			c.State, c.LastError = ledger.Unknown, errText(err)
			look, _, ok := r.reconcileUntil(dctx, cspec, req)
			switch {
			case ok && look.Status == tool.Found:
				return activities.Output{ExternalID: look.Result.ExternalID}, nil
			case !ok || look.Status != tool.Absent || calls >= maxCalls:
				return out, err
			}
			// Provably not done: call again, same key, after a backoff.
			wait = r.backoff(req.Key, calls, wait)
		default:
			return out, err
		}
		_ = workflow.NewTimerWithOptions(dctx, wait, workflow.TimerOptions{Summary: fmt.Sprintf("backoff reversal %s before call %d", req.Key, calls+1)}).Get(dctx, nil)
		c.State = ledger.InProgress
	}
}

// reverseOnce is the reversal path of plans recorded before
// versionReversalRetries: reconcile an UNKNOWN reversal, and call once more
// if the provider has nothing.
func (r *run) reverseOnce(dctx workflow.Context, cspec tool.Spec, req activities.Request, c *Compensation, err error) (activities.Output, error) {
	c.State, c.LastError = ledger.Unknown, errText(err)
	look, _, ok := r.reconcileUntil(dctx, cspec, req)
	switch {
	case ok && look.Status == tool.Found:
		return activities.Output{ExternalID: look.Result.ExternalID}, nil
	case ok && look.Status == tool.Absent:
		return r.execute(dctx, cspec, req, &c.Attempts) // provably not done: once more, same key
	}
	return activities.Output{}, err
}

// reversalRequest is the request of step n's reversal under its current key.
func (r *run) reversalRequest(n int) activities.Request {
	st := r.step(n)
	c := st.Compensation
	args, _ := json.Marshal(tool.Reversal{
		OriginalKey: st.Key, OriginalTool: st.Tool, OriginalExternalID: st.ExternalID, OriginalArgs: r.plan.Steps[n-1].Args,
	})
	fp, _ := plan.Fingerprint(c.Tool, args)
	return activities.Request{Key: c.Key, Tool: c.Tool, Args: args, Fingerprint: fp, RequestID: r.plan.RequestID, Pinned: activities.PinnedOf(r.specs[c.Tool])}
}

// escalateCompensation hands a failed reversal to a human: succeeded means it
// was reversed by hand, retry runs the reversal again, failed accepts that it
// stays unreversed. A retry of a reversal the provider rejected for good is a
// new request (see retryRejectedReversal); any other retry sends the same key
// again, after reconciling it when the reversal can look itself up.
func (r *run) escalateCompensation(dctx workflow.Context, n int) {
	st := r.step(n)
	for st.State == ledger.CompensationFailed {
		// What the provider answered, the effect reversed and what each
		// answer does are lines of the card of their own (card, does).
		rule := fmt.Sprintf("the reversal %s of %s failed: the effect stays until a person answers", st.Compensation.Key, st.Key)
		rejected := r.revErr[n] == activities.ErrRejected
		if rejected {
			rule = fmt.Sprintf("the provider rejected the reversal %s of %s for good: the effect stays until a person answers", st.Compensation.Key, st.Key)
		}
		d := r.askResolve(dctx, n, QuestionReversal, rule, []string{string(OutcomeSucceeded), string(OutcomeRetry), string(OutcomeFailed)})
		switch d.Outcome {
		case OutcomeSucceeded:
			st.State, st.Compensation.State, st.Compensation.ExternalID = ledger.Compensated, ledger.Succeeded, d.ExternalID
			r.record(dctx, st.Key, ledger.Compensated, d)
			r.settleReversalRow(dctx, st.Compensation.Key, d)
			return
		case OutcomeRetry:
			if rejected && workflow.GetVersion(dctx, versionReversalRetryNewKey, workflow.DefaultVersion, 1) == 1 {
				r.retryRejectedReversal(dctx, n)
				continue
			}
			// The reversal's row is final in the ledger: the person's
			// decision reopens it, so the retry reaches the provider
			// (after a reconcile by key, for a reversal with lookup).
			r.record(dctx, st.Compensation.Key, retryStatus(r.specs[st.Compensation.Tool]), d)
			r.compensateStep(dctx, n)
		default:
			r.record(dctx, st.Key, ledger.CompensationFailed, d)
			r.settleReversalRow(dctx, st.Compensation.Key, d)
			return
		}
	}
}

// versionReversalRetryNewKey: a person's retry of a reversal the provider
// rejected for good reconciles the earlier reversal and then sends a new
// request under a new derived key (tool.ReversalRetryKey). Plans recorded
// before re-sent the same key, which a provider that stores answers by key
// rejects again forever.
const versionReversalRetryNewKey = "reversal-retry-new-key"

// round is the reversal round of step n: 1 for {key}:compensate, then 2, 3...
func (r *run) round(n int) int { return max(r.revRound[n], 1) }

// retryRejectedReversal runs a person's retry of step n's reversal after the
// provider rejected it for good. It asks the provider about the rejected
// reversal first: if it holds it after all (a provider that committed and
// answered no), the step is compensated and nothing is sent. Otherwise a new
// reversal request goes out under the next derived key,
// {key}:compensate:{round}: a provider that stores answers by key would
// replay the stored rejection for the old key forever.
func (r *run) retryRejectedReversal(dctx workflow.Context, n int) {
	st := r.step(n)
	c := st.Compensation
	old := r.reversalRequest(n)
	if look, err := r.reconcile(dctx, old, 0); err == nil && look.Status == tool.Found {
		r.transition(dctx, c.Key, ledger.Succeeded, look.Result.ExternalID)
		st.State, c.State, c.ExternalID, c.LastError = ledger.Compensated, ledger.Succeeded, look.Result.ExternalID, ""
		r.transition(dctx, st.Key, ledger.Compensated, "")
		return
	}
	r.revRound[n] = r.round(n) + 1
	c.Key = tool.ReversalRetryKey(st.Key, r.revRound[n])
	r.compensateStep(dctx, n)
}

// errText is the text of an activity's failure for the status: masked by
// the one redaction function, like the ledger's.
// settleReversalRow closes the reversal's own ledger row once a person has
// answered for it (reversed by hand, or left unreversed), so it does not
// stay in the exception queue. Plans recorded before this change replay
// unchanged.
func (r *run) settleReversalRow(dctx workflow.Context, key string, d Decision) {
	if workflow.GetVersion(dctx, versionReversalRowSettled, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	d.Note = strings.TrimSpace("reversal not run by the saga: " + d.Note)
	r.record(dctx, key, ledger.FailedFinal, d)
}

func errText(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return redact.String(ae.Message())
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return "attempt timed out: the request may have reached the provider"
	}
	return redact.String(err.Error())
}

package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
)

// The session contract: an agent that picks one tool at a time sends each
// model turn as an Update of one long-lived workflow per session.
const (
	// SessionWorkflowName is the workflow type of an interactive session.
	SessionWorkflowName = "AgentSession"
	// UpdateTurn takes a TurnRequest and returns a TurnResult. Send it with
	// Update-with-Start and Update ID {session}:{turn}.
	UpdateTurn = "turn"
	// UpdateEnd takes an EndRequest and ends the session.
	UpdateEnd = "end"
	// QueryTurn takes a turn number and returns its TurnResult now.
	// Temporal answers a repeated Update ID with the Update's first result
	// (within one run), so a turn that returned its open question is read
	// again with this query.
	QueryTurn = "turn_result"
)

// SessionWorkflowID returns the workflow ID of a session:
// agent-session:{session_id}.
func SessionWorkflowID(session string) string { return "agent-session:" + session }

// TurnUpdateID returns the Update ID of a turn: {session}:{turn}.
func TurnUpdateID(session string, turn int) string { return fmt.Sprintf("%s:%d", session, turn) }

// SessionStart is the input of AgentSession.
type SessionStart struct {
	SessionID   string `json:"session_id"`
	RequestedBy string `json:"requested_by,omitempty"`
	// KeepFailedTurns keeps the writes of a turn whose step failed for good
	// (the agent decides what to do next); by default they are
	// compensated at once.
	KeepFailedTurns bool `json:"keep_failed_turns,omitempty"`
	// TurnsPerRun, when positive, continues the session as new after that
	// many turns (besides whenever Temporal suggests it).
	TurnsPerRun int `json:"turns_per_run,omitempty"`
	// Carry is the state handed over by continue-as-new; clients leave it
	// empty.
	Carry *SessionCarry `json:"carry,omitempty"`
}

// TurnRequest is one model turn: the tool calls it wants made, in order
// (the same {tool, args} steps as a plan).
type TurnRequest struct {
	Turn      int    `json:"turn"`
	RequestID string `json:"request_id,omitempty"`
	// RequestedBy names who sent this turn: its cards say so and four eyes
	// refuses that principal's approval of the turn's steps. Empty means
	// the session's SessionStart.RequestedBy. A turn sent into a session
	// someone else started is requested by its own sender, not by the
	// session's starter.
	RequestedBy string `json:"requested_by,omitempty"`
	// Parallel runs the turn's steps at once (several tool calls in one
	// model message); see plan.Plan.Parallel.
	Parallel bool        `json:"parallel,omitempty"`
	Steps    []plan.Step `json:"steps"`
}

// Turn states.
const (
	TurnRunning   = "running"
	TurnWaiting   = "waiting" // a step waits for a person: see Question
	TurnSucceeded = "succeeded"
	TurnFailed    = "failed"
)

// TurnResult is what the agent gets back for a turn: the steps' results, or
// the open question when a step waits for a person (send the same turn again
// later to read the final result).
type TurnResult struct {
	Turn        int          `json:"turn"`
	Fingerprint string       `json:"fingerprint"`
	State       string       `json:"state"`
	Steps       []StepStatus `json:"steps"`
	Question    *Question    `json:"question,omitempty"`
	Error       string       `json:"error,omitempty"`
}

// EndRequest ends a session. Outcome "failed" compensates every write the
// session made (newest first); "succeeded" keeps them.
type EndRequest struct {
	Outcome string `json:"outcome"`
	By      string `json:"by,omitempty"`
}

// SessionCarry is a session's state across continue-as-new.
type SessionCarry struct {
	Status Status              `json:"status"`
	Args   []json.RawMessage   `json:"args"`
	Stack  []int               `json:"stack"`
	Turns  map[int]*turnRecord `json:"turns"`
	Seq    int                 `json:"seq"`
	// ArgBytes counts the args of every turn so far (MaxSessionArgBytes).
	ArgBytes int `json:"arg_bytes"`
	// UpsertOnChange is the first run's pinned choice (see
	// pinned.UpsertOnChange), carried: continue-as-new copies the search
	// attributes, so the next run cannot tell from them.
	UpsertOnChange bool `json:"upsert_on_change,omitempty"`
}

// turnRecord is what a session remembers of a turn.
type turnRecord struct {
	Fingerprint string `json:"fingerprint"`
	First       int    `json:"first"` // global step numbers first..last
	Last        int    `json:"last"`
	State       string `json:"state"`
	Error       string `json:"error,omitempty"`
}

// AgentSession runs an interactive session: each model turn arrives as an
// Update `turn` and runs on the same engine as AgentPlan (keys
// {session}:{turn}:{step}:{tool}, ledger, classes, reconcile, questions,
// reversals). The session's succeeded compensable steps stay on its stack
// until `end` (failed compensates them) or a cancel (compensates them).
func (s *Saga) AgentSession(ctx workflow.Context, in SessionStart) (Status, error) {
	var pin pinned
	onChange := in.Carry == nil && startedWithAttributes(ctx)
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		p := pinned{Specs: s.Specs, Limits: s.Limits.WithDefaults(), UpsertOnChange: onChange}
		// A session runs only under its own workflow ID, so nobody takes
		// another session's keys ({session}:{turn}:{step}:{tool}).
		if want := SessionWorkflowID(in.SessionID); in.SessionID != "" && id != want {
			p.Invalid = fmt.Sprintf("session %q runs only under the workflow ID %q, not %q: start it under its own ID", clip(in.SessionID, 140), want, clip(id, 300))
		}
		return p
	}).Get(&pin)
	if err != nil {
		return Status{}, fmt.Errorf("read the pinned tool specs: %w", err)
	}
	if in.SessionID == "" {
		return Status{}, temporal.NewNonRetryableApplicationError("session_id is required", "InvalidSession", nil)
	}
	if pin.Invalid != "" {
		return Status{}, temporal.NewNonRetryableApplicationError(pin.Invalid, "InvalidSession", nil)
	}
	r := newRunState(s, pin.Specs, plan.Plan{SessionID: in.SessionID, RequestedBy: in.RequestedBy})
	r.st = Status{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, SessionID: in.SessionID}
	ss := &session{run: r, in: in, turns: map[int]*turnRecord{}, limits: pin.Limits.WithDefaults()}
	r.upsertOnChange = pin.UpsertOnChange
	if c := in.Carry; c != nil {
		r.upsertOnChange = c.UpsertOnChange
		if workflow.GetInfo(ctx).ContinuedExecutionRunID == "" || len(c.Args) != len(c.Status.Steps) {
			return Status{}, temporal.NewNonRetryableApplicationError(
				"carry is the session's own state handed over by continue-as-new: clients leave it empty", "InvalidSession", nil)
		}
		ss.argBytes = c.ArgBytes
		r.st, r.stack, r.seq, ss.turns = c.Status, c.Stack, c.Seq, c.Turns
		for _, a := range c.Args {
			r.plan.Steps = append(r.plan.Steps, plan.Step{Args: a})
		}
		for i := range r.plan.Steps {
			r.plan.Steps[i].Tool = r.st.Steps[i].Tool
		}
		r.st.Questions, r.base = nil, c.Status.State
	}
	if err := r.register(ctx); err != nil {
		return Status{}, err
	}
	if err := ss.registerSession(ctx); err != nil {
		return Status{}, err
	}
	if in.Carry == nil {
		r.setState(ctx, SagaRunning)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)

	_ = workflow.Await(ctx, func() bool {
		if ss.ended != nil {
			return true
		}
		if ss.active == 0 && workflow.AllHandlersFinished(ctx) {
			info := workflow.GetInfo(ctx)
			return info.GetContinueAsNewSuggested() || (in.TurnsPerRun > 0 && ss.started >= in.TurnsPerRun)
		}
		return false
	})
	// A cancel or `end` lets the running turn finish (its call in flight,
	// its questions), then settles the stack.
	_ = workflow.Await(dctx, func() bool { return ss.active == 0 })
	if ctx.Err() == nil && ss.ended == nil {
		_ = workflow.Await(dctx, func() bool { return workflow.AllHandlersFinished(dctx) })
		next := in
		next.Carry = &SessionCarry{
			Status: r.st, Stack: r.stack, Turns: ss.turns, Seq: r.seq, ArgBytes: ss.argBytes, UpsertOnChange: r.upsertOnChange,
		}
		// Only what later turns need: the args of steps a reversal may
		// still need, and results up to a bound.
		onStack := map[int]bool{}
		for _, n := range r.stack {
			onStack[n] = true
		}
		next.Carry.Status.Steps = append([]StepStatus(nil), r.st.Steps...)
		for i, st := range r.plan.Steps {
			var a json.RawMessage
			if onStack[i+1] {
				a = st.Args
			}
			next.Carry.Args = append(next.Carry.Args, a)
			c := &next.Carry.Status.Steps[i]
			c.Decisions = nil
			if len(c.Result) > maxCarriedResult {
				c.Result = nil
			}
		}
		return Status{}, workflow.NewContinueAsNewError(ctx, SessionWorkflowName, next)
	}
	if ctx.Err() != nil || ss.ended.Outcome == string(OutcomeFailed) {
		if r.st.Error == "" {
			r.st.Error = "session ended: its writes are compensated"
		}
		r.compensate(dctx)
	} else {
		r.setState(dctx, SagaSucceeded)
	}
	return r.finish(ctx, dctx)
}

// session is the state of an interactive session on top of the engine.
type session struct {
	run     *run
	in      SessionStart
	turns   map[int]*turnRecord
	active  int // the turn running now, 0 if none
	started int // turns started in this run
	ended   *EndRequest
	// argBytes counts the bytes of the args of every turn so far.
	argBytes int
	limits   plan.Limits // pinned at the session's start
}

func (ss *session) registerSession(ctx workflow.Context) error {
	err := workflow.SetQueryHandler(ctx, QueryTurn, func(turn int) (TurnResult, error) {
		rec, ok := ss.turns[turn]
		if !ok {
			return TurnResult{}, fmt.Errorf("turn %d was never sent to this session", turn)
		}
		return ss.result(turn, rec), nil
	})
	if err != nil {
		return fmt.Errorf("register query %s: %w", QueryTurn, err)
	}
	// A turn arrives as raw JSON (a TurnRequest) so its bytes are checked
	// as strictly as the CLI checks a plan (see checkTurn).
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateTurn,
		func(ctx workflow.Context, raw json.RawMessage) (TurnResult, error) {
			t, err := decodeTurn(raw)
			if err != nil {
				return TurnResult{}, err
			}
			return ss.turn(ctx, t, raw)
		},
		workflow.UpdateHandlerOptions{
			Validator: func(ctx workflow.Context, raw json.RawMessage) error {
				t, err := decodeTurn(raw)
				if err == nil {
					_, err = ss.checkTurn(ctx, t, raw, true)
				}
				return err
			},
			Description: "Run one model turn's tool calls; returns their results or the open question.",
		})
	if err != nil {
		return fmt.Errorf("register update %s: %w", UpdateTurn, err)
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnd,
		func(ctx workflow.Context, e EndRequest) (Status, error) {
			ss.ended = &e
			return ss.run.st, nil
		},
		workflow.UpdateHandlerOptions{
			Validator: func(ctx workflow.Context, e EndRequest) error {
				switch {
				case e.Outcome != string(OutcomeSucceeded) && e.Outcome != string(OutcomeFailed):
					return refused("outcome %q is not one of succeeded, failed", e.Outcome)
				case ss.ended != nil:
					return refused("the session already ended (%s)", ss.ended.Outcome)
				}
				return checkText("by", e.By, MaxByLen, false)
			},
			Description: "End the session: failed compensates its writes, succeeded keeps them.",
		})
	if err != nil {
		return fmt.Errorf("register update %s: %w", UpdateEnd, err)
	}
	return nil
}

// decodeTurn reads a turn's JSON. What a plain decoder lets through
// (a key named twice, bytes that are not UTF-8, unknown fields) is refused
// by checkTurn's verdict; a payload a client sent unencrypted to a worker
// with codec keys is refused here.
func decodeTurn(raw json.RawMessage) (TurnRequest, error) {
	if codec.IsRefusedPlaintext(raw) {
		return TurnRequest{}, refused("%v", codec.ErrPlaintext)
	}
	var t TurnRequest
	if err := json.Unmarshal(raw, &t); err != nil {
		return TurnRequest{}, refused("the turn is not a TurnRequest (turn, request_id, requested_by, parallel, steps[] of {tool, args}): %s", redact.String(err.Error()))
	}
	return t, nil
}

// strictTurn checks a new turn's bytes and its Update ID: the bytes as
// strictly as plan.ParseBytes checks a plan (no key twice, UTF-8, no
// unknown fields, an integer turn), and the Update ID must be the turn's own
// {session}:{turn}, so a turn cannot take another turn's number (and keys).
func (ss *session) strictTurn(raw json.RawMessage, updateID string, turn int) string {
	if err := plan.CheckJSON(raw, ss.limits.MaxPlanBytes); err != nil {
		return "turn " + strconv.Itoa(turn) + ": " + err.Error()
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	var t TurnRequest
	if err := d.Decode(&t); err != nil {
		return "turn " + strconv.Itoa(turn) + ": " + redact.String(err.Error()) + " (a turn holds turn, request_id, requested_by, parallel and steps[] of {tool, args})"
	}
	if want := TurnUpdateID(ss.run.plan.SessionID, turn); updateID != want {
		return fmt.Sprintf("turn %d was sent with Update ID %q; a turn runs only under the Update ID %q ({session}:{turn} of its own number)", turn, clip(updateID, MaxQuestionIDLen), want)
	}
	return ""
}

// checkTurn validates a turn and returns its fingerprint. A turn sent again
// with the same payload is accepted (it returns the first result); with
// another payload it is a conflict.
func (ss *session) checkTurn(ctx workflow.Context, t TurnRequest, raw json.RawMessage, validating bool) (string, error) {
	updateID := ""
	if info := workflow.GetCurrentUpdateInfo(ctx); info != nil {
		updateID = info.ID
	}
	p := plan.Plan{SessionID: ss.run.plan.SessionID, Turn: t.Turn, RequestID: t.RequestID, RequestedBy: ss.requester(t), Parallel: t.Parallel, Steps: t.Steps}
	fp, err := p.Fingerprint()
	if err != nil {
		return "", refused("turn %d: %v", t.Turn, err)
	}
	if rec, ok := ss.turns[t.Turn]; ok {
		if rec.Fingerprint != fp {
			return "", refused("turn %d conflict: it already holds turn %s, refused turn %s; a changed turn needs a new turn number", t.Turn, rec.Fingerprint, fp)
		}
		if want := TurnUpdateID(ss.run.plan.SessionID, t.Turn); validating && updateID != want {
			return "", refused("turn %d was sent with Update ID %q; a turn is read only under the Update ID %q", t.Turn, clip(updateID, MaxQuestionIDLen), want)
		}
		return fp, nil
	}
	switch {
	case ss.ended != nil:
		return "", refused("the session has ended: start a new session")
	case ss.active != 0:
		return "", refused("turn %d is still running (see its open question): send turn %d when it has finished", ss.active, t.Turn)
	}
	if why := ss.verdict(ctx, p, func() string { return ss.strictTurn(raw, updateID, t.Turn) }, validating); why != "" {
		return "", refused("%s", why)
	}
	return fp, nil
}

// Session limits: everything a session did is handed over at
// continue-as-new, so a session is bounded.
const (
	// MaxSessionSteps bounds the tool calls of one session.
	MaxSessionSteps = 300
	// MaxSessionArgBytes bounds the bytes of all args of one session.
	MaxSessionArgBytes = 512 << 10
	// maxCarriedResult bounds a step's result kept across continue-as-new.
	maxCarriedResult = 1 << 10
)

// verdict validates a new turn against the pinned specs and limits and the
// session's bounds. In the Update's handler the verdict is recorded
// (SideEffect), so a later change of the validation code never changes a
// session's replay.
func (ss *session) verdict(ctx workflow.Context, p plan.Plan, strict func() string, validating bool) string {
	check := func() string {
		if why := strict(); why != "" {
			return why
		}
		if n := len(ss.run.st.Steps) + len(p.Steps); n > MaxSessionSteps {
			return fmt.Sprintf("the session would hold %d tool calls, the limit is %d (MaxSessionSteps): start a new session", n, MaxSessionSteps)
		}
		size := ss.argBytes
		for _, s := range p.Steps {
			size += len(s.Args)
		}
		if size > MaxSessionArgBytes {
			return fmt.Sprintf("the session's arguments would be %d bytes, the limit is %d (MaxSessionArgBytes): start a new session", size, MaxSessionArgBytes)
		}
		if err := p.ValidateWith(ss.run.specs, ss.limits); err != nil {
			return err.Error()
		}
		return ""
	}
	if validating || workflow.GetVersion(ctx, versionTurnVerdictRecorded, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return check()
	}
	var why string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return check() }).Get(&why); err != nil {
		return "the turn's verdict could not be read: " + err.Error()
	}
	return why
}

// turn runs (or, for a turn sent again, reads) a turn and returns when it
// has finished or one of its steps waits for a person.
func (ss *session) turn(ctx workflow.Context, t TurnRequest, raw json.RawMessage) (TurnResult, error) {
	fp, err := ss.checkTurn(ctx, t, raw, false)
	if err != nil {
		return TurnResult{}, err
	}
	rec, ok := ss.turns[t.Turn]
	if !ok {
		rec = ss.start(ctx, t, fp)
	}
	_ = workflow.Await(ctx, func() bool { return rec.State != TurnRunning || ss.waitingIn(rec) != nil })
	return ss.result(t.Turn, rec), nil
}

// requester returns who sent turn t: its own RequestedBy, else the
// session's.
func (ss *session) requester(t TurnRequest) string {
	if t.RequestedBy != "" {
		return t.RequestedBy
	}
	return ss.in.RequestedBy
}

// waitingIn returns the oldest open question of a step of rec, or nil.
func (ss *session) waitingIn(rec *turnRecord) *Question {
	for _, q := range ss.run.openList() {
		if q.Step >= rec.First && q.Step <= rec.Last {
			return &q
		}
	}
	return nil
}

func (ss *session) result(turn int, rec *turnRecord) TurnResult {
	r := ss.run
	res := TurnResult{Turn: turn, Fingerprint: rec.Fingerprint, State: rec.State, Error: rec.Error}
	res.Steps = append(res.Steps, r.st.Steps[rec.First-1:rec.Last]...)
	if q := ss.waitingIn(rec); q != nil {
		res.Question, res.State = q, TurnWaiting
	}
	return res
}

// start appends the turn's steps to the session and runs them in the
// background on the plan engine.
func (ss *session) start(ctx workflow.Context, t TurnRequest, fp string) *turnRecord {
	r := ss.run
	p := plan.Plan{SessionID: r.plan.SessionID, Turn: t.Turn, Steps: t.Steps}
	rec := &turnRecord{Fingerprint: fp, First: len(r.st.Steps) + 1, Last: len(r.st.Steps) + len(t.Steps), State: TurnRunning}
	for i, s := range t.Steps {
		ss.argBytes += len(s.Args)
		sfp, _ := p.StepFingerprint(i + 1)
		r.plan.Steps = append(r.plan.Steps, s)
		r.st.Steps = append(r.st.Steps, StepStatus{
			Step: len(r.st.Steps) + 1, Turn: t.Turn, Key: p.Key(i + 1), Tool: s.Tool, Class: r.specs[s.Tool].Class,
			Fingerprint: sfp, State: ledger.Pending,
		})
	}
	ss.turns[t.Turn] = rec
	ss.active, r.plan.Turn, r.plan.RequestID, r.st.Turn = t.Turn, t.Turn, t.RequestID, t.Turn
	// The turn's sender is its plan's requester while it runs: its cards
	// and four eyes see who sent it. Between turns (an end's reversals)
	// the session's own requester is.
	r.plan.RequestedBy = ss.requester(t)
	ss.started++
	workflow.Go(ctx, func(ctx workflow.Context) {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		defer func() { ss.active, r.plan.RequestedBy = 0, ss.in.RequestedBy }()
		pushed := len(r.stack)
		for _, g := range r.groups(ctx, rec.First, rec.Last, t.Parallel) {
			failed := r.runGroup(ctx, dctx, g)
			if len(failed) == 0 {
				continue
			}
			n := r.firstCause(failed)
			rec.Error = fmt.Sprintf("step %d (%s) failed: %s", n-rec.First+1, r.step(n).Tool, r.step(n).LastError)
			for _, f := range failed {
				r.reconcileFailed(dctx, f)
			}
			if !ss.in.KeepFailedTurns {
				mine := append([]int(nil), r.stack[pushed:]...)
				r.stack = r.stack[:pushed]
				r.unwind(dctx, mine)
			}
			r.setState(dctx, SagaRunning)
			rec.State = TurnFailed // after its reversals: the agent sees them done
			return
		}
		rec.State = TurnSucceeded
	})
	return rec
}

// Package mcpgw serves the registered tools to MCP clients (official Go SDK,
// github.com/modelcontextprotocol/go-sdk): every tools/call becomes one
// turn of the caller's AgentSession, so an agent that speaks MCP gets the
// saga's operation keys, ledger, side-effect classes, reconcile, approval
// and escalation without knowing about them.
//
// # Tools
//
// Every registered tool except reversals is listed, with an input JSON
// Schema made from its tool.Schema (see InputSchema) and annotations from
// its class (see Annotations).
//
// # Sessions, turns and keys
//
// A call is one turn of one step: turn T of session S runs under operation
// key {S}:{T}:1:{tool}. The session is the _meta field MetaSession when the
// client sends it, else the MCP session. The turn is named by the client
// with MetaTurn or MetaKey (a resent call with the same _meta reaches the
// same turn and key: the session answers it from its record, it never runs
// twice), else numbered by the gateway (1, 2, ... per session, continuing
// after the session's highest turn below KeyedTurnBase when the gateway
// first meets a session).
//
// # The suspected-duplicate rule (calls without a key)
//
// The gateway remembers, per session, the last call of each write
// (IDEMPOTENT_WRITE, CONDITIONAL_WRITE, NON_IDEMPOTENT_WRITE) with given
// arguments (tool plus canonical args, plan.Fingerprint), with its turn.
// That record is kept until the client has been given the call's final
// result (succeeded or failed), however long that takes (a person may
// decide hours later), and for Options.DuplicateWindow (default 10
// minutes) after that delivery. A write call WITHOUT MetaTurn or MetaKey
// that is identical to a remembered call is treated so:
//
//   - if the client was not yet given that call's final result (it waited
//     for a person, or its answer was lost), the call is a repeat of it: the
//     earlier turn is sent again under its own key and its current result
//     returned (still waiting, or final). Nothing new runs.
//   - if an identical call of the session is in progress in the gateway
//     right now (two calls sent at the same moment), the call attaches to
//     it and is given its result: one call, one turn.
//   - if the earlier call succeeded and the client was given that result,
//     the call is HELD FOR A PERSON as a suspected duplicate: it becomes a
//     new turn whose step asks a person first (an approval question whose
//     card names the earlier call); nothing runs unless the person
//     approves; the result says so, with the card, and carries Held (the
//     earlier call's turn and key). Repeating the call reads that held
//     turn, also once a person has decided: a rejected duplicate repeated
//     later is answered with the rejection and never runs. The held turn's
//     record is kept as the earlier call's is (until its final result was
//     given, and the window after). An approved and succeeded duplicate
//     becomes the call later ones are compared with.
//   - if the earlier call failed (it has no effect), the call runs as a new
//     turn.
//
// Reads are never held. Calls with MetaTurn or MetaKey are never held: the
// key says which calls are the same. The memory lives in the gateway
// process: a call after a gateway restart is not compared with calls
// before it, and a new MCP session is a new AgentSession, so clients that
// retry across restarts or sessions should send MetaSession and MetaKey.
//
// # Results
//
// The text content says what happened in words; structuredContent is a
// Result; the result's _meta carries MetaSession, MetaTurn and
// "agentsaga/operation_key". A call that waits for a person returns state
// "waiting" (isError false) with the question and its card; calling again
// the same way later returns the final result.
//
// # Time bounds
//
// A call without a progressToken answers within Options.CallTimeout
// (DefaultCallTimeout, 45 s: below the 60 s default request timeout of the
// official TypeScript and Python SDK clients): its result, "waiting" at once
// when the turn waits for a person, or "no answer yet" (call again the same
// way). A call whose request carries a progressToken stays open while its
// turn runs and then while it waits for a person, up to Options.PersonWait
// (DefaultPersonWait, 10 minutes), and is sent notifications/progress every
// Options.ProgressInterval (DefaultProgressInterval, 10 s) and at once when
// it starts waiting; it answers with the final result when the person
// decides within that time, else with "waiting". A client that sends a
// progressToken should reset its timeout on progress (TypeScript SDK:
// callTool's options onprogress and resetTimeoutOnProgress: true), or its
// own timeout ends the call first (the turn goes on; a repeat reads it).
// While a call waits for a person it lets go of its session's queue: the
// session's other calls are answered meanwhile.
package mcpgw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Defaults of Options.
const (
	// DefaultDuplicateWindow is how long an identical write without a key
	// counts as a suspected duplicate.
	DefaultDuplicateWindow = 10 * time.Minute
	// DefaultCallTimeout bounds how long one tools/call without a
	// progressToken waits for its turn: below the 60 s default request
	// timeout of the official TypeScript and Python SDK clients, so such a
	// client gets an answer ("no answer yet: call again the same way")
	// rather than a timeout of its own.
	DefaultCallTimeout = 45 * time.Second
	// DefaultProgressInterval is how often a call whose request carries a
	// progressToken is sent notifications/progress while its turn runs or
	// waits for a person: well below the 60 s default request timeout, so
	// a client that resets its timeout on progress (TypeScript SDK:
	// resetTimeoutOnProgress: true) never times out.
	DefaultProgressInterval = 10 * time.Second
	// DefaultPersonWait bounds how long a call whose request carries a
	// progressToken stays open, its turn running or waiting for a person.
	DefaultPersonWait = 10 * time.Minute
)

// Plans is what the gateway needs of the saga; *sagaclient.Client is one.
type Plans interface {
	// Turn sends a turn with Update-with-Start (see sagaclient.Client.Turn).
	Turn(ctx context.Context, session string, t workflows.TurnRequest, o sagaclient.SessionOptions) (workflows.TurnResult, error)
	// Status reads a workflow's status (the session's turns, when the
	// gateway first meets a session).
	Status(ctx context.Context, workflowID string) (workflows.Status, error)
}

// Options configure the gateway. The zero value is usable.
type Options struct {
	// DuplicateWindow is how long an identical write without a key is held
	// as a suspected duplicate (see the package documentation). Zero means
	// DefaultDuplicateWindow.
	DuplicateWindow time.Duration
	// CallTimeout bounds how long a call without a progressToken waits for
	// its turn to finish or to wait for a person; after it the call answers
	// "no answer yet" and repeating it reads the turn. A turn that waits
	// for a person is answered at once ("waiting"). Zero means
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// ProgressInterval is how often a call whose request carries a
	// progressToken is sent notifications/progress while it is open. Zero
	// means DefaultProgressInterval.
	ProgressInterval time.Duration
	// PersonWait bounds how long a call whose request carries a
	// progressToken stays open: its turn running, then waiting for a
	// person, whose decision it answers with the final result. After it
	// the call answers with the turn's state then ("waiting", or "no
	// answer yet"), and repeating the call reads the turn. Zero means
	// DefaultPersonWait.
	PersonWait time.Duration
	// Session configures the sessions the gateway starts (RequestedBy names
	// the agent, so its own approval is refused: four eyes).
	Session sagaclient.SessionOptions
	// Limits are the plan limits the worker validates with; the schemas'
	// bounds come from them. Zero fields mean their defaults.
	Limits plan.Limits
	// Now is the clock of the duplicate window; nil means time.Now.
	Now func() time.Time
	// Logger receives one line per held call and per failed call (tool,
	// session, turn, key; never arguments). Nil discards.
	Logger *slog.Logger
	// Version is the server version announced to clients.
	Version string
}

// gateway is the state behind the MCP server.
type gateway struct {
	plans  Plans
	specs  tool.Specs
	o      Options
	log    *slog.Logger
	mu     sync.Mutex
	byConn map[*mcp.ServerSession]string // minted session of a connection without an ID
	states map[string]*sessionState
	// watched are the MCP sessions whose AgentSession ends when they
	// close (see watch); ends counts the ends in progress.
	watched map[*mcp.ServerSession]bool
	ends    sync.WaitGroup
}

// sessionState is what the gateway keeps of one AgentSession.
type sessionState struct {
	lock   chan struct{} // held by the call in progress: calls of a session queue
	loaded bool          // next was read from the session
	next   int           // next turn the gateway numbers
	writes map[string]*record
	// flights are the unkeyed write calls in progress, by fingerprint: an
	// identical call arriving meanwhile attaches to one (g.mu guards it).
	flights map[string]*flight
	used    time.Time
}

// record is the last write call with given arguments in a session.
type record struct {
	turn  int
	step  plan.Step
	at    time.Time // when the call was first made
	given string    // state of the last result given to the client ("" if none)
	// delivered is when the client was first given the final result (zero
	// until then): the duplicate window counts from it.
	delivered time.Time
	// held is the turn that put a suspected duplicate of this call in
	// front of a person, if any.
	held *record
}

// final reports whether the client was given the call's final result.
func (r *record) final() bool {
	return r.given == workflows.TurnSucceeded || r.given == workflows.TurnFailed
}

// give notes the state of a result given to the client at now.
func (r *record) give(state string, now time.Time) {
	r.given = state
	if r.final() && r.delivered.IsZero() {
		r.delivered = now
	}
}

// settled reports whether the client was given the final result of the
// call and of its held duplicate, if any.
func (r *record) settled() bool {
	for x := r; x != nil; x = x.held {
		if !x.final() {
			return false
		}
	}
	return true
}

// expired reports whether the record may be forgotten: every final result
// of it (and of its held duplicate) was given at least window before now.
func (r *record) expired(now time.Time, window time.Duration) bool {
	for x := r; x != nil; x = x.held {
		if !x.final() || now.Sub(x.delivered) < window {
			return false
		}
	}
	return true
}

// flight is an unkeyed write call in progress; identical calls that arrive
// meanwhile wait for done and are given res (nil: the call sent nothing,
// so the next one leads).
type flight struct {
	done chan struct{}
	res  *mcp.CallToolResult
}

// New returns an MCP server that serves every registered, non-reversal tool
// of tools, each tools/call a turn of the caller's AgentSession sent with
// plans (a *sagaclient.Client). Serve it with (*mcp.Server).Run on a
// transport (mcp.StdioTransport) or with mcp.NewStreamableHTTPHandler.
func New(plans Plans, tools *tool.Registry, o Options) (*mcp.Server, error) {
	if plans == nil || tools == nil {
		return nil, errors.New("mcpgw: plans and tools are required: pass a *sagaclient.Client and the worker's tool registry")
	}
	if o.DuplicateWindow < 0 || o.CallTimeout < 0 || o.ProgressInterval < 0 || o.PersonWait < 0 {
		return nil, fmt.Errorf("mcpgw: duplicate window %s, call timeout %s, progress interval %s and person wait %s must not be negative: use 0 for the defaults",
			o.DuplicateWindow, o.CallTimeout, o.ProgressInterval, o.PersonWait)
	}
	if err := o.Limits.Check(); err != nil {
		return nil, fmt.Errorf("mcpgw: %w", err)
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.ProgressInterval == 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.PersonWait == 0 {
		o.PersonWait = DefaultPersonWait
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	o.Limits = o.Limits.WithDefaults()
	g := &gateway{plans: plans, specs: tools.Specs(), o: o, log: o.Logger,
		byConn: map[*mcp.ServerSession]string{}, states: map[string]*sessionState{}, watched: map[*mcp.ServerSession]bool{}}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "agentsaga", Title: "agentsaga MCP gateway", Version: o.Version}, &mcp.ServerOptions{
		Instructions: "Every tool call runs once per intent: a call resent with the same _meta \"agentsaga/key\" (a string you keep " +
			"for the call) is answered from its first run. Without a key, an identical write repeated before you were given its final result " +
			"is answered from the first call, and one repeated within " + o.DuplicateWindow.String() +
			" after you were given its success is held as a suspected duplicate. A call that waits for a person says so; call it again the same way later for its result. " +
			"A call sent with a progressToken stays open until the person decides (at most " + o.PersonWait.String() + "), with progress notifications every " +
			o.ProgressInterval.String() + ": reset your request timeout on progress.",
	})
	register(s, g)
	for _, name := range tools.Names() {
		spec := g.specs[name]
		if spec.Reversal {
			continue
		}
		s.AddTool(&mcp.Tool{
			Name:         spec.Name,
			Description:  description(spec),
			InputSchema:  InputSchema(spec, o.Limits),
			OutputSchema: OutputSchema(),
			Annotations:  Annotations(spec.Class),
			Meta:         mcp.Meta{"agentsaga/class": string(spec.Class), "agentsaga/compensable": spec.Compensable()},
		}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return g.call(ctx, spec, req), nil
		})
	}
	return s, nil
}

// sessionOf returns the AgentSession of a call: the explicit one, else the
// MCP session's.
func (g *gateway) sessionOf(ss *mcp.ServerSession, explicit string) string {
	if explicit != "" {
		return explicit
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ss != nil {
		if id := ss.ID(); id != "" {
			sum := sha256.Sum256([]byte(id))
			session := "mcp-" + hex.EncodeToString(sum[:16])
			g.watch(ss, session)
			return session
		}
	}
	if id, ok := g.byConn[ss]; ok {
		return id
	}
	id := "mcp-" + uuid.NewString()
	if ss != nil {
		g.watch(ss, id)
		g.byConn[ss] = id
		go func() {
			_ = ss.Wait()
			g.mu.Lock()
			delete(g.byConn, ss)
			g.mu.Unlock()
		}()
	}
	return id
}

// state returns the state of session, made on first use, and forgets
// sessions idle for longer than the window whose calls' final results were
// all given longer than the window ago.
func (g *gateway) state(session string) *sessionState {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.o.Now()
	for id, st := range g.states {
		if id != session && now.Sub(st.used) > g.o.DuplicateWindow && st.idle(now, g.o.DuplicateWindow) {
			delete(g.states, id)
		}
	}
	st, ok := g.states[session]
	if !ok {
		st = &sessionState{lock: make(chan struct{}, 1), writes: map[string]*record{}, flights: map[string]*flight{}}
		g.states[session] = st
	}
	st.used = now
	return st
}

// idle reports whether no call holds the session and every remembered
// call's final result was given at least window before now. Called with
// g.mu held.
func (st *sessionState) idle(now time.Time, window time.Duration) bool {
	if len(st.flights) > 0 {
		return false
	}
	select {
	case st.lock <- struct{}{}:
		<-st.lock
	default:
		return false
	}
	for _, r := range st.writes {
		if !r.expired(now, window) {
			return false
		}
	}
	return true
}

// load sets the next turn the gateway numbers: after the session's highest
// turn below KeyedTurnBase, or 1 for a session that does not exist yet.
func (g *gateway) load(ctx context.Context, session string, st *sessionState) error {
	if st.loaded {
		return nil
	}
	s, err := g.plans.Status(ctx, workflows.SessionWorkflowID(session))
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		st.next = max(st.next, 1)
	case err != nil:
		return fmt.Errorf("read the turns of session %s before numbering a call: %w (is a worker running? send _meta %q to name the turn yourself)", session, err, MetaKey)
	default:
		high := 0
		for _, step := range s.Steps {
			if step.Turn < KeyedTurnBase {
				high = max(high, step.Turn)
			}
		}
		st.next = max(st.next, high+1)
	}
	st.loaded = true
	return nil
}

// call runs one tools/call.
func (g *gateway) call(ctx context.Context, spec tool.Spec, req *mcp.CallToolRequest) *mcp.CallToolResult {
	out := Result{Tool: spec.Name}
	meta, err := parseMeta(req.Params.Meta)
	if err != nil {
		return refusal(out, err.Error())
	}
	out.Session = g.sessionOf(req.Session, meta.session)
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		var stop func()
		ctx, stop = g.progress(ctx, req.Session, tok)
		defer stop()
	}
	args, problems := g.checkArgs(spec, req.Params.Arguments)
	if problems != "" {
		return refusal(out, problems)
	}
	step := plan.Step{Tool: spec.Name, Args: args}
	id, err := plan.Fingerprint(spec.Name, args)
	if err != nil {
		return refusal(out, err.Error())
	}

	st := g.state(out.Session)
	if !spec.Class.IsWrite() || meta.turn != 0 {
		if res := g.run(ctx, st, spec, meta, id, out, step); res != nil {
			return res
		}
		return refusal(out, "the call was cancelled while an earlier call of the session ran: nothing was sent")
	}
	// An unkeyed write: an identical call in progress is this call.
	for {
		g.mu.Lock()
		f := st.flights[id]
		if f == nil {
			f = &flight{done: make(chan struct{})}
			st.flights[id] = f
			g.mu.Unlock()
			res := g.run(ctx, st, spec, meta, id, out, step)
			g.mu.Lock()
			f.res = clone(res) // the SDK writes to the result it is given: each call gets its own
			delete(st.flights, id)
			g.mu.Unlock()
			close(f.done)
			if res == nil {
				return refusal(out, "the call was cancelled while an earlier call of the session ran: nothing was sent")
			}
			return res
		}
		g.mu.Unlock()
		g.log.Info("mcp: an identical call of the session is in progress: this call attaches to it", "tool", out.Tool, "session", out.Session)
		select {
		case <-f.done:
			if f.res != nil {
				return clone(f.res)
			}
			// The call in progress was cancelled before it sent
			// anything: this one leads now.
		case <-ctx.Done():
			return refusal(out, "the call was cancelled while an identical call of the session ran: nothing was sent by this call; call again the same way to read that call's result")
		}
	}
}

// clone copies a result so that two calls never share one (nil stays nil).
func clone(r *mcp.CallToolResult) *mcp.CallToolResult {
	if r == nil {
		return nil
	}
	c := *r
	c.Content = slices.Clone(r.Content)
	c.Meta = maps.Clone(r.Meta)
	return &c
}

// run runs one call, in its session's queue. It returns nil if ctx ended
// before the call's turn in the queue (nothing was sent).
func (g *gateway) run(ctx context.Context, st *sessionState, spec tool.Spec, meta callMeta, id string, out Result, step plan.Step) *mcp.CallToolResult {
	select {
	case st.lock <- struct{}{}:
	case <-ctx.Done():
		return nil
	}
	lk := &sessionLock{st: st, held: true}
	defer lk.unlock()
	now := g.o.Now()
	write := spec.Class.IsWrite()
	prev := st.writes[id]
	if prev != nil && prev.expired(now, g.o.DuplicateWindow) {
		delete(st.writes, id)
		prev = nil
	}

	var rec *record
	remember := true
	switch {
	case meta.turn != 0:
		out.Turn = meta.turn
		if meta.turn < KeyedTurnBase {
			st.next = max(st.next, meta.turn+1)
		}
		if write {
			if prev != nil && prev.turn == meta.turn {
				rec = prev
			} else {
				rec = &record{turn: meta.turn, step: step, at: now}
				// An identical call whose client still waits for its
				// final result stays the one later calls repeat.
				remember = prev == nil || prev.settled()
			}
		}
	case write && prev != nil && !prev.final():
		// A repeat of a call whose final result the client has not had:
		// read that turn again under its own key.
		out.Turn, rec = prev.turn, prev
	case write && prev != nil && prev.given == workflows.TurnSucceeded:
		return g.hold(ctx, lk, id, out, prev, step, now)
	default:
		if err := g.load(ctx, out.Session, st); err != nil {
			return refusal(out, err.Error())
		}
		out.Turn = st.next
		st.next++
		if write {
			rec = &record{turn: out.Turn, step: step, at: now}
		}
	}
	if rec != nil && remember {
		st.writes[id] = rec
	}
	out.Key = plan.Key(out.Session, out.Turn, 1, spec.Name)

	res, err := g.send(ctx, out.Session, out.Turn, meta.key, step)
	if err == nil {
		var ok bool
		if res, ok = g.await(ctx, lk, out.Session, out.Turn, meta.key, step, res); !ok {
			// The client went away while a person decided: it is not
			// given this result, so it is not noted as given.
			return render(fill(out, res))
		}
	}
	if err != nil {
		if rec != nil && rec != prev && refused(err) {
			// The session refused the turn: nothing ran, so this call is
			// not remembered (the earlier one, if any, is again).
			if prev != nil {
				st.writes[id] = prev
			} else {
				delete(st.writes, id)
			}
		}
		return g.failure(out, err)
	}
	if rec != nil {
		rec.give(res.State, g.o.Now())
	}
	return render(fill(out, res))
}

// runningPoll is how often a turn read again while it runs (a repeat sent
// just after a person decided) is read until it settles.
const runningPoll = 200 * time.Millisecond

// send sends one turn of one step, bounded by the call timeout. A turn that
// is running when read (the call repeats a turn a person has just approved)
// is read again until it finishes or waits, within the timeout, so the
// caller gets its result rather than "running".
func (g *gateway) send(ctx context.Context, session string, turn int, key string, step plan.Step) (workflows.TurnResult, error) {
	if progressOf(ctx) == nil {
		// A call with progress is bounded by PersonWait (see progress).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.o.CallTimeout)
		defer cancel()
	}
	t := workflows.TurnRequest{Turn: turn, RequestID: key, Steps: []plan.Step{step}}
	for {
		res, err := g.plans.Turn(ctx, session, t, g.o.Session)
		if err != nil || res.State != workflows.TurnRunning {
			return res, err
		}
		select {
		case <-ctx.Done():
			return res, nil
		case <-time.After(runningPoll):
		}
	}
}

// hold answers a suspected duplicate: it becomes a new turn whose step asks
// a person first (plan.Step.Hold), with the earlier call named on the
// question's card. Nothing runs unless a person approves; repeating the call
// reads that same turn again, also after the person decided (a rejection
// stands). An approved second effect becomes the call to compare later ones
// with.
func (g *gateway) hold(ctx context.Context, lk *sessionLock, id string, out Result, prev *record, step plan.Step, now time.Time) *mcp.CallToolResult {
	st := lk.st
	earlier := plan.Key(out.Session, prev.turn, 1, out.Tool)
	h := &Held{Reason: "suspected_duplicate", Turn: prev.turn, Key: earlier, At: prev.at.UTC(),
		Window: g.o.DuplicateWindow.String(), HeldUntil: prev.delivered.Add(g.o.DuplicateWindow).UTC(), EarlierState: prev.given}
	rec := prev.held
	if rec == nil {
		if err := g.load(ctx, out.Session, st); err != nil {
			return refusal(out, err.Error())
		}
		step.Hold = tool.Clip(fmt.Sprintf("suspected duplicate of %s (the same %s with the same arguments %s earlier, sent without _meta %q): approve only if a second, separate effect is wanted",
			earlier, out.Tool, now.Sub(prev.at).Round(time.Second), MetaKey), plan.MaxHoldLen-len("..."))
		rec = &record{turn: st.next, step: step, at: now}
		st.next++
		prev.held = rec
		g.log.Warn("mcp: a suspected duplicate write waits for a person", "tool", out.Tool, "session", out.Session, "duplicate_of", earlier, "age", now.Sub(prev.at).Round(time.Second))
	}
	out.Turn = rec.turn
	out.Key = plan.Key(out.Session, rec.turn, 1, out.Tool)
	res, err := g.send(ctx, out.Session, rec.turn, "", rec.step)
	if err == nil {
		var ok bool
		if res, ok = g.await(ctx, lk, out.Session, rec.turn, "", rec.step, res); !ok {
			out = fill(out, res)
			out.Held = h
			return render(out)
		}
	}
	if err != nil {
		if refused(err) && rec.given == "" {
			prev.held = nil // the session refused the held turn: nothing was held
		}
		return g.failure(out, err)
	}
	rec.give(res.State, g.o.Now())
	if res.State == workflows.TurnSucceeded {
		st.writes[id] = rec // a person approved a second effect: compare later calls with it
	}
	out = fill(out, res)
	out.Held = h
	verdict := "it runs only if a person approves it (the question below); call it again the same way later for its result"
	if rec.final() {
		verdict = fmt.Sprintf("it was held for a person as turn %d, whose decision is below and stands: repeating the call reads it again and runs nothing", rec.turn)
	}
	out.Message = fmt.Sprintf("SUSPECTED DUPLICATE: this %s call is identical to %s (%s ago) and was sent without _meta %q; %s.\n",
		out.Tool, earlier, now.Sub(prev.at).Round(time.Second), MetaKey, verdict) + out.Message
	return render(out)
}

// checkArgs returns the canonical args of a call, or every problem with
// them in one message.
func (g *gateway) checkArgs(spec tool.Spec, raw json.RawMessage) (json.RawMessage, string) {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	// As strictly as a plan: a key named twice, bytes that are not UTF-8
	// (which canonical JSON would otherwise settle silently) are refused.
	if err := plan.CheckJSON(raw, plan.DefaultMaxPlanBytes); err != nil {
		return nil, spec.Name + " refused, nothing was run; fix and call again: arguments " + err.Error()
	}
	args, err := plan.Canonical(raw)
	if err != nil {
		return nil, "arguments " + err.Error()
	}
	probs := spec.CheckArgs("arguments", raw, argLimits(spec, g.o.Limits))
	if len(probs) == 0 {
		return args, ""
	}
	msg := fmt.Sprintf("%s refused (%d problem(s)), nothing was run; fix and call again:", spec.Name, len(probs))
	for _, p := range probs {
		msg += " " + p.Error() + ";"
	}
	return nil, msg[:len(msg)-1]
}

// refused reports whether the session refused a turn (its validator: a
// conflict, an ended session, a turn still waiting, a bad plan): nothing
// ran.
func refused(err error) bool {
	var app *temporal.ApplicationError
	var conflict *sagaclient.ConflictError
	var v *plan.ValidationError
	return errors.As(err, &app) || errors.As(err, &conflict) || errors.As(err, &v) || errors.Is(err, sagaclient.ErrSessionEnded)
}

// refusalText words a refusal for an agent: the reason alone, without
// Temporal's wording (an error type and "retryable: true" would invite a
// retry loop), and for a conflict what to do.
func refusalText(err error) string {
	var conflict *sagaclient.ConflictError
	if errors.As(err, &conflict) {
		return "conflict: this call's operation key already belongs to another call with other arguments: to make a new call, send it with a new " +
			MetaKey + " (or without one); to read the first call's result, send exactly the same arguments again"
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	return err.Error()
}

// blockedByQuestion is in the session's refusal of a new turn while an
// earlier one waits for a person.
const blockedByQuestion = "is still running (see its open question)"

// blockingQuestion words the refusal of a call while an earlier turn of
// the session waits for a person: which question blocks it and who
// answers it (the session's words say "running").
func (g *gateway) blockingQuestion(session, text string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wf := workflows.SessionWorkflowID(session)
	st, err := g.plans.Status(ctx, wf)
	if err != nil || len(st.Questions) == 0 {
		return text
	}
	q := st.Questions[0]
	cmd := "starter approve " + wf + " --step " + fmt.Sprint(q.Step) + " (or --reject)"
	if q.Kind != workflows.QuestionApproval {
		cmd = "starter resolve " + wf + " --step " + fmt.Sprint(q.Step) + " --outcome ..."
	}
	return fmt.Sprintf("an earlier call of this session WAITS FOR A PERSON: question %s (%s) on step %d, %s (operation key %s); "+
		"the session takes no new call until a person decides (`%s`); then call again, or send this call with another %q",
		q.ID, q.Kind, q.Step, clipText(q.Card.Change), q.Key, cmd, MetaSession)
}

// clipText clips a card's text for a message.
func clipText(s string) string { return tool.Clip(s, 120) }

// failure answers a call whose turn was refused or not answered.
func (g *gateway) failure(out Result, err error) *mcp.CallToolResult {
	g.log.Warn("mcp: call not answered", "tool", out.Tool, "session", out.Session, "turn", redact.Counter(out.Turn), "key", plan.KeyID(out.Key),
		"refused", refused(err), "error", redact.Identifier{Text: err.Error(), Counters: []int64{int64(out.Turn)}})
	if refused(err) {
		text := refusalText(err)
		if strings.Contains(text, blockedByQuestion) {
			text = g.blockingQuestion(out.Session, text)
		}
		return refusal(out, fmt.Sprintf("the session refused turn %d (%s): nothing was run. %s", out.Turn, out.Key, text))
	}
	out.State, out.Error = StateNoAnswer, err.Error()
	out.Message = fmt.Sprintf("NO ANSWER YET: turn %d (key %s) of session %s got no answer (%v). It may be running or may not have started. "+
		"Call this tool again with the same arguments and the same _meta: the repeat reads this turn under the same key and never runs it twice.",
		out.Turn, out.Key, out.Session, err)
	r := render(out)
	r.IsError = true
	return r
}

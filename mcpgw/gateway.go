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
// The gateway remembers, per caller, the last call of each write
// (IDEMPOTENT_WRITE, CONDITIONAL_WRITE, NON_IDEMPOTENT_WRITE) with given
// arguments (tool plus canonical args, plan.Fingerprint), with the turn and
// session that run it. The caller is the authenticated identity (the
// user id of the OAuth token the MCP handler verified), else the agent the
// gateway serves (Options.Session.RequestedBy, `starter mcp
// --requested-by`), else the AgentSession alone; a call that names its
// AgentSession (MetaSession) is compared with that session's calls only.
// The memory is kept in the ledger (Options.Calls, ledger.KeylessCall),
// shared by every gateway process: a caller whose connection dropped and
// who retries on a new one, or whose calls reach another replica, is the
// same caller. A record is kept until the caller has been given the call's
// final result (succeeded or failed), however long that takes (a person
// may decide hours later), and for Options.DuplicateWindow (default 10
// minutes) after that delivery. A write call WITHOUT MetaTurn or MetaKey
// that is identical to a remembered call is treated so:
//
//   - if the caller was not yet given that call's final result (it is in
//     flight, it waits for a person, or its answer was lost), the call is a
//     repeat of it, attached to it: the earlier turn is read again under
//     its own key (Temporal answers one Update ID once), in whichever
//     session and through whichever gateway, on this call's own context,
//     and its current result returned (still waiting, or final). Nothing
//     new runs, and a call never answers with another client's
//     cancellation.
//   - if the earlier call succeeded and the caller was given that result,
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
// key says which calls are the same. A caller who means an identical write
// twice sends each with its own MetaKey (or MetaTurn), or waits out the
// window.
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
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/ledger"
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
	// Calls is where the gateway remembers the writes callers sent
	// without a key: the ledger the workers use (any ledger.Store), shared
	// by every gateway process, so the same caller's identical call is one
	// call across reconnects and replicas. Required.
	Calls ledger.KeylessCalls
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

// sessionState is what the gateway keeps of one AgentSession: the queue
// of its calls and the next turn it numbers. What a caller sent without a
// key is kept in the ledger (see keyless.go), not here.
type sessionState struct {
	lock   chan struct{} // held by the call in progress: calls of a session queue
	load   sync.Mutex    // held while the session's turns are read (see number)
	loaded bool          // next was read from the session (load guards it)
	next   int           // next turn the gateway numbers (g.mu guards it)
	used   time.Time
}

// New returns an MCP server that serves every registered, non-reversal tool
// of tools, each tools/call a turn of the caller's AgentSession sent with
// plans (a *sagaclient.Client). Serve it with (*mcp.Server).Run on a
// transport (mcp.StdioTransport) or with mcp.NewStreamableHTTPHandler.
func New(plans Plans, tools *tool.Registry, o Options) (*mcp.Server, error) {
	if plans == nil || tools == nil {
		return nil, errors.New("mcpgw: plans and tools are required: pass a *sagaclient.Client and the worker's tool registry")
	}
	if o.Calls == nil {
		return nil, errors.New("mcpgw: Options.Calls is required: pass the workers' ledger (ledgerdb.Open of its DSN), where every gateway process keeps the calls sent without a key")
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
			"for the call) is answered from its first run. Without a key, an identical write you repeat before you were given its final result " +
			"is the same call, through any connection or gateway (answered from the first), and one repeated within " + o.DuplicateWindow.String() +
			" after you were given its success is held for a person as a suspected duplicate. To mean an identical write twice, send each with its own _meta \"agentsaga/key\" (or \"agentsaga/turn\"). " +
			"A call that waits for a person says so; call it again the same way later for its result. " +
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
// sessions no call has used for longer than the window (a session met
// again reads its turns again, see load).
func (g *gateway) state(session string) *sessionState {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.o.Now()
	for id, st := range g.states {
		if id != session && now.Sub(st.used) > g.o.DuplicateWindow && st.idle() {
			delete(g.states, id)
		}
	}
	st, ok := g.states[session]
	if !ok {
		st = &sessionState{lock: make(chan struct{}, 1)}
		g.states[session] = st
	}
	st.used = now
	return st
}

// idle reports whether no call holds the session. Called with g.mu held.
func (st *sessionState) idle() bool {
	select {
	case st.lock <- struct{}{}:
		<-st.lock
		return true
	default:
		return false
	}
}

// number returns the next turn the gateway numbers in the session: after
// the session's highest turn below KeyedTurnBase (read once, when the
// gateway first meets the session), or 1 for a session that does not exist
// yet. Each number is given once, so a call may claim its turn before it
// takes the session's queue; a number claimed and never sent leaves a gap.
func (g *gateway) number(ctx context.Context, session string, st *sessionState) (int, error) {
	st.load.Lock()
	defer st.load.Unlock()
	if !st.loaded {
		s, err := g.plans.Status(ctx, workflows.SessionWorkflowID(session))
		var notFound *serviceerror.NotFound
		high := 0
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return 0, fmt.Errorf("read the turns of session %s before numbering a call: %w (is a worker running? send _meta %q to name the turn yourself)", session, err, MetaKey)
		default:
			for _, step := range s.Steps {
				if step.Turn < KeyedTurnBase {
					high = max(high, step.Turn)
				}
			}
		}
		g.mu.Lock()
		st.next = max(st.next, high+1)
		g.mu.Unlock()
		st.loaded = true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := st.next
	st.next++
	return n, nil
}

// named notes a turn the client named, so the gateway numbers after it.
func (g *gateway) named(st *sessionState, turn int) {
	if turn < KeyedTurnBase {
		g.mu.Lock()
		st.next = max(st.next, turn+1)
		g.mu.Unlock()
	}
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
	if spec.Class.IsWrite() {
		k := keyless{g: g, caller: g.callerOf(req, meta.session, out.Session), id: id, step: step}
		if meta.turn == 0 {
			return k.call(ctx, st, out)
		}
		res := g.run(ctx, st, meta, out, step)
		if res == nil {
			return refusal(out, "the call was cancelled while an earlier call of the session ran: nothing was sent")
		}
		k.keyed(ctx, res)
		return res
	}
	if res := g.run(ctx, st, meta, out, step); res != nil {
		return res
	}
	return refusal(out, "the call was cancelled while an earlier call of the session ran: nothing was sent")
}

// run runs a read or a keyed call (one that names its turn), in its
// session's queue. It returns nil if ctx ended before the call's turn in
// the queue (nothing was sent).
func (g *gateway) run(ctx context.Context, st *sessionState, meta callMeta, out Result, step plan.Step) *mcp.CallToolResult {
	lk, ok := g.lock(ctx, st)
	if !ok {
		return nil
	}
	defer lk.unlock()
	if meta.turn != 0 {
		out.Turn = meta.turn
		g.named(st, meta.turn)
	} else {
		n, err := g.number(ctx, out.Session, st)
		if err != nil {
			return refusal(out, err.Error())
		}
		out.Turn = n
	}
	out.Key = plan.Key(out.Session, out.Turn, 1, step.Tool)
	res, err := g.send(ctx, out.Session, out.Turn, meta.key, step)
	if err != nil {
		return g.failure(out, err)
	}
	res, _ = g.await(ctx, lk, out.Session, out.Turn, meta.key, step, res)
	return render(fill(out, res))
}

// lock takes the session's queue, or returns false when ctx ends first.
func (g *gateway) lock(ctx context.Context, st *sessionState) (*sessionLock, bool) {
	select {
	case st.lock <- struct{}{}:
		return &sessionLock{st: st, held: true}, true
	case <-ctx.Done():
		return nil, false
	}
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

package mcpgw

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// TurnReader reads a turn of a session, also of one that has ended;
// *sagaclient.Client is one. When the Plans given to New is a TurnReader,
// a repeat of a keyless call whose AgentSession has ended since (its MCP
// session closed) is answered from that session's record of the turn.
type TurnReader interface {
	ReadTurn(ctx context.Context, session string, turn int) (workflows.TurnResult, error)
}

// maxRaces bounds how often one call decides again after another gateway
// process wrote its caller's memory first.
const maxRaces = 8

// maxCallerLen bounds a caller's name as the ledger keeps it; a longer one,
// or one that is not plain text, is kept as its SHA-256.
const maxCallerLen = 200

// callerOf names who sent a call, for the memory of keyless calls: the
// authenticated identity (an OAuth token's user id), else the agent the
// gateway serves (Options.Session.RequestedBy), else the AgentSession
// alone. A call that names its AgentSession (_meta MetaSession) is compared
// only with that session's calls of the caller.
func (g *gateway) callerOf(req *mcp.CallToolRequest, explicit, session string) string {
	var who string
	switch {
	case req.Extra != nil && req.Extra.TokenInfo != nil && req.Extra.TokenInfo.UserID != "":
		who = "user:" + req.Extra.TokenInfo.UserID
	case g.o.Session.RequestedBy != "":
		who = "agent:" + g.o.Session.RequestedBy
	default:
		return "session:" + session
	}
	if explicit != "" {
		who += " session:" + explicit
	}
	if len(who) > maxCallerLen || !utf8.ValidString(who) || strings.IndexByte(who, 0) >= 0 {
		sum := sha256.Sum256([]byte(who))
		who = "sha256:" + hex.EncodeToString(sum[:])
	}
	return who
}

// keyless is one write call of a caller, with its memory in the ledger: the
// same caller, tool and arguments (fingerprint) within the window is the
// same call, whichever MCP session, connection or gateway process it comes
// through.
type keyless struct {
	g      *gateway
	caller string
	id     string // plan.Fingerprint of the tool and canonical args
	step   plan.Step
}

// now is the gateway's clock at the precision the ledger keeps.
func (k keyless) now() time.Time { return k.g.o.Now().UTC().Truncate(time.Microsecond) }

// read returns the caller's memory of the call; Version 0 when none.
func (k keyless) read(ctx context.Context) (ledger.KeylessCall, error) {
	c, err := k.g.o.Calls.KeylessCall(ctx, k.caller, k.id)
	if errors.Is(err, ledger.ErrNotFound) {
		return ledger.KeylessCall{Caller: k.caller, Fingerprint: k.id}, nil
	}
	return c, err
}

// put writes c over the version read, with its ForgetAfter.
func (k keyless) put(ctx context.Context, c ledger.KeylessCall) error {
	c.Caller, c.Fingerprint = k.caller, k.id
	c.ForgetAfter = time.Time{}
	if settled(c) {
		c.ForgetAfter = c.Call.DeliveredAt
		if c.Held.Turn != 0 && c.Held.DeliveredAt.After(c.ForgetAfter) {
			c.ForgetAfter = c.Held.DeliveredAt
		}
		c.ForgetAfter = c.ForgetAfter.Add(k.g.o.DuplicateWindow)
	}
	_, err := k.g.o.Calls.PutKeylessCall(ctx, c)
	return err
}

// final reports whether a caller was given the turn's final result.
func final(t ledger.KeylessTurn) bool {
	return t.Given == workflows.TurnSucceeded || t.Given == workflows.TurnFailed
}

// settled reports whether a caller was given the final result of the call
// and of its held duplicate, if any.
func settled(c ledger.KeylessCall) bool {
	return final(c.Call) && (c.Held.Turn == 0 || final(c.Held))
}

// expired reports whether the memory counts no more: every final result of
// it was given at least window before now.
func expired(c ledger.KeylessCall, now time.Time, window time.Duration) bool {
	if c.Version == 0 {
		return true
	}
	if !settled(c) || now.Sub(c.Call.DeliveredAt) < window {
		return false
	}
	return c.Held.Turn == 0 || now.Sub(c.Held.DeliveredAt) >= window
}

// memoryRefusal words a call refused because the ledger could not be read
// or written.
func memoryRefusal(out Result, err error) *mcp.CallToolResult {
	return refusal(out, fmt.Sprintf("the gateway could not read or write its memory of your calls without a key (the ledger: %v): nothing was sent; call again, or send the call with _meta %q", err, MetaKey))
}

// call answers a write sent without a key (see the package documentation,
// "The suspected-duplicate rule").
func (k keyless) call(ctx context.Context, st *sessionState, out Result) *mcp.CallToolResult {
	for range maxRaces {
		c, err := k.read(ctx)
		if err != nil {
			return memoryRefusal(out, err)
		}
		now := k.now()
		var res *mcp.CallToolResult
		retry := false
		switch {
		case expired(c, now, k.g.o.DuplicateWindow):
			res, retry = k.fresh(ctx, st, c, out, now)
		case !final(c.Call):
			k.g.log.Info("mcp: an identical call of this caller is in progress or its final result was not given yet: this call attaches to it",
				"tool", out.Tool, "session", out.Session, "turn_session", c.Call.Session, "turn", c.Call.Turn)
			return k.repeat(ctx, st, c, out)
		case c.Call.Given == workflows.TurnSucceeded:
			res, retry = k.hold(ctx, st, c, out, now)
		default: // the earlier call failed: it has no effect
			res, retry = k.fresh(ctx, st, c, out, now)
		}
		if !retry {
			return res
		}
	}
	return refusal(out, "other gateway processes kept changing the memory of this call while it was decided: nothing was sent; call again the same way")
}

// fresh makes the call a new turn of its own session, remembered for the
// caller over c (its memory as read) before the call queues in its
// session, so an identical call that arrives meanwhile attaches to it.
// retry is true when another gateway wrote the memory first: nothing was
// sent.
func (k keyless) fresh(ctx context.Context, st *sessionState, c ledger.KeylessCall, out Result, now time.Time) (_ *mcp.CallToolResult, retry bool) {
	g := k.g
	n, err := g.number(ctx, out.Session, st)
	if err != nil {
		return refusal(out, err.Error()), false
	}
	t := ledger.KeylessTurn{Session: out.Session, Turn: int64(n), At: now}
	if err := k.put(ctx, ledger.KeylessCall{Call: t, Version: c.Version}); errors.Is(err, ledger.ErrStale) {
		return nil, true
	} else if err != nil {
		return memoryRefusal(out, err), false
	}
	out.Turn = n
	out.Key = plan.Key(out.Session, out.Turn, 1, out.Tool)
	lk, ok := g.lock(ctx, st)
	if !ok {
		return refusal(out, fmt.Sprintf("the call was cancelled while an earlier call of the session ran: nothing was sent; it is turn %d (key %s): call again the same way to run it", out.Turn, out.Key)), false
	}
	defer lk.unlock()
	res, err := g.send(ctx, out.Session, out.Turn, "", k.step)
	if err != nil {
		if refused(err) {
			// The session refused the turn: nothing ran, so the next
			// identical call runs as a new turn.
			k.give(ctx, t, workflows.TurnFailed)
		}
		return g.failure(out, err), false
	}
	res, ok = g.await(ctx, lk, out.Session, out.Turn, "", k.step, res)
	if given(ctx, ok) {
		k.give(ctx, t, res.State)
	}
	return render(fill(out, res)), false
}

// queue takes the queue of the session of this call when turn t is in it
// (a turn of another session is read out of any queue); ok is false when
// ctx ended first.
func (k keyless) queue(ctx context.Context, st *sessionState, out Result, t ledger.KeylessTurn) (*sessionLock, bool) {
	if t.Session != out.Session {
		return &sessionLock{}, true
	}
	return k.g.lock(ctx, st)
}

// repeat answers a call identical to one whose final result its caller was
// not given (still running, waiting for a person, or its answer lost): that
// turn is read again under its own key, whichever session it is in, on
// this call's own context (so a call whose client went away never answers
// for another). A turn of this call's session is read in the session's
// queue, after the call it repeats. Nothing new runs.
func (k keyless) repeat(ctx context.Context, st *sessionState, c ledger.KeylessCall, out Result) *mcp.CallToolResult {
	g := k.g
	lk, ok := k.queue(ctx, st, out, c.Call)
	out.Session, out.Turn = c.Call.Session, int(c.Call.Turn)
	out.Key = plan.Key(out.Session, out.Turn, 1, out.Tool)
	if !ok {
		return refusal(out, "the call was cancelled while an identical call ran: nothing was sent by this call; call again the same way to read that call's result")
	}
	defer lk.unlock()
	res, err := g.readTurn(ctx, out.Session, out.Turn, k.step)
	if err != nil {
		return g.failure(out, err)
	}
	res, ok = g.await(ctx, lk, out.Session, out.Turn, "", k.step, res)
	if given(ctx, ok) {
		k.give(ctx, c.Call, res.State)
	}
	return render(fill(out, res))
}

// hold answers a suspected duplicate: a call identical to one whose success
// its caller was given within the window. It becomes a new turn whose step
// asks a person first (plan.Step.Hold), with the earlier call named on the
// question's card. Nothing runs unless a person approves; repeating the
// call reads that same turn again, also after the person decided (a
// rejection stands). An approved second effect becomes the call to compare
// later ones with. retry is true when another gateway wrote the memory
// first: nothing was sent.
func (k keyless) hold(ctx context.Context, st *sessionState, c ledger.KeylessCall, out Result, now time.Time) (_ *mcp.CallToolResult, retry bool) {
	g := k.g
	earlier := plan.Key(c.Call.Session, int(c.Call.Turn), 1, out.Tool)
	h := &Held{Reason: "suspected_duplicate", Turn: int(c.Call.Turn), Key: earlier, At: c.Call.At.UTC(),
		Window: g.o.DuplicateWindow.String(), HeldUntil: c.Call.DeliveredAt.Add(g.o.DuplicateWindow).UTC(), EarlierState: c.Call.Given}
	ht := c.Held
	if ht.Turn == 0 {
		n, err := g.number(ctx, out.Session, st)
		if err != nil {
			return refusal(out, err.Error()), false
		}
		ht = ledger.KeylessTurn{Session: out.Session, Turn: int64(n), At: now}
		nc := c
		nc.Held = ht
		if err := k.put(ctx, nc); errors.Is(err, ledger.ErrStale) {
			return nil, true
		} else if err != nil {
			return memoryRefusal(out, err), false
		}
		g.log.Warn("mcp: a suspected duplicate write waits for a person", "tool", out.Tool, "session", out.Session, "duplicate_of", earlier, "age", now.Sub(c.Call.At).Round(time.Second))
	}
	step := k.heldStep(earlier, c.Call, ht)
	lk, ok := k.queue(ctx, st, out, ht)
	out.Session, out.Turn = ht.Session, int(ht.Turn)
	out.Key = plan.Key(out.Session, out.Turn, 1, out.Tool)
	if !ok {
		out.Held = h
		return refusal(out, fmt.Sprintf("the call was cancelled while an earlier call of the session ran: nothing was sent; it is held as turn %d (key %s): call again the same way to read it", out.Turn, out.Key)), false
	}
	defer lk.unlock()
	res, err := g.readTurn(ctx, out.Session, out.Turn, step)
	if err != nil {
		if refused(err) && ht.Given == "" {
			k.dropHeld(ctx, ht) // the session refused the held turn: nothing was held
		}
		return g.failure(out, err), false
	}
	res, ok = g.await(ctx, lk, out.Session, out.Turn, "", step, res)
	if !ok {
		out = fill(out, res)
		out.Held = h
		return render(out), false
	}
	if given(ctx, ok) {
		k.give(ctx, ht, res.State)
	}
	out = fill(out, res)
	out.Held = h
	verdict := "it runs only if a person approves it (the question below); call it again the same way later for its result. " +
		"If you mean a second, separate effect, send it with a new _meta \"" + MetaKey + "\" (or a new _meta \"" + MetaTurn + "\") instead"
	if res.State == workflows.TurnSucceeded || res.State == workflows.TurnFailed {
		verdict = fmt.Sprintf("it was held for a person as turn %d, whose decision is below and stands: repeating the call reads it again and runs nothing", ht.Turn)
	}
	out.Message = fmt.Sprintf("SUSPECTED DUPLICATE: this %s call is identical to %s (%s ago) and was sent without _meta %q; %s.\n",
		out.Tool, earlier, now.Sub(c.Call.At).Round(time.Second), MetaKey, verdict) + out.Message
	return render(out), false
}

// heldStep is the step of the turn that holds a suspected duplicate of
// call for a person: the call's step with a Hold naming the earlier call,
// made from what the ledger keeps, so every gateway makes the same one.
func (k keyless) heldStep(earlier string, call, held ledger.KeylessTurn) plan.Step {
	s := k.step
	s.Hold = tool.Clip(fmt.Sprintf("suspected duplicate of %s (the same %s with the same arguments %s earlier, sent without _meta %q): approve only if a second, separate effect is wanted",
		earlier, s.Tool, held.At.Sub(call.At).Round(time.Second), MetaKey), plan.MaxHoldLen-len("..."))
	return s
}

// given reports whether the result of a call is given to its client: it
// is still connected (a connection that dropped cancels its calls), and a
// call kept open for a person did not lose its client meanwhile (ok, from
// await).
func given(ctx context.Context, ok bool) bool {
	if p := progressOf(ctx); p != nil {
		return ok && p.client.Err() == nil
	}
	return ok && ctx.Err() == nil
}

// give notes in the caller's memory the state of a result given for turn
// t: the first final one starts the window. A held duplicate a person
// approved and that succeeded becomes the call later ones are compared
// with. A memory that no longer names t is left alone.
func (k keyless) give(ctx context.Context, t ledger.KeylessTurn, state string) {
	k.change(ctx, func(c *ledger.KeylessCall, now time.Time) bool {
		var x *ledger.KeylessTurn
		switch {
		case c.Call.Session == t.Session && c.Call.Turn == t.Turn:
			x = &c.Call
		case c.Held.Turn != 0 && c.Held.Session == t.Session && c.Held.Turn == t.Turn:
			x = &c.Held
		default:
			return false
		}
		if x.Given == state && (!final(*x) || !x.DeliveredAt.IsZero()) {
			return false
		}
		x.Given = state
		if final(*x) && x.DeliveredAt.IsZero() {
			x.DeliveredAt = now
		}
		if x == &c.Held && state == workflows.TurnSucceeded {
			c.Call, c.Held = c.Held, ledger.KeylessTurn{}
		}
		return true
	})
}

// dropHeld forgets the held turn t (the session refused it: nothing was
// held).
func (k keyless) dropHeld(ctx context.Context, t ledger.KeylessTurn) {
	k.change(ctx, func(c *ledger.KeylessCall, _ time.Time) bool {
		if c.Held.Session != t.Session || c.Held.Turn != t.Turn {
			return false
		}
		c.Held = ledger.KeylessTurn{}
		return true
	})
}

// keyed notes the result of a write sent with a key, so that an identical
// call without one is compared with it; an identical call whose caller
// still waits for its final result stays the one later calls repeat.
func (k keyless) keyed(ctx context.Context, res *mcp.CallToolResult) {
	out, ok := res.StructuredContent.(Result)
	if !ok || out.Turn == 0 || !given(ctx, true) {
		return
	}
	switch out.State {
	case workflows.TurnSucceeded, workflows.TurnFailed, workflows.TurnWaiting, workflows.TurnRunning:
	default:
		return // refused or not answered: nothing to remember
	}
	t := ledger.KeylessTurn{Session: out.Session, Turn: int64(out.Turn)}
	k.change(ctx, func(c *ledger.KeylessCall, now time.Time) bool {
		live := !expired(*c, now, k.g.o.DuplicateWindow)
		switch {
		case live && c.Call.Session == t.Session && c.Call.Turn == t.Turn:
		case live && !settled(*c):
			return false
		default:
			*c = ledger.KeylessCall{Call: ledger.KeylessTurn{Session: t.Session, Turn: t.Turn, At: now}, Version: c.Version}
		}
		c.Call.Given = out.State
		if final(c.Call) && c.Call.DeliveredAt.IsZero() {
			c.Call.DeliveredAt = now
		}
		return true
	})
}

// change applies f to the caller's memory and writes it, deciding again
// when another gateway wrote it first. A memory that cannot be written is
// logged: the call's result stands, only its comparison with later calls is
// lost.
func (k keyless) change(ctx context.Context, f func(c *ledger.KeylessCall, now time.Time) bool) {
	// The result is being given: note it even if the client has just
	// gone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for range maxRaces {
		c, err := k.read(ctx)
		if err == nil {
			if !f(&c, k.now()) {
				return
			}
			if err = k.put(ctx, c); err == nil || !errors.Is(err, ledger.ErrStale) {
				if err != nil {
					k.g.log.Warn("mcp: the memory of a call without a key could not be written", "tool", k.step.Tool, "error", err)
				}
				return
			}
			continue
		}
		k.g.log.Warn("mcp: the memory of a call without a key could not be read", "tool", k.step.Tool, "error", err)
		return
	}
}

// readTurn reads a turn that exists or should (sending it again under its
// own key: a turn never sent is sent now), and one of a session that has
// ended since from its record (TurnReader).
func (g *gateway) readTurn(ctx context.Context, session string, turn int, step plan.Step) (workflows.TurnResult, error) {
	res, err := g.send(ctx, session, turn, "", step)
	if r, ok := g.plans.(TurnReader); ok && errors.Is(err, sagaclient.ErrSessionEnded) {
		return r.ReadTurn(ctx, session, turn)
	}
	return res, err
}

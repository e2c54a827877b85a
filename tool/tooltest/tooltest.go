// Package tooltest is the kit every tool passes, whether it is declared in a
// catalogue (package catalog) or written in Go: run from the tool's own tests
// with a Harness that says what the kit cannot know,
//
//	func TestToolKit(t *testing.T) { tooltest.Run(t, harness) }
//
// and each promise the saga relies on is a named subtest:
//
//	SameKeyEveryAttempt          the same operation key reaches the provider on
//	                             every attempt, and three attempts with it leave
//	                             one effect in the provider's store
//	LostAnswerIsUnknown          an answer lost after the provider committed is
//	                             tool.KindUnknown, and the tool's Reconcile finds
//	                             the effect (and its Match accepts it as the
//	                             call's own) while a key never sent is not found
//	RefusedConnectionIsNotSent   a refused connection is tool.KindNotSent, nothing
//	                             reached the provider, and sending again works
//	BusinessRejectionIsFinal     a business 4xx is tool.KindRejected and leaves no
//	                             effect
//	ReusedKeyIsConflict          the key reused with other args is a conflict: the
//	                             provider refuses it (tool.KindConflict) or the
//	                             tool's Match (tool.Differences) tells the effect
//	                             found under the key from the changed call
//	ReversalHasOwnKey            the compensator sends tool.CompensationKey of the
//	                             original's key with a tool.Reversal as args, a lost
//	                             answer of it is UNKNOWN, a retry makes one
//	                             reversal under its own key, and its Match tells a
//	                             reversal of another effect apart
//
// The kit puts a reverse proxy of its own in front of the provider
// (Harness.Provider) and builds the tools against the proxy's URL
// (Harness.New): the proxy records every request, and drops the answer of the
// next write after the provider answered (the provider committed, the caller
// never hears) or answers a business rejection in the provider's place. A
// refused connection is a loopback port nobody listens on. So the tool must
// call its provider over HTTP under one base URL; a tool on another protocol
// is tested with its own fakes.
//
// A tool whose class says the provider deduplicates (IDEMPOTENT_WRITE,
// CONDITIONAL_WRITE) is held to it: repeated sends under one key make one
// effect. A NON_IDEMPOTENT_WRITE with a lookup is held to what the engine
// does with it instead: after a lost answer it is looked up, never sent
// again while its effect is found, so the kit looks it up where it would
// resend, and checks that the lookup finds the one effect and that Match
// tells a call with other args apart. Such a provider may ignore keys
// altogether (a lookup-only provider, the key in a field it only keeps).
// The lookups go through package probe's Look, which the engine's
// activities mirror (ReconcileCall when the tool has it).
//
// Promises that do not apply are skipped, saying why: a READ tool makes no
// effect (only LostAnswerIsUnknown without reconcile, RefusedConnectionIsNotSent
// and BusinessRejectionIsFinal run), a tool without a compensator has no
// reversal, and a provider that keeps nothing by key (Harness.Effects nil)
// cannot be counted by key, so its tool must declare NoLookup.
//
// Effects are counted in the provider's own store (Harness.Effects), never
// from what the tool says. Each Run uses keys of a fresh random session, so
// several Runs may share one provider.
//
// Stability: experimental. The Harness may gain fields and the promises may
// grow before 1.0.
package tooltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/probe"
)

// Harness tells the kit how to build, call and count one tool.
type Harness struct {
	// Tool is the name of the tool under test (its Spec().Name).
	Tool string
	// Provider is the base URL the kit's proxy forwards to: the root of the
	// provider the tool calls, such as http://127.0.0.1:40123.
	Provider string
	// New builds the tools calling the provider at baseURL (the kit's
	// proxy, or a URL that refuses every connection): the tool named Tool
	// and, when that tool declares a Compensator, the compensator too. It
	// may return others; the kit ignores them.
	New func(t testing.TB, baseURL string) []tool.Tool
	// Args are the args of a valid call the provider accepts. Every Run
	// makes several effects with them, each under its own key.
	Args json.RawMessage
	// Changed are other valid args of the same tool, differing in a field
	// the provider records (the amount, the recipient): the reused-key
	// case. Required for writes.
	Changed json.RawMessage
	// Rejected, when set, are args the provider refuses with a business
	// 4xx (a declined amount, an unknown order). Nil makes the proxy answer
	// 400 {"error":{"code":"tooltest_rejected",...}} in the provider's
	// place.
	Rejected json.RawMessage
	// Effects returns the provider's ids of the effects committed under key
	// (the ids the tool reports as Result.ExternalID), read from the
	// provider's own store. Nil declares a provider that keeps nothing by
	// key (a plain mail relay): the counts are skipped and the tool must
	// declare NoLookup. Unused for READ tools.
	Effects func(ctx context.Context, key string) ([]string, error)
}

// Subtest names, as Run runs them.
const (
	SameKeyEveryAttempt        = "SameKeyEveryAttempt"
	LostAnswerIsUnknown        = "LostAnswerIsUnknown"
	RefusedConnectionIsNotSent = "RefusedConnectionIsNotSent"
	BusinessRejectionIsFinal   = "BusinessRejectionIsFinal"
	ReusedKeyIsConflict        = "ReusedKeyIsConflict"
	ReversalHasOwnKey          = "ReversalHasOwnKey"
)

// findWait bounds how long a Reconcile is polled for an effect the provider
// committed (a search index may lag).
const findWait = 10 * time.Second

// Run runs every promise against the tool h describes, each as a subtest
// named by the constants above.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Tool == "" || h.New == nil || h.Provider == "" || len(h.Args) == 0 {
		t.Fatal("tooltest: the Harness needs Tool, Provider, New and Args")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	session := "tooltest-" + hex.EncodeToString(b[:])
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{SameKeyEveryAttempt, testSameKey},
		{LostAnswerIsUnknown, testLostAnswer},
		{RefusedConnectionIsNotSent, testRefused},
		{BusinessRejectionIsFinal, testRejection},
		{ReusedKeyIsConflict, testReusedKey},
		{ReversalHasOwnKey, testReversal},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(newEnv(t, h, fmt.Sprintf("%s:1:%d:%s", session, i+1, h.Tool)))
		})
	}
}

// env is one subtest's tool behind its own proxy.
type env struct {
	t     *testing.T
	h     Harness
	key   string
	p     *proxy
	tools []tool.Tool
	tl    tool.Tool
	spec  tool.Spec
	write bool
}

func newEnv(t *testing.T, h Harness, key string) *env {
	e := &env{t: t, h: h, key: key}
	e.p = newProxy(t, h.Provider)
	e.tools = h.New(t, e.p.URL())
	e.tl = e.find(e.tools, h.Tool)
	e.spec = e.tl.Spec()
	e.write = e.spec.Class.IsWrite()
	e.p.faultAnyMethod(!e.write)
	for name, args := range map[string]json.RawMessage{"Args": h.Args, "Changed": h.Changed} {
		if len(args) == 0 {
			continue
		}
		if errs := e.spec.Args.Check(name, args); len(errs) > 0 {
			t.Fatalf("tooltest: Harness.%s are refused by %s's own schema: %v", name, h.Tool, errs)
		}
	}
	return e
}

func (e *env) find(tools []tool.Tool, name string) tool.Tool {
	e.t.Helper()
	for _, tl := range tools {
		if tl != nil && tl.Spec().Name == name {
			return tl
		}
	}
	e.t.Fatalf("tooltest: Harness.New returned no tool named %q", name)
	return nil
}

// exec runs one attempt of tl, bounded by twice the tool's timeout.
func (e *env) exec(tl tool.Tool, key string, args json.RawMessage, attempt int32) (tool.Result, error) {
	d := 2 * tl.Spec().Timeout
	if d <= 0 {
		d = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return tl.Execute(ctx, tool.Call{Key: key, Args: args, Attempt: attempt})
}

// attempt runs tl and checks that some request of the attempt carried key.
func (e *env) attempt(tl tool.Tool, key string, args json.RawMessage, n int32) (tool.Result, error) {
	e.t.Helper()
	m := e.p.mark()
	res, err := e.exec(tl, key, args, n)
	reqs := e.p.since(m)
	if !slices.ContainsFunc(reqs, func(s seen) bool { return s.carries(key) }) {
		e.t.Errorf("attempt %d of %s sent %d request(s) and none carried the operation key %q: send Call.Key on every attempt (a header such as Idempotency-Key, a body field or the path), never a key of the tool's own", n, tl.Spec().Name, len(reqs), key)
	}
	return res, err
}

// effects reads the provider's store: the ids committed under key.
func (e *env) effects(key string) []string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids, err := e.h.Effects(ctx, key)
	if err != nil {
		e.t.Fatalf("tooltest: count the provider's effects under %s: %v", key, err)
	}
	return ids
}

// wantEffects checks that the provider holds n effects under key.
func (e *env) wantEffects(key string, n int, when string) []string {
	e.t.Helper()
	ids := e.effects(key)
	if len(ids) != n {
		e.t.Errorf("%s: the provider's store holds %d effect(s) under key %q (%v), want %d", when, len(ids), key, ids, n)
	}
	return ids
}

// lookup polls tl's lookup for the call (key, args) until it answers Found
// or Mismatch, an authoritative Absent, or findWait passes; it returns the
// last answer.
func (e *env) lookup(tl tool.Tool, key string, args json.RawMessage) (tool.Lookup, error) {
	deadline := time.Now().Add(findWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		l, err := probe.Look(ctx, tl, tool.Call{Key: key, Args: args, Attempt: 1})
		cancel()
		if (err == nil && probe.Settled(l)) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(50 * time.Millisecond) // polling the provider's index with a deadline
	}
}

// dedups reports whether spec's class says the provider deduplicates by
// key (or condition), so a repeated send must make no second effect.
func dedups(spec tool.Spec) bool {
	return spec.Class == tool.IdempotentWrite || spec.Class == tool.ConditionalWrite
}

// looksUpFirst reports whether the engine looks tl's unknown outcome up
// instead of sending again: a NON_IDEMPOTENT_WRITE with a lookup.
func looksUpFirst(tl tool.Tool) bool {
	_, ok := tl.(tool.Reconciler)
	return ok && !dedups(tl.Spec())
}

// mustFind checks that tl's lookup finds the effect committed under key
// with args (one of ids, when the store was counted) and returns it.
func (e *env) mustFind(tl tool.Tool, key string, args json.RawMessage, ids []string) (tool.Result, bool) {
	e.t.Helper()
	name := tl.Spec().Name
	l, err := e.lookup(tl, key, args)
	switch {
	case err != nil:
		e.t.Errorf("%s's Reconcile(%q) failed after the provider committed: %v (status %s)", name, key, err, l.Status)
		return tool.Result{}, false
	case l.Status == tool.Absent && l.Authoritative:
		e.t.Errorf("%s's Reconcile(%q) says absent, authoritatively, although the provider committed an effect under the key: the saga would send it again", name, key)
		return tool.Result{}, false
	case l.Status == tool.Mismatch:
		e.t.Errorf("%s's Reconcile(%q) calls the call's own effect a mismatch (%v): its Match compares fields the provider does not echo as sent", name, key, l.Differences)
		return tool.Result{}, false
	case l.Status != tool.Found:
		e.t.Errorf("%s's Reconcile(%q) did not find the committed effect within %s (last answer %s)", name, key, findWait, l.Status)
		return tool.Result{}, false
	case l.Result.ExternalID == "":
		e.t.Errorf("%s's Reconcile(%q) found the effect without its external id", name, key)
	case ids != nil && !slices.Contains(ids, l.Result.ExternalID):
		e.t.Errorf("%s's Reconcile(%q) found %q, but the provider's store holds %v under the key", name, key, l.Result.ExternalID, ids)
	}
	return l.Result, true
}

func (e *env) needWrite(why string) {
	if !e.write {
		e.t.Skipf("%s is a %s tool: it makes no effect, so %s", e.h.Tool, e.spec.Class, why)
	}
}

// needEffects skips the rest of the subtest when the provider keeps nothing
// by key (Harness.Effects nil).
func (e *env) needEffects(why string) {
	if e.h.Effects == nil {
		e.noKeyStore()
		e.t.Skipf("the provider keeps nothing by key (Harness.Effects is nil), so %s", why)
	}
}

// noKeyStore checks that a tool whose provider keeps nothing by key sends
// its unknown outcomes to a person.
func (e *env) noKeyStore() {
	if !e.spec.NoLookup {
		e.t.Errorf("Harness.Effects is nil (the provider keeps nothing by key) but %s does not declare NoLookup: a write whose provider keeps no key cannot be reconciled, declare NoLookup so a person settles its unknown outcomes", e.h.Tool)
	}
}

// testSameKey: three attempts with one key, the first one's answer lost after
// commit, carry the key and leave one effect. A tool the engine looks up
// before it sends again is looked up instead of resent.
func testSameKey(e *env) {
	e.needWrite("there is no key to keep")
	e.p.arm(dropAnswer)
	_, _ = e.attempt(e.tl, e.key, e.h.Args, 1)
	if e.p.firedOn() == nil {
		e.t.Errorf("attempt 1 sent no write the kit could drop the answer of")
	}
	if looksUpFirst(e.tl) {
		e.t.Logf("%s is a %s with a lookup: the engine looks a lost answer up before it sends again, so the kit does", e.h.Tool, e.spec.Class)
		var ids []string
		if e.h.Effects != nil {
			ids = e.wantEffects(e.key, 1, "after the lost answer")
		}
		e.mustFind(e.tl, e.key, e.h.Args, ids)
		return
	}
	r2, err2 := e.attempt(e.tl, e.key, e.h.Args, 2)
	r3, err3 := e.attempt(e.tl, e.key, e.h.Args, 3)
	if err2 != nil || err3 != nil {
		e.t.Fatalf("attempts 2 and 3 with the same key and args failed (%v; %v): the provider should answer with the effect it committed", err2, err3)
	}
	if e.h.Effects == nil {
		e.noKeyStore()
		e.t.Log("the provider keeps nothing by key (Harness.Effects is nil): the kit checked the key on the wire only")
		return
	}
	if r2.ExternalID != r3.ExternalID {
		e.t.Errorf("attempts 2 and 3 with the same key answered different effects (%q, %q): the key did not reach the provider as its idempotency key", r2.ExternalID, r3.ExternalID)
	}
	ids := e.wantEffects(e.key, 1, "after three attempts with one key")
	if len(ids) == 1 && r3.ExternalID != ids[0] {
		e.t.Errorf("the tool reports effect %q, the provider's store holds %q under the key", r3.ExternalID, ids[0])
	}
}

// testLostAnswer: the answer of a committed write is lost: UNKNOWN, and the
// lookup finds it.
func testLostAnswer(e *env) {
	e.p.arm(dropAnswer)
	_, err := e.exec(e.tl, e.key, e.h.Args, 1)
	f := e.p.firedOn()
	if f == nil {
		e.t.Fatalf("%s sent no request the kit could drop the answer of (error: %v)", e.h.Tool, err)
	}
	if f.status < 200 || f.status > 299 {
		e.t.Fatalf("tooltest: the provider answered %d to Harness.Args before the kit dropped it: give Args the provider accepts", f.status)
	}
	switch k := tool.KindOf(err); {
	case err == nil:
		e.t.Fatalf("%s reported success although the provider's answer never reached it", e.h.Tool)
	case k != tool.KindUnknown:
		e.t.Fatalf("a lost answer after the provider committed is %s (%v), want tool.KindUnknown: the request left, so the outcome is unknown (a timeout or a cut connection is never a rejection and never \"not sent\")", k, err)
	}
	if !e.write {
		return
	}
	var ids []string
	if e.h.Effects != nil {
		ids = e.wantEffects(e.key, 1, "after the lost answer")
	}
	if _, ok := e.tl.(tool.Reconciler); !ok {
		if !e.spec.NoLookup {
			e.t.Errorf("%s is a write without a Reconcile and does not declare NoLookup", e.h.Tool)
		}
		e.t.Logf("%s declares NoLookup: a person settles its unknown outcomes, there is nothing to reconcile", e.h.Tool)
		return
	}
	if found, ok := e.mustFind(e.tl, e.key, e.h.Args, ids); ok {
		if d := tool.Differences(e.tl, e.h.Args, found); len(d) > 0 {
			e.t.Errorf("the effect Reconcile found is the call's own, but the tool's Match says it differs: %v", d)
		}
	}
	never := e.key + "-never-sent"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nargs := e.h.Args
	if _, byArgs := e.tl.(tool.CallReconciler); byArgs && len(e.h.Changed) > 0 {
		nargs = e.h.Changed // a lookup by args is asked about a call never made
	}
	l, err := probe.Look(ctx, e.tl, tool.Call{Key: never, Args: nargs, Attempt: 1})
	if err == nil && (l.Status == tool.Found || l.Status == tool.Mismatch) {
		e.t.Errorf("Reconcile(%q) answers %s (%q) for a key that was never sent: it must answer absent or unknown", never, l.Status, l.Result.ExternalID)
	}
}

// testRefused: a connection refused before anything was sent is NOT SENT,
// and sending again through a working connection makes the one effect.
func testRefused(e *env) {
	dead := e.find(e.h.New(e.t, refusingURL(e.t)), e.h.Tool)
	_, err := e.exec(dead, e.key, e.h.Args, 1)
	if k := tool.KindOf(err); k != tool.KindNotSent {
		e.t.Errorf("a refused connection is %s (%v), want tool.KindNotSent: nothing reached the provider, so it is safe to send again", k, err)
	}
	if e.write && e.h.Effects != nil {
		e.wantEffects(e.key, 0, "after the refused connection")
	}
	if _, err := e.exec(e.tl, e.key, e.h.Args, 2); err != nil {
		e.t.Errorf("the attempt after the refused one failed: %v", err)
	}
	if e.write && e.h.Effects != nil {
		e.wantEffects(e.key, 1, "after the refused attempt and a good one")
	}
}

// testRejection: a business 4xx is a final rejection and leaves nothing.
func testRejection(e *env) {
	args := e.h.Rejected
	m := e.p.mark()
	if args == nil {
		args = e.h.Args
		e.p.arm(rejectIt)
	}
	_, err := e.exec(e.tl, e.key, args, 1)
	if e.h.Rejected == nil && e.p.firedOn() == nil {
		e.t.Fatalf("%s sent no request the kit could answer with a rejection", e.h.Tool)
	}
	if e.h.Rejected != nil && !slices.ContainsFunc(e.p.since(m), func(s seen) bool { return s.status >= 400 && s.status < 500 }) {
		e.t.Fatalf("tooltest: the provider answered no request with a 4xx for Harness.Rejected: give args the provider refuses (error: %v)", err)
	}
	if k := tool.KindOf(err); k != tool.KindRejected {
		e.t.Errorf("a business 4xx is %s (%v), want tool.KindRejected: the provider decided, retrying cannot change it", k, err)
	}
	if e.write && e.h.Effects != nil {
		e.wantEffects(e.key, 0, "after the rejection")
	}
}

// testReusedKey: the key reused with other args is refused as a conflict or
// told apart by the tool's Match, and makes no second effect.
func testReusedKey(e *env) {
	e.needWrite("there is no key to reuse")
	e.needEffects("a reused key cannot be told apart at the provider")
	if len(e.h.Changed) == 0 {
		e.t.Fatal("tooltest: Harness.Changed is empty: give valid args that differ from Args in a field the provider records")
	}
	if _, err := e.exec(e.tl, e.key, e.h.Args, 1); err != nil {
		e.t.Fatalf("the first call failed: %v", err)
	}
	if looksUpFirst(e.tl) {
		// The provider may ignore keys: a reused key is a second effect
		// there, whatever the tool does. What the engine relies on is that
		// the lookup under the key never passes the Args effect off as
		// the Changed call's.
		e.t.Logf("%s is a %s with a lookup: the kit checks that its lookup and Match tell the effect under the key from a call with other args", e.h.Tool, e.spec.Class)
		ids := e.wantEffects(e.key, 1, "after the first call")
		if found, ok := e.mustFind(e.tl, e.key, e.h.Args, ids); ok {
			if d := tool.Differences(e.tl, e.h.Changed, found); len(d) == 0 {
				e.t.Errorf("the lookup found effect %q, made with Args, and the tool's Match finds no difference with Changed: the saga would adopt someone else's effect; declare Spec.Match or implement tool.Matcher", found.ExternalID)
			}
			if d := tool.Differences(e.tl, e.h.Args, found); len(d) > 0 {
				e.t.Errorf("the tool's Match says the effect made with Args differs from Args: %v", d)
			}
		}
		return
	}
	res, err := e.exec(e.tl, e.key, e.h.Changed, 1)
	switch k := tool.KindOf(err); {
	case err == nil:
		if d := tool.Differences(e.tl, e.h.Changed, res); len(d) == 0 {
			e.t.Errorf("the provider answered the reused key with effect %q and the tool finds no difference with the changed args: declare Spec.Match on the fields the provider echoes, or implement tool.Matcher", res.ExternalID)
		}
	case k != tool.KindConflict:
		e.t.Errorf("the key reused with other args is %s (%v), want tool.KindConflict (or the effect, for Match to tell apart)", k, err)
	}
	ids := e.wantEffects(e.key, 1, "after the key was reused with other args")
	if _, ok := e.tl.(tool.Reconciler); !ok {
		return
	}
	if found, ok := e.mustFind(e.tl, e.key, e.h.Args, ids); ok {
		if d := tool.Differences(e.tl, e.h.Changed, found); len(d) == 0 {
			e.t.Errorf("Reconcile found effect %q, made with Args, and the tool's Match finds no difference with Changed: the saga would adopt someone else's effect; declare Spec.Match or implement tool.Matcher", found.ExternalID)
		}
		if d := tool.Differences(e.tl, e.h.Args, found); len(d) > 0 {
			e.t.Errorf("the tool's Match says the effect made with Args differs from Args: %v", d)
		}
	}
}

// testReversal: the compensator sends its own key, a lost answer of it is
// UNKNOWN, and a retry makes one reversal under that key.
func testReversal(e *env) {
	e.needWrite("there is nothing to reverse")
	if e.spec.Compensator == "" {
		e.t.Skipf("%s declares no Compensator: it cannot be undone", e.h.Tool)
	}
	e.needEffects("the reversal cannot be counted by its key")
	comp := e.find(e.tools, e.spec.Compensator)
	if !comp.Spec().Reversal {
		e.t.Errorf("compensator %s is not declared as a Reversal", e.spec.Compensator)
	}
	orig, err := e.exec(e.tl, e.key, e.h.Args, 1)
	if err != nil {
		e.t.Fatalf("the original call failed: %v", err)
	}
	rev := tool.Reversal{OriginalKey: e.key, OriginalTool: e.h.Tool, OriginalExternalID: orig.ExternalID, OriginalArgs: e.h.Args}
	args, _ := json.Marshal(rev)
	ck := tool.CompensationKey(e.key)
	e.p.arm(dropAnswer)
	_, err = e.attempt(comp, ck, args, 1)
	if e.p.firedOn() == nil {
		e.t.Fatalf("the reversal sent no write the kit could drop the answer of (error: %v)", err)
	}
	if k := tool.KindOf(err); err == nil || k != tool.KindUnknown {
		e.t.Errorf("the reversal's answer lost after commit is %s (%v), want tool.KindUnknown", k, err)
	}
	if looksUpFirst(comp) {
		e.t.Logf("compensator %s is a %s with a lookup: the engine looks its lost answer up before it sends again, so the kit does", e.spec.Compensator, comp.Spec().Class)
	} else if _, err := e.attempt(comp, ck, args, 2); err != nil {
		e.t.Errorf("the reversal's retry with its key failed: %v", err)
	}
	ids := e.wantEffects(ck, 1, "after the reversal and its retry")
	e.wantEffects(e.key, 1, "after the reversal (the original's key must name only the original)")
	if _, ok := comp.(tool.Reconciler); !ok {
		if !comp.Spec().NoLookup {
			e.t.Errorf("compensator %s is a write without a Reconcile and does not declare NoLookup", e.spec.Compensator)
		}
		return
	}
	found, ok := e.mustFind(comp, ck, args, ids)
	if !ok {
		return
	}
	if d := tool.Differences(comp, args, found); len(d) > 0 {
		e.t.Errorf("the reversal Reconcile found is this reversal, but its Match says it differs: %v", d)
	}
	other := rev
	other.OriginalExternalID = "tooltest-another-effect"
	oargs, _ := json.Marshal(other)
	if d := tool.Differences(comp, oargs, found); len(d) == 0 {
		e.t.Errorf("compensator %s's Match finds no difference between its reversal of %q and a call reversing %q: declare Spec.Match on the field naming the reversed effect", e.spec.Compensator, orig.ExternalID, other.OriginalExternalID)
	}
}

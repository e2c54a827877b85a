// Package probe establishes, with real requests against a staging provider,
// what a write tool's settings assume about that provider, and says which
// settings are safe. `starter tools probe` (and a team's app.Run binary)
// prints its Report; package tooltest runs the same checks in tests.
//
// For one write tool, Run sends real requests and asks four questions, one
// Verdict each:
//
//	key      does the provider honour the operation key? The same call is
//	         sent twice under one key: one effect (the same external id, or
//	         a second answer that reports no new effect) or two.
//	lookup   does the tool's lookup find a fresh effect, and after how long
//	         (the lag)? The lookup is asked from the moment the send
//	         answered until it finds the effect.
//	absent   does an absent answer stay absent? The lookup is asked about a
//	         call never made; it must never find one.
//	settle   does a request the client abandoned still commit, and when?
//	         The client gives up right after the request left (an HTTP tool:
//	         once the request is written; another: at a short deadline), and
//	         the lookup is watched until the effect shows or Options.SettleMax
//	         passes.
//
// Each Verdict compares what the provider did with what the tool declares
// (Claims: its class, settle time and lookup lag, and the lookup's own
// authoritative answers); Report.Contradicted is true when the provider
// contradicts the declaration, and Report.Safe holds the settings the
// probe saw to be safe. An authoritative absent answer is never called safe
// when the lookup was seen to lag.
//
// Every probe request makes a real effect at the provider (two for the key
// check), each under its own key {session}:1:{n}:{tool}: point it at a
// staging system.
//
// Stability: experimental; the checks may grow before 1.0.
package probe

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentsaga/agentsaga/tool"
)

// The promises a Report has a Verdict on, in the order Run checks them.
const (
	Key    = "key"
	Lookup = "lookup"
	Absent = "absent"
	Settle = "settle"
)

// Outcome is how what the provider did compares with what the tool
// declares.
type Outcome string

// The outcomes of a Verdict.
const (
	// Agrees: the provider behaved as the tool's settings assume.
	Agrees Outcome = "agrees"
	// Contradicts: the provider did something the settings rule out; the
	// engine would act on a false assumption (Report.Contradicted).
	Contradicts Outcome = "contradicts"
	// Unproven: the probe could not establish it (no lookup, a provider
	// too fast to abandon a request, a failed request); the evidence says
	// why.
	Unproven Outcome = "unproven"
)

// Verdict is the probe's answer to one promise.
type Verdict struct {
	// Promise is Key, Lookup, Absent or Settle.
	Promise string `json:"promise"`
	// Outcome compares the provider with the declaration.
	Outcome Outcome `json:"outcome"`
	// Finding is what the provider does, in a few words ("honours the
	// key", "lags 1.2s").
	Finding string `json:"finding"`
	// Declared is what the tool's settings say on it.
	Declared string `json:"declared"`
	// Evidence is what was sent and answered, one line each.
	Evidence []string `json:"evidence"`
}

// Claims are the settings of a tool the probe checks besides its Spec:
// the settle time and lookup lag the engine uses for it (tool.Spec's
// SettleTime and Lag, declared or defaulted).
type Claims struct {
	// Settle is how long after a send the tool assumes the provider may
	// still commit it.
	Settle time.Duration `json:"settle"`
	// Lag is how long the tool assumes a committed effect may stay
	// invisible to its lookup.
	Lag time.Duration `json:"lag"`
}

// ClaimsOf returns the claims of a tool: its settle time (Spec.SettleTime,
// declared or defaulted) and its lookup's lag (Spec.Lag, the catalogue's
// lookup.lag).
func ClaimsOf(s tool.Spec) Claims {
	return Claims{Settle: s.SettleTime(), Lag: s.Lag}
}

// Horizon is when, after a send, an absent lookup answer starts to count.
func (c Claims) Horizon() time.Duration { return c.Settle + c.Lag }

// Settings are the settings the probe saw to be safe.
type Settings struct {
	// Class is the side-effect class: the declared one, or
	// NON_IDEMPOTENT_WRITE when the provider made two effects under one
	// key.
	Class tool.Class `json:"class"`
	// Settle is the least settle time the probe saw to be needed (an
	// abandoned request's landing after its send, with half again as
	// margin, rounded up to a second); zero when nothing landed late.
	Settle time.Duration `json:"settle"`
	// Lag is the least lookup lag the probe saw to be needed (the
	// observed lag with half again as margin, rounded up to a second);
	// zero when the lookup found every fresh effect at once.
	Lag time.Duration `json:"lag"`
	// Authoritative is true when an absent lookup answer may be declared
	// authoritative: the lookup never found an effect for a call never
	// made and was never seen to lag.
	Authoritative bool `json:"authoritative"`
	// Lookup is false when the tool has no lookup: the lag, settle and
	// authoritative settings do not apply.
	Lookup bool `json:"lookup"`
}

// Report is the probe of one tool.
type Report struct {
	Tool     string     `json:"tool"`
	Class    tool.Class `json:"class"`
	Claims   Claims     `json:"claims"`
	Verdicts []Verdict  `json:"verdicts"`
	Safe     Settings   `json:"safe"`
	// Sends counts the write requests the probe made (each may be an
	// effect at the provider).
	Sends int `json:"sends"`
}

// Contradicted reports whether the provider contradicts any of the tool's
// settings.
func (r Report) Contradicted() bool {
	for _, v := range r.Verdicts {
		if v.Outcome == Contradicts {
			return true
		}
	}
	return false
}

// Verdict returns the verdict on promise, or false.
func (r Report) Verdict(promise string) (Verdict, bool) {
	for _, v := range r.Verdicts {
		if v.Promise == promise {
			return v, true
		}
	}
	return Verdict{}, false
}

// Defaults of Options.
const (
	// DefaultLagMax bounds how long the lookup is asked for a fresh
	// effect.
	DefaultLagMax = 30 * time.Second
	// DefaultPoll is the wait between two lookups.
	DefaultPoll = 100 * time.Millisecond
	// MinSettleMax is the least time an abandoned request is watched.
	MinSettleMax = 5 * time.Second
	// MaxWait bounds LagMax and SettleMax.
	MaxWait = 30 * time.Minute
)

// Options configures one probe.
type Options struct {
	// Args returns the args of the probe's n-th call (n from 1): valid
	// args the provider accepts. A provider that refuses or merges equal
	// calls (a unique name, a file that must not exist) needs args that
	// differ by n; see ArgsTemplate.
	Args func(n int) json.RawMessage
	// Session makes the keys, {Session}:1:{n}:{tool}; empty picks a random
	// "probe-" session.
	Session string
	// Claims are the tool's settle time and lookup lag (from its Spec).
	Claims Claims
	// LagMax bounds how long the lookup is asked for a fresh effect
	// (DefaultLagMax when zero).
	LagMax time.Duration
	// SettleMax bounds how long an abandoned request is watched: zero
	// means twice the claimed horizon, at least MinSettleMax.
	SettleMax time.Duration
	// Poll is the wait between lookups (DefaultPoll when zero).
	Poll time.Duration
}

// ArgsTemplate returns an Args that replaces every "{probe}" in tmpl with a
// token unique to the call (the session's suffix and n), so each probe
// call describes a new effect; tmpl without "{probe}" gives the same args
// every time.
func ArgsTemplate(tmpl json.RawMessage, session string) func(n int) json.RawMessage {
	suffix := session
	if i := strings.LastIndexByte(session, '-'); i >= 0 {
		suffix = session[i+1:]
	}
	return func(n int) json.RawMessage {
		return json.RawMessage(strings.ReplaceAll(string(tmpl), "{probe}", fmt.Sprintf("p%s-%d", suffix, n)))
	}
}

// NewSession returns a random probe session id.
func NewSession() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "probe-" + hex.EncodeToString(b[:])
}

func (o *Options) defaults() error {
	if o.Args == nil {
		return errors.New("probe: Options.Args is nil: give the args of a call the provider accepts")
	}
	if o.Session == "" {
		o.Session = NewSession()
	}
	if o.LagMax == 0 {
		o.LagMax = DefaultLagMax
	}
	if o.SettleMax == 0 {
		o.SettleMax = max(2*o.Claims.Horizon(), MinSettleMax)
	}
	if o.Poll == 0 {
		o.Poll = DefaultPoll
	}
	switch {
	case o.LagMax < 0 || o.LagMax > MaxWait:
		return fmt.Errorf("probe: the lag bound %s: give a positive duration up to %s", o.LagMax, MaxWait)
	case o.SettleMax < 0 || o.SettleMax > MaxWait:
		return fmt.Errorf("probe: the settle bound %s: give a positive duration up to %s", o.SettleMax, MaxWait)
	case o.Poll < time.Millisecond || o.Poll > time.Minute:
		return fmt.Errorf("probe: the poll interval %s: give 1ms to 1m", o.Poll)
	case o.Claims.Settle < 0 || o.Claims.Lag < 0:
		return fmt.Errorf("probe: claims settle %s, lag %s: neither may be negative", o.Claims.Settle, o.Claims.Lag)
	}
	return nil
}

// prober is one Run.
type prober struct {
	tl    tool.Tool
	spec  tool.Spec
	opts  Options
	rep   Report
	n     int  // calls made so far
	found bool // the lookup found a fresh effect
	lag   time.Duration
	// lagAuth is an authoritative absent answer seen for a committed
	// effect (during the lag).
	lagAuth bool
	honours bool // the key check saw one effect
	// http is true when the tool's first send wrote an HTTP request, and
	// firstTook is that send's round trip.
	http      bool
	firstTook time.Duration
}

// Run probes the write tool tl with real requests and reports one verdict
// per promise. It fails only when it cannot probe at all (a READ tool, bad
// options, the first send refused or failing, ctx ended); a provider that
// contradicts the settings is a Report with Contradicted true.
func Run(ctx context.Context, tl tool.Tool, opts Options) (Report, error) {
	if err := opts.defaults(); err != nil {
		return Report{}, err
	}
	spec := tl.Spec()
	if !spec.Class.IsWrite() {
		return Report{}, fmt.Errorf("probe %s: a %s tool makes no effect: probe writes only", spec.Name, spec.Class)
	}
	p := &prober{tl: tl, spec: spec, opts: opts,
		rep: Report{Tool: spec.Name, Class: spec.Class, Claims: opts.Claims}}
	_, hasLookup := tl.(tool.Reconciler)
	p.rep.Safe = Settings{Class: spec.Class, Lookup: hasLookup}

	first, err := p.freshAndLag(ctx, hasLookup)
	if err != nil {
		return p.rep, err
	}
	p.keyCheck(ctx, first)
	if hasLookup {
		p.absentCheck(ctx)
		p.settleCheck(ctx)
	} else {
		why := "the tool declares no lookup (no_lookup): a person settles its unknown outcomes"
		for _, pr := range []string{Lookup, Absent, Settle} {
			p.verdictAt(pr, Verdict{Promise: pr, Outcome: Unproven, Finding: "not applicable", Declared: "no lookup", Evidence: []string{why}})
		}
	}
	p.safeSettings()
	return p.rep, ctx.Err()
}

// verdictAt puts v in the report in promise order.
func (p *prober) verdictAt(promise string, v Verdict) {
	order := map[string]int{Key: 0, Lookup: 1, Absent: 2, Settle: 3}
	v.Promise = promise
	i := len(p.rep.Verdicts)
	for i > 0 && order[p.rep.Verdicts[i-1].Promise] > order[promise] {
		i--
	}
	p.rep.Verdicts = append(p.rep.Verdicts[:i], append([]Verdict{v}, p.rep.Verdicts[i:]...)...)
}

// call returns the n-th probe call (a new one when n is 0).
func (p *prober) call(n int, attempt int32) tool.Call {
	if n == 0 {
		p.n++
		n = p.n
	}
	return tool.Call{Key: fmt.Sprintf("%s:1:%d:%s", p.opts.Session, n, p.spec.Name), Args: p.opts.Args(n), Attempt: attempt}
}

func (p *prober) execute(ctx context.Context, c tool.Call) (tool.Result, error) {
	d := 2 * p.spec.Timeout
	if d <= 0 {
		d = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	p.rep.Sends++
	return p.tl.Execute(ctx, c)
}

// Look asks tl's lookup about call once: ReconcileCall when the tool has
// one (its lookup needs the args), else Reconcile by key. A tool without a
// lookup answers Unknown.
func Look(ctx context.Context, tl tool.Tool, call tool.Call) (tool.Lookup, error) {
	if cr, ok := tl.(tool.CallReconciler); ok {
		return cr.ReconcileCall(ctx, call)
	}
	if rc, ok := tl.(tool.Reconciler); ok {
		return rc.Reconcile(ctx, call.Key)
	}
	return tool.Lookup{Status: tool.Unknown}, nil
}

// Settled reports whether l settles a lookup: found, a mismatch, or an
// authoritative absent.
func Settled(l tool.Lookup) bool {
	return l.Status == tool.Found || l.Status == tool.Mismatch || (l.Status == tool.Absent && l.Authoritative)
}

// Trace is what a lookup answered over time, for evidence.
type Trace struct {
	start   time.Time
	entries []traceEntry
}

type traceEntry struct {
	at   time.Duration
	what string
}

func (t *Trace) add(l tool.Lookup, err error) {
	what := describe(l, err)
	at := time.Since(t.start)
	if n := len(t.entries); n > 0 && strings.HasPrefix(t.entries[n-1].what, what) {
		e := &t.entries[n-1]
		e.what = what + fmt.Sprintf(" (x%d, last at +%s)", countOf(e.what)+1, round(at))
		return
	}
	t.entries = append(t.entries, traceEntry{at: at, what: what})
}

func countOf(what string) int {
	var n int
	if i := strings.LastIndex(what, "(x"); i >= 0 {
		_, _ = fmt.Sscanf(what[i:], "(x%d", &n)
	}
	return max(n, 1)
}

// Lines returns the trace, one line per run of equal answers.
func (t *Trace) Lines(prefix string) []string {
	out := make([]string, 0, len(t.entries))
	for _, e := range t.entries {
		out = append(out, fmt.Sprintf("%s +%s: %s", prefix, round(e.at), e.what))
	}
	return out
}

func describe(l tool.Lookup, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("error %s", clip(err.Error(), 120))
	case l.Status == tool.Found:
		return fmt.Sprintf("found %s", orNone(l.Result.ExternalID))
	case l.Status == tool.Mismatch:
		return fmt.Sprintf("mismatch %s (%s)", orNone(l.Result.ExternalID), clip(strings.Join(l.Differences, "; "), 120))
	case l.Status == tool.Absent && l.Authoritative:
		return "absent (authoritative)"
	case l.Status == tool.Absent:
		return "absent (not authoritative)"
	}
	return string(l.Status)
}

func orNone(s string) string {
	if s == "" {
		return "(no id)"
	}
	return s
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// round shows d to the millisecond.
func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

// margin is d with half again, rounded up to a whole second.
func margin(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	m := d + d/2
	return (m + time.Second - 1).Truncate(time.Second)
}

// poll asks the lookup about c every Poll until stop says so or the
// deadline passes; it returns the last answer and when it came.
func (p *prober) poll(ctx context.Context, c tool.Call, tr *Trace, until time.Time, stop func(tool.Lookup, error) bool) (tool.Lookup, time.Time, error) {
	for {
		lctx, cancel := context.WithTimeout(ctx, max(p.spec.Timeout, 10*time.Second))
		l, err := Look(lctx, p.tl, c)
		cancel()
		at := time.Now()
		tr.add(l, err)
		if stop(l, err) || at.After(until) || ctx.Err() != nil {
			return l, at, err
		}
		t := time.NewTimer(p.opts.Poll)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// freshAndLag makes the first effect and asks the lookup for it until it
// shows: the lookup verdict.
func (p *prober) freshAndLag(ctx context.Context, hasLookup bool) (first sent, err error) {
	c := p.call(0, 1)
	var wrote atomic.Bool
	start := time.Now()
	res, err := p.execute(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) { wrote.Store(w.Err == nil) }}), c)
	answered := time.Now()
	p.http, p.firstTook = wrote.Load(), answered.Sub(start)
	if err != nil {
		return sent{}, fmt.Errorf("probe %s: the first send (key %s) failed, so nothing can be probed: %w (give args the provider accepts)", p.spec.Name, c.Key, err)
	}
	first = sent{call: c, res: res, took: answered.Sub(start)}
	if !hasLookup {
		return first, nil
	}
	declared := fmt.Sprintf("lookup.lag %s", p.opts.Claims.Lag)
	tr := &Trace{start: answered}
	l, at, lerr := p.poll(ctx, c, tr, answered.Add(p.opts.LagMax), func(l tool.Lookup, err error) bool {
		if err == nil && l.Status == tool.Absent && l.Authoritative {
			p.lagAuth = true
		}
		return err == nil && (l.Status == tool.Found || l.Status == tool.Mismatch)
	})
	ev := append([]string{fmt.Sprintf("sent %s under key %s: answered %s in %s", c.Args, c.Key, orNone(res.ExternalID), round(first.took))},
		tr.Lines("lookup")...)
	switch {
	case lerr == nil && l.Status == tool.Mismatch:
		p.verdictAt(Lookup, Verdict{Outcome: Contradicts, Finding: "calls the call's own effect a mismatch", Declared: declared,
			Evidence: append(ev, "the tool's match compares fields the provider does not echo as sent: fix match")})
		return first, nil
	case lerr != nil || l.Status != tool.Found:
		p.verdictAt(Lookup, Verdict{Outcome: Contradicts, Finding: fmt.Sprintf("never found the fresh effect within %s", p.opts.LagMax), Declared: declared,
			Evidence: append(ev, "a lookup that cannot find a committed effect settles nothing: fix the lookup's request or found test, or declare no_lookup")})
		return first, nil
	}
	p.found = true
	if len(tr.entries) > 1 {
		p.lag = at.Sub(answered)
	}
	if res.ExternalID != "" && l.Result.ExternalID != "" && l.Result.ExternalID != res.ExternalID {
		ev = append(ev, fmt.Sprintf("the lookup found %s, the send answered %s: the lookup may return another effect (check its filter)", l.Result.ExternalID, res.ExternalID))
	}
	if d := tool.Differences(p.tl, c.Args, l.Result); len(d) > 0 {
		ev = append(ev, "the tool's match finds differences with the call's own effect: "+strings.Join(d, "; "))
	}
	v := Verdict{Declared: declared, Evidence: ev}
	switch {
	case p.lag == 0:
		v.Outcome, v.Finding = Agrees, "finds a fresh effect at once"
	case p.lag <= p.opts.Claims.Lag:
		v.Outcome, v.Finding = Agrees, fmt.Sprintf("lags %s, within the declared lag", round(p.lag))
	case p.lagAuth:
		v.Outcome, v.Finding = Contradicts, fmt.Sprintf("lags %s and answered absent authoritatively meanwhile", round(p.lag))
		v.Evidence = append(v.Evidence, fmt.Sprintf("an authoritative absent inside the lag would send the write again: declare lookup.lag: %s or more", margin(p.lag)))
	default:
		v.Outcome, v.Finding = Contradicts, fmt.Sprintf("lags %s, beyond the declared lag", round(p.lag))
		v.Evidence = append(v.Evidence, fmt.Sprintf("declare lookup.lag: %s or more", margin(p.lag)))
	}
	p.verdictAt(Lookup, v)
	return first, nil
}

// sent is one send and its answer.
type sent struct {
	call tool.Call
	res  tool.Result
	took time.Duration
}

// keyCheck sends the first call again under its key.
func (p *prober) keyCheck(ctx context.Context, first sent) {
	c := first.call
	c.Attempt = 2
	res, err := p.execute(ctx, c)
	claimsKey := p.spec.Class == tool.IdempotentWrite || p.spec.Class == tool.ConditionalWrite
	declared := fmt.Sprintf("class %s (%s)", p.spec.Class, map[bool]string{true: "the provider deduplicates", false: "a second send is a second effect"}[claimsKey])
	ev := []string{
		fmt.Sprintf("send 1 under key %s: %s", c.Key, orNone(first.res.ExternalID)),
		fmt.Sprintf("send 2 under the same key and args: %s", answerOf(res, err)),
	}
	v := Verdict{Declared: declared, Evidence: ev}
	k := tool.KindOf(err)
	switch {
	case err == nil && res.ExternalID != "" && res.ExternalID == first.res.ExternalID:
		p.honours = true
		v.Finding = "honours the key: one effect"
	case err == nil && res.ExternalID != "" && first.res.ExternalID != "":
		v.Finding = "ignores the key: two effects"
	case err == nil && res.ExternalID == "" && first.res.ExternalID != "":
		p.honours = true
		v.Finding = "honours the key: the second send reported no new effect"
	case err != nil && (k == tool.KindConflict || k == tool.KindInFlight || k == tool.KindRejected || (k == tool.KindUnknown && tool.CodeOf(err) != "no_response")):
		p.honours = true
		v.Finding = "honours the key: the second send made no effect it reported"
	default:
		v.Outcome, v.Finding = Unproven, "could not tell"
		v.Evidence = append(v.Evidence, "the answers carry no external id to compare, or the second send failed: the key is unproven")
		p.verdictAt(Key, v)
		return
	}
	switch {
	case p.honours:
		v.Outcome = Agrees
		if !claimsKey {
			v.Evidence = append(v.Evidence, "the tool's class assumes less than the provider gives: safe as it is")
		}
	case claimsKey:
		v.Outcome = Contradicts
		v.Evidence = append(v.Evidence, fmt.Sprintf("this %s would be resent after a lost answer and doubled: declare class NON_IDEMPOTENT_WRITE with a lookup", p.spec.Class))
		p.rep.Safe.Class = tool.NonIdempotentWrite
	default:
		v.Outcome = Agrees
		v.Evidence = append(v.Evidence, "NON_IDEMPOTENT_WRITE is right: the engine looks an unknown outcome up before it sends again")
	}
	p.verdictAt(Key, v)
}

func answerOf(res tool.Result, err error) string {
	if err != nil {
		return clip(err.Error(), 160)
	}
	return orNone(res.ExternalID)
}

// absentCheck asks the lookup about a call never made, three times.
func (p *prober) absentCheck(ctx context.Context) {
	c := p.call(0, 1)
	c.Key += "-never-sent"
	tr := &Trace{start: time.Now()}
	var (
		seen, auth, authAll = false, false, true
		l                   tool.Lookup
		err                 error
	)
	for i := range 3 {
		if i > 0 {
			t := time.NewTimer(p.opts.Poll)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		lctx, cancel := context.WithTimeout(ctx, max(p.spec.Timeout, 10*time.Second))
		l, err = Look(lctx, p.tl, c)
		cancel()
		tr.add(l, err)
		if err == nil && (l.Status == tool.Found || l.Status == tool.Mismatch) {
			seen = true
		}
		isAuth := err == nil && l.Status == tool.Absent && l.Authoritative
		auth = auth || isAuth
		authAll = authAll && isAuth
	}
	declared := "absent " + map[bool]string{true: "authoritative", false: "not authoritative"}[auth]
	ev := append([]string{fmt.Sprintf("asked about key %s, args %s, never sent", c.Key, c.Args)}, tr.Lines("lookup")...)
	v := Verdict{Declared: declared, Evidence: ev}
	switch {
	case seen:
		v.Outcome, v.Finding = Contradicts, "finds an effect for a call never made"
		v.Evidence = append(v.Evidence, "the lookup's filter is ignored or too wide: the engine could adopt someone else's effect; fix the lookup's query or its match")
	case authAll:
		v.Outcome, v.Finding = Agrees, "stays absent, authoritatively"
	case auth:
		v.Outcome, v.Finding = Unproven, "answered absent authoritatively only some of the time"
	default:
		v.Outcome, v.Finding = Agrees, "stays absent (not authoritative: unknown outcomes wait for the reconcile window)"
	}
	p.verdictAt(Absent, v)
}

// abandonDeadlines are the deadlines tried, shortest first, to give up on a
// call of a tool that is not HTTP right after it left: the first one that
// does not end the call before the request left (not sent) abandons it.
var abandonDeadlines = []time.Duration{time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond,
	100 * time.Millisecond, 300 * time.Millisecond, time.Second, 3 * time.Second}

// abandonGraces are the fractions of the first send's round trip an HTTP
// request is given up on after it was written, longest first: long
// enough for the provider to have read it, short enough to leave before
// its answer; 0 gives up as soon as it is written.
var abandonGraces = []time.Duration{2, 8, 0}

// abandon sends new calls until one is given up on after it left (its
// outcome UNKNOWN) and returns that call and when it was sent; abandoned is
// false when the provider answered or refused every one first. ev says what
// happened.
func (p *prober) abandon(ctx context.Context) (c tool.Call, at time.Time, abandoned bool, ev []string) {
	type try struct {
		grace    time.Duration // HTTP: give up this long after the write
		deadline time.Duration // else: give up at this deadline
	}
	var tries []try
	if p.http {
		for _, f := range abandonGraces {
			g := time.Duration(0)
			if f > 0 {
				g = p.firstTook / f
			}
			tries = append(tries, try{grace: g, deadline: max(2*p.spec.Timeout, time.Minute)})
		}
	} else {
		for _, d := range abandonDeadlines {
			tries = append(tries, try{deadline: d})
		}
	}
	c = p.call(0, 1)
	for _, tr := range tries {
		actx, cancel := context.WithTimeout(ctx, tr.deadline)
		var wrote atomic.Bool
		actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{WroteRequest: func(w httptrace.WroteRequestInfo) {
			if w.Err == nil { // written whole: the provider can read all of it
				wrote.Store(true)
				time.AfterFunc(tr.grace, cancel)
			}
		}})
		at = time.Now()
		p.rep.Sends++
		_, err := p.tl.Execute(actx, c)
		cancel()
		k := tool.KindOf(err)
		how := fmt.Sprintf("given up %s after the send", tr.deadline)
		if wrote.Load() {
			how = fmt.Sprintf("given up %s after the request was written", round(tr.grace))
		}
		switch {
		case err == nil:
			ev = append(ev, fmt.Sprintf("sent under key %s, to be %s: answered first", c.Key, how))
			c = p.call(0, 1) // that one made an effect: the next try is a new call
		case k == tool.KindUnknown:
			return c, at, true, append(ev, fmt.Sprintf("sent %s under key %s, %s: %s", c.Args, c.Key, how, clip(err.Error(), 120)))
		case k == tool.KindNotSent:
			ev = append(ev, fmt.Sprintf("a %s deadline gave up before the request left (not sent)", tr.deadline))
		default:
			return c, at, false, append(ev, fmt.Sprintf("sent under key %s: %s", c.Key, answerOf(tool.Result{}, err)))
		}
	}
	return c, at, false, ev
}

// settleCheck abandons a request and watches the lookup for its effect.
func (p *prober) settleCheck(ctx context.Context) {
	cl := p.opts.Claims
	declared := fmt.Sprintf("settle %s + lookup.lag %s: an absent answer counts %s after the last send", cl.Settle, cl.Lag, cl.Horizon())
	if !p.found {
		p.verdictAt(Settle, Verdict{Outcome: Unproven, Finding: "not probed", Declared: declared,
			Evidence: []string{"the lookup never found a fresh effect, so it cannot show when an abandoned one lands"}})
		return
	}
	c, at, abandoned, ev := p.abandon(ctx)
	if !abandoned {
		p.verdictAt(Settle, Verdict{Outcome: Unproven, Finding: "could not abandon a request", Declared: declared,
			Evidence: append(ev, "the provider answered (or refused) every request before the client could give up on it after it left")})
		return
	}
	tr := &Trace{start: at}
	l, seen, err := p.poll(ctx, c, tr, at.Add(p.opts.SettleMax), func(l tool.Lookup, err error) bool {
		return err == nil && (l.Status == tool.Found || l.Status == tool.Mismatch)
	})
	ev = append(ev, tr.Lines("lookup")...)
	v := Verdict{Declared: declared, Evidence: ev}
	if err != nil || l.Status != tool.Found && l.Status != tool.Mismatch {
		v.Outcome, v.Finding = Agrees, fmt.Sprintf("the abandoned request did not land within %s", p.opts.SettleMax)
		v.Evidence = append(v.Evidence, "the provider dropped it, or commits later than the probe watched (raise --settle-max to watch longer)")
		p.verdictAt(Settle, v)
		return
	}
	landed := seen.Sub(at)
	// The effect shows landed after the send; the lookup's own lag is part
	// of that, so the commit came at least landed-lag after the send.
	p.rep.Safe.Settle = margin(landed - p.lag)
	v.Finding = fmt.Sprintf("an abandoned request lands: visible %s after its send", round(landed))
	switch {
	case landed <= cl.Horizon():
		v.Outcome = Agrees
	case p.honours:
		v.Outcome = Agrees
		v.Finding += " (past the horizon; the key holds it)"
		v.Evidence = append(v.Evidence, fmt.Sprintf("past the horizon %s, but the provider honours the key: a second send under it cannot double it", cl.Horizon()))
	default:
		v.Outcome = Contradicts
		v.Evidence = append(v.Evidence, fmt.Sprintf("past the horizon %s: an absent answer then would send the write again and make a second effect; declare settle: %s or more", cl.Horizon(), p.rep.Safe.Settle))
	}
	p.verdictAt(Settle, v)
}

// safeSettings fills Report.Safe from what was seen.
func (p *prober) safeSettings() {
	s := &p.rep.Safe
	if !s.Lookup {
		return
	}
	s.Lag = margin(p.lag)
	a, _ := p.rep.Verdict(Absent)
	s.Authoritative = a.Outcome == Agrees && strings.Contains(a.Finding, "authoritatively") && p.lag == 0 && !p.lagAuth
}

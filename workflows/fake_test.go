package workflows_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/tool"
)

// provider is an in-memory stand-in for a downstream system, used by the
// unit tests on the SDK's testsuite. It counts effects by key and can be told
// to misbehave on the next calls of one tool. The end-to-end tests use the
// real HTTP sandbox instead.
type provider struct {
	mu      sync.Mutex
	effects map[string]effect // by key
	calls   []string          // "tool key" in call order
	looks   []string          // keys reconciled, in order
	faults  map[string][]string
	// slow lists keys whose call is slow (see Execute).
	slow map[string]bool
	// barrier, when set, makes every read wait until barrierN reads are
	// in flight at once (proof that they run concurrently).
	barrier  chan struct{}
	barrierN int
	inFlight int
	// lookupDown makes every lookup answer unknown until cleared.
	lookupDown bool
}

func (p *provider) setLookupDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookupDown = down
}

type effect struct {
	Tool string
	Key  string
	Args json.RawMessage
	ID   string
}

func newProvider() *provider {
	return &provider{effects: map[string]effect{}, faults: map[string][]string{}, slow: map[string]bool{}}
}

// fail makes the next len(faults) calls of toolName misbehave: commit_then_drop,
// reject, unavailable, not_sent, lookup_unknown.
func (p *provider) fail(toolName string, faults ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[toolName] = append(p.faults[toolName], faults...)
}

func (p *provider) next(toolName string) string {
	q := p.faults[toolName]
	if len(q) == 0 {
		return ""
	}
	p.faults[toolName] = q[1:]
	return q[0]
}

func (p *provider) count(toolName string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.effects {
		if e.Tool == toolName {
			n++
		}
	}
	return n
}

func (p *provider) callsOf(toolName string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.calls {
		var name, key string
		fmt.Sscan(c, &name, &key)
		if name == toolName {
			out = append(out, key)
		}
	}
	return out
}

// slowFor is how long a slow call takes unless it is abandoned: the time a
// correct engine is given to (wrongly) abandon a call in flight.
const slowFor = 500 * time.Millisecond

// fakeTool is a tool backed by provider.
type fakeTool struct {
	spec tool.Spec
	p    *provider
}

func (t *fakeTool) Spec() tool.Spec { return t.spec }

func (t *fakeTool) Execute(ctx context.Context, c tool.Call) (tool.Result, error) {
	p := t.p
	if p.barrier != nil && t.spec.Class == tool.Read {
		p.mu.Lock()
		p.inFlight++
		if p.inFlight == p.barrierN {
			close(p.barrier)
		}
		p.mu.Unlock()
		select {
		case <-p.barrier:
		case <-time.After(5 * time.Second): // only in the failing case: the reads ran one by one
			return tool.Result{}, tool.Fail(tool.KindRejected, "not_concurrent", errors.New("reads did not run at once"))
		}
	}
	if p.slow[c.Key] {
		// A slow provider: it commits whatever happens to the caller. If
		// the engine abandons the call (cancels the activity), ctx ends
		// at once; otherwise the call takes slowFor.
		select {
		case <-ctx.Done():
		case <-time.After(slowFor):
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	name := t.spec.Name
	p.calls = append(p.calls, name+" "+c.Key)
	fault := p.next(name)
	switch fault {
	case "reject":
		return tool.Result{}, tool.Fail(tool.KindRejected, "insufficient_funds", errors.New("provider said no"))
	case "unavailable":
		return tool.Result{}, tool.Fail(tool.KindUnavailable, "http_503", errors.New("503"))
	case "not_sent":
		return tool.Result{}, tool.Fail(tool.KindNotSent, "dial", errors.New("connection refused"))
	case "conflict": // the provider's 422: key used before with other arguments
		return tool.Result{}, tool.Fail(tool.KindConflict, "idempotency_key_mismatch", errors.New("keys for idempotent requests can only be used with the same parameters"))
	case "throttled_90s":
		e := tool.Fail(tool.KindUnavailable, "http_503", errors.New("503 retry after 90s"))
		var te *tool.Error
		if errors.As(e, &te) {
			te.RetryAfter = 90 * time.Second
		}
		return tool.Result{}, e
	case "reject_leaky": // a provider whose error text carries secrets
		return tool.Result{}, tool.Fail(tool.KindRejected, "card_4111111111111111",
			errors.New("declined card 4111 1111 1111 1111 for Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl key sk_live_51HxYzABCDEFGHIJKLMNOP"))
	case "lost_request": // sent, lost before the provider committed
		return tool.Result{}, fmt.Errorf("write request: %w", context.DeadlineExceeded)
	}
	if t.spec.Class == tool.Read {
		return tool.Result{Data: json.RawMessage(`{"ok":true}`)}, nil
	}
	e, ok := p.effects[c.Key]
	if !ok || t.spec.Class == tool.NonIdempotentWrite {
		id := fmt.Sprintf("%s_%d", name, len(p.calls))
		if ok { // a non-idempotent provider does it again under the same key
			c.Key = fmt.Sprintf("%s#%d", c.Key, len(p.calls))
		}
		e = effect{Tool: name, Key: c.Key, Args: c.Args, ID: id}
		p.effects[c.Key] = e
	}
	if fault == "commit_then_reject" { // a provider that lies
		return tool.Result{}, tool.Fail(tool.KindRejected, "declined", errors.New("provider said no after committing"))
	}
	if fault == "commit_then_drop" {
		return tool.Result{}, fmt.Errorf("read response: %w", context.DeadlineExceeded)
	}
	data := map[string]any{}
	_ = json.Unmarshal(c.Args, &data)
	data["card_number"], data["id"] = "4111 1111 1111 1111", e.ID
	b, _ := json.Marshal(data)
	return tool.Result{ExternalID: e.ID, Data: b}, nil
}

func (t *fakeTool) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.looks = append(p.looks, key)
	fault := p.next(t.spec.Name + ".lookup")
	if p.lookupDown || fault == "lookup_unknown" {
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	if fault == "lookup_other" { // someone else's effect under this key
		return tool.Lookup{Status: tool.Found, Result: tool.Result{ExternalID: "other_1", Data: json.RawMessage(`{"order_id":"o1","amount_minor":777777}`)}}, nil
	}
	if fault == "lookup_lag" { // a lagging index: absent, but not on the provider's word
		return tool.Lookup{Status: tool.Absent, Authoritative: false}, nil
	}
	if e, ok := p.effects[key]; ok {
		return tool.Lookup{Status: tool.Found, Result: tool.Result{ExternalID: e.ID, Data: e.Args}}, nil
	}
	return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
}

// noLookupTool is a write that cannot look itself up (like mail): it has no
// Reconcile method.
type noLookupTool struct{ t *fakeTool }

func (n noLookupTool) Spec() tool.Spec { return n.t.Spec() }

func (n noLookupTool) Execute(ctx context.Context, c tool.Call) (tool.Result, error) {
	return n.t.Execute(ctx, c)
}

var money = tool.Schema{Fields: []tool.Field{
	{Name: "order_id", Type: tool.String, Required: true},
	{Name: "amount_minor", Type: tool.Money, Required: true},
}}

func specOf(name string, class tool.Class) tool.Spec {
	return tool.Spec{Name: name, Class: class, Args: money, Timeout: 10 * time.Second}
}

// tools returns the test registry:
//
//	read_order (READ), charge (IDEMPOTENT_WRITE, compensable by charge_reverse),
//	invoice (CONDITIONAL_WRITE, compensable by invoice_storno),
//	refund (NON_IDEMPOTENT_WRITE, approval above 50000), ship (IDEMPOTENT_WRITE,
//	not compensable), email (NON_IDEMPOTENT_WRITE, no lookup).
func tools(p *provider) []tool.Tool {
	charge := specOf("charge", tool.IdempotentWrite)
	charge.Compensator = "charge_reverse"
	invoice := specOf("invoice", tool.ConditionalWrite)
	invoice.Compensator = "invoice_storno"
	refund := specOf("refund", tool.NonIdempotentWrite)
	refund.Approval = &tool.Approval{Field: "amount_minor", AboveMinor: 50000}
	refund.Compensator = "charge_reverse"
	refund.Guard = &tool.Guard{Scope: "refund-per-order", Fields: []string{"order_id"}, Hold: true}
	rev := func(name string) tool.Spec {
		s := tool.Spec{Name: name, Class: tool.IdempotentWrite, Reversal: true, Timeout: 10 * time.Second}
		return s
	}
	deposit := specOf("deposit", tool.NonIdempotentWrite)
	deposit.Compensator = "charge_reverse"
	deposit.Guard = &tool.Guard{Scope: "deposit-per-order", Fields: []string{"order_id"}} // refuses, never holds
	pay := specOf("pay", tool.IdempotentWrite)
	pay.Compensator = "charge_reverse"
	pay.Match = []tool.MatchField{{Arg: "amount_minor", Result: "amount_minor"}}
	email := specOf("email", tool.NonIdempotentWrite)
	email.NoLookup = true
	return []tool.Tool{
		&fakeTool{specOf("read_order", tool.Read), p},
		&fakeTool{charge, p},
		&fakeTool{pay, p},
		&fakeTool{deposit, p},
		&fakeTool{invoice, p},
		&fakeTool{refund, p},
		&fakeTool{specOf("ship", tool.IdempotentWrite), p},
		noLookupTool{&fakeTool{email, p}},
		&fakeTool{rev("charge_reverse"), p},
		&fakeTool{rev("invoice_storno"), p},
	}
}

package sandbox

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// FaultKind is what goes wrong with one request to an operation.
type FaultKind string

// The faults a sandbox can inject.
const (
	// CommitThenDrop commits the effect, then closes the connection without
	// an answer: the caller sees a lost response after commit.
	CommitThenDrop FaultKind = "commit_then_drop"
	// DropBeforeCommit closes the connection without an answer and without
	// committing anything.
	DropBeforeCommit FaultKind = "drop_before_commit"
	// Delay waits FaultSpec.Delay before processing; the work is done even if
	// the caller has given up by then.
	Delay FaultKind = "delay"
	// HTTP503 answers 503 without processing.
	HTTP503 FaultKind = "http_503"
	// HTTP429 answers 429 with Retry-After without processing.
	HTTP429 FaultKind = "http_429"
	// Reject answers a confirmed business rejection: FaultSpec.Status (a 4xx,
	// 400 by default) with FaultSpec.Code ("rejected" by default). For keyed
	// writes the rejection is remembered under the key.
	Reject FaultKind = "reject"
	// LookupUnavailable makes a lookup answer 503.
	LookupUnavailable FaultKind = "lookup_unavailable"
	// LookupLag makes a lookup answer as if nothing had been committed yet
	// (404, or an empty search that says the index is not caught up).
	LookupLag FaultKind = "lookup_lag"
	// SlowCommit makes a write commit FaultSpec.Delay after the request
	// arrived, whether or not the caller still waits: like a real provider,
	// the sandbox never hears that the client gave up (a timeout, a
	// cancelled call). The answer follows the commit. A keyed provider
	// holds the key in flight meanwhile.
	SlowCommit FaultKind = "slow_commit"
	// VisibilityLag hides from a lookup every effect committed less than
	// FaultSpec.Delay ago: the lookup answers as if it had not been
	// committed (a search index or replica that lags by time). Count counts
	// lookups; -1 keeps the lag for every lookup until the faults are
	// cleared.
	VisibilityLag FaultKind = "visibility_lag"
)

// FaultKinds lists every fault in a stable order.
var FaultKinds = []FaultKind{CommitThenDrop, DropBeforeCommit, Delay, HTTP503, HTTP429, Reject, LookupUnavailable, LookupLag, SlowCommit, VisibilityLag}

// OpKind is what an operation does.
type OpKind string

// The kinds of operation.
const (
	OpWrite  OpKind = "write"
	OpRead   OpKind = "read"
	OpLookup OpKind = "lookup"
)

// Ops maps every operation a fault can target to its kind.
var Ops = map[string]OpKind{
	"orders.get":           OpRead,
	"orders.refund_policy": OpRead,
	"payments.create":      OpWrite,
	"payments.lookup":      OpLookup,
	"payments.reverse":     OpWrite,
	"refunds.create":       OpWrite,
	"refunds.lookup":       OpLookup,
	"refunds.reverse":      OpWrite,
	"reversals.lookup":     OpLookup,
	"tickets.create":       OpWrite,
	"tickets.search":       OpLookup,
	"tickets.close":        OpWrite,
	"closures.lookup":      OpLookup,
	"invoices.create":      OpWrite,
	"invoices.storno":      OpWrite,
	"invoices.lookup":      OpLookup,
	"mail.send":            OpWrite,
	"mail.lookup":          OpLookup,
}

func opNames() string {
	names := make([]string, 0, len(Ops))
	for n := range Ops {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// FaultSpec asks for a fault on the next Count requests to one operation.
// Faults for the same operation queue up in the order they were added.
//
// JSON: {"op":"refunds.create","fault":"reject","count":1,"delay":"1.5s",
// "status":402,"code":"insufficient_funds","message":"..."}; delay is a Go
// duration string.
type FaultSpec struct {
	// Op is the operation, such as "refunds.create" (see Ops).
	Op string `json:"op"`
	// Fault is what goes wrong.
	Fault FaultKind `json:"fault"`
	// Count is how many requests it affects: 0 means 1, a negative count
	// means every request until the faults are cleared. Reading faults back
	// gives the count still pending.
	Count int `json:"count,omitempty"`
	// Delay is how long a Delay fault waits, how long after its request a
	// SlowCommit write commits, and how long a VisibilityLag lookup hides a
	// fresh effect.
	Delay time.Duration `json:"-"`
	// Status is the 4xx of a Reject fault (400 by default; not 409, 422 or
	// 429, which mean in flight, conflict and throttled).
	Status int `json:"status,omitempty"`
	// Code is the error code of a Reject fault ("rejected" by default).
	Code string `json:"code,omitempty"`
	// Message is the error message of a Reject fault.
	Message string `json:"message,omitempty"`
}

type faultJSON struct {
	Op      string    `json:"op"`
	Fault   FaultKind `json:"fault"`
	Count   int       `json:"count,omitempty"`
	Delay   string    `json:"delay,omitempty"`
	Status  int       `json:"status,omitempty"`
	Code    string    `json:"code,omitempty"`
	Message string    `json:"message,omitempty"`
}

// MarshalJSON writes Delay as a duration string.
func (f FaultSpec) MarshalJSON() ([]byte, error) {
	j := faultJSON{Op: f.Op, Fault: f.Fault, Count: f.Count, Status: f.Status, Code: f.Code, Message: f.Message}
	if f.Delay > 0 {
		j.Delay = f.Delay.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads Delay as a duration string such as "250ms".
func (f *FaultSpec) UnmarshalJSON(b []byte) error {
	var j faultJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = FaultSpec{Op: j.Op, Fault: j.Fault, Count: j.Count, Status: j.Status, Code: j.Code, Message: j.Message}
	if j.Delay != "" {
		d, err := time.ParseDuration(j.Delay)
		if err != nil {
			return fmt.Errorf("delay %q: write a Go duration such as 500ms or 2s: %w", j.Delay, err)
		}
		f.Delay = d
	}
	return nil
}

// Validate reports a fault the sandbox cannot inject, saying what to change.
func (f FaultSpec) Validate() error {
	kind, ok := Ops[f.Op]
	if !ok {
		return fmt.Errorf("unknown op %q: use one of %s", f.Op, opNames())
	}
	switch f.Fault {
	case LookupUnavailable, LookupLag, VisibilityLag:
		if kind != OpLookup {
			return fmt.Errorf("fault %s targets lookups: use a lookup op such as refunds.lookup or tickets.search, not %s", f.Fault, f.Op)
		}
		if f.Fault == VisibilityLag && (f.Delay <= 0 || f.Delay > MaxFaultDelay) {
			return fmt.Errorf("fault visibility_lag needs a delay between 1ms and %s such as \"2s\": how long a fresh effect stays hidden", MaxFaultDelay)
		}
	case SlowCommit:
		if kind != OpWrite {
			return fmt.Errorf("fault slow_commit targets writes: use a write op such as refunds.create or mail.send, not %s", f.Op)
		}
		if f.Delay <= 0 || f.Delay > MaxFaultDelay {
			return fmt.Errorf("fault slow_commit needs a delay between 1ms and %s such as \"30s\": how long after the request the write commits", MaxFaultDelay)
		}
	case CommitThenDrop, DropBeforeCommit, Reject:
		if kind == OpLookup {
			return fmt.Errorf("fault %s does not apply to the lookup %s: use lookup_unavailable or lookup_lag", f.Fault, f.Op)
		}
	case Delay:
		if f.Delay <= 0 {
			return fmt.Errorf("fault delay needs a positive delay such as \"2s\"")
		}
	case HTTP503, HTTP429:
	default:
		var names []string
		for _, k := range FaultKinds {
			names = append(names, string(k))
		}
		return fmt.Errorf("unknown fault %q: use one of %s", f.Fault, strings.Join(names, ", "))
	}
	if f.Fault == Reject && f.Status != 0 {
		if f.Status < 400 || f.Status > 499 || f.Status == 409 || f.Status == 422 || f.Status == 429 {
			return fmt.Errorf("reject status %d: use a 4xx other than 409, 422 and 429 (those mean in flight, conflict and throttled)", f.Status)
		}
	}
	return nil
}

// MaxFaultDelay is the longest delay a slow_commit or visibility_lag fault
// may ask for.
const MaxFaultDelay = 10 * time.Minute

// faults is the pending faults and the call counters.
type faults struct {
	mu      sync.Mutex
	pending map[string][]FaultSpec
	calls   map[string]int
}

func newFaults() *faults {
	return &faults{pending: map[string][]FaultSpec{}, calls: map[string]int{}}
}

func (t *faults) add(f FaultSpec) {
	if f.Count == 0 {
		f.Count = 1
	}
	if f.Fault == Reject {
		if f.Status == 0 {
			f.Status = 400
		}
		if f.Code == "" {
			f.Code = "rejected"
		}
		if f.Message == "" {
			f.Message = "rejected by an injected fault"
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending[f.Op] = append(t.pending[f.Op], f)
}

// enter counts a request to op and takes the fault it must suffer, if any.
func (t *faults) enter(op string) (FaultSpec, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls[op]++
	q := t.pending[op]
	if len(q) == 0 {
		return FaultSpec{}, false
	}
	f := q[0]
	if q[0].Count > 0 {
		q[0].Count--
		if q[0].Count == 0 {
			q = q[1:]
		}
	}
	if len(q) == 0 {
		delete(t.pending, op)
	} else {
		t.pending[op] = q
	}
	f.Count = 1
	return f, true
}

func (t *faults) list() []FaultSpec {
	t.mu.Lock()
	defer t.mu.Unlock()
	ops := make([]string, 0, len(t.pending))
	for op := range t.pending {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	out := []FaultSpec{}
	for _, op := range ops {
		out = append(out, t.pending[op]...)
	}
	return out
}

func (t *faults) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = map[string][]FaultSpec{}
}

func (t *faults) counts(ops []string) map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	if len(ops) == 0 {
		for op, n := range t.calls {
			out[op] = n
		}
		return out
	}
	for _, op := range ops {
		out[op] = t.calls[op]
	}
	return out
}

func (t *faults) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending, t.calls = map[string][]FaultSpec{}, map[string]int{}
}

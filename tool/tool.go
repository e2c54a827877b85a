// Package tool is the contract between agentsaga and the tools an agent calls:
// what a tool declares (its Spec), how it is called (Execute with the
// operation key), how it looks itself up after a lost response (Reconcile),
// and the registry the worker refuses to start without.
package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// DefaultReconcileWindow is how long an UNKNOWN outcome is reconciled with
// the provider before it is handed to a human.
const DefaultReconcileWindow = 15 * time.Minute

// Spec is everything a tool declares about itself.
type Spec struct {
	// Name is what plans call the tool, such as "apply_refund".
	Name string `json:",omitzero"`
	// Description is one line for people.
	Description string `json:",omitzero"`
	// System names the provider the tool acts on (for example "payments"),
	// shown on approval cards.
	System string `json:",omitzero"`
	// Class is the side-effect class; it picks the retry policy.
	Class Class `json:",omitzero"`
	// Args is the schema plans must match.
	Args Schema `json:",omitzero"`
	// Timeout bounds one attempt (the activity's start-to-close timeout).
	Timeout time.Duration `json:",omitzero"`
	// Retry overrides the class's default retry policy when set.
	Retry *RetryPolicy `json:",omitzero"`
	// Compensator names the reversal tool that undoes a succeeded call.
	// Empty means the tool cannot be undone.
	Compensator string `json:",omitzero"`
	// Reversal marks a tool that exists only to compensate others; plans
	// cannot call it directly.
	Reversal bool `json:",omitzero"`
	// NoLookup declares that this write has no way to look itself up by
	// key, so its UNKNOWN outcomes go straight to a human.
	NoLookup bool `json:",omitzero"`
	// ReconcileWindow is how long an UNKNOWN outcome is reconciled before
	// it becomes needs_human. Zero means DefaultReconcileWindow.
	ReconcileWindow time.Duration `json:",omitzero"`
	// Settle is how long after a request was sent the provider may still
	// commit it: a request the client gave up on (a timeout, a lost
	// connection, a killed worker, an MCP call whose cancellation the
	// server ignored) can land this late. Zero means DefaultSettle(Class,
	// Timeout); a negative value is refused. See Horizon.
	Settle time.Duration `json:",omitzero"`
	// Lag is how long an effect the provider committed may stay invisible
	// to the tool's lookup (a search index, a replica). Zero means the
	// lookup sees a commit at once. See Horizon.
	Lag time.Duration `json:",omitzero"`
	// Approval, when set, makes matching calls wait for an `approve` signal.
	Approval *Approval `json:",omitzero"`
	// MaxAmountMinor, when positive, is the ceiling of every money argument
	// of a call (minor units); a plan above it is refused naming the field.
	// Zero means the plan limits' default (DefaultMaxAmountMinor unless
	// configured).
	MaxAmountMinor int64 `json:",omitzero"`
	// Guard, when set, limits active effects per business entity across
	// plans, sessions and agents (enforced by the ledger).
	Guard *Guard `json:",omitzero"`
	// Match declares how an effect the provider holds under this call's key
	// is checked against the call's args before it is adopted (reconcile,
	// or a provider answering with an existing effect): every listed arg
	// must equal the named field of the provider's answer. A tool can
	// implement Matcher instead. Without either, an effect found after a
	// lost answer is adopted unchecked, and one found after the provider
	// refused the call as a key conflict (a 422 idempotency-key mismatch)
	// is never adopted: it is a Mismatch for a person.
	Match []MatchField `json:",omitzero"`
}

// Compensable reports whether a succeeded call can be reversed.
func (s Spec) Compensable() bool { return s.Compensator != "" }

// RetryPolicy returns the tool's retry policy: its override or its class's
// default.
func (s Spec) RetryPolicy() RetryPolicy {
	if s.Retry != nil {
		return *s.Retry
	}
	return DefaultRetry(s.Class)
}

// Window returns the reconcile window, defaulted.
func (s Spec) Window() time.Duration {
	if s.ReconcileWindow > 0 {
		return s.ReconcileWindow
	}
	return DefaultReconcileWindow
}

// DefaultSettle is the settle time of a tool that declares none: for a
// NON_IDEMPOTENT_WRITE twice its timeout and at least MinDefaultSettle (the
// provider may still be working on a request the client gave up on, and a
// second send would be a second effect); for the other writes zero, because
// the provider deduplicates by key (IDEMPOTENT_WRITE) or by the condition
// (CONDITIONAL_WRITE), so a second send with the same key cannot make a
// second effect; for reads zero. Tools whose requests can land later (an MCP
// upstream, whose cancellation is advisory) declare a longer Settle; the
// catalogue does so for MCP tools (catalog.DefaultMCPSettle).
func DefaultSettle(c Class, timeout time.Duration) time.Duration {
	if c != NonIdempotentWrite {
		return 0
	}
	return max(2*timeout, MinDefaultSettle)
}

// MinDefaultSettle is the least settle time DefaultSettle gives a
// NON_IDEMPOTENT_WRITE.
const MinDefaultSettle = 10 * time.Second

// SettleTime returns the tool's settle time, defaulted (see Spec.Settle).
func (s Spec) SettleTime() time.Duration {
	if s.Settle > 0 {
		return s.Settle
	}
	return DefaultSettle(s.Class, s.Timeout)
}

// Horizon is how long after its last send an absent lookup answer starts to
// count: the first request can no longer land (SettleTime) and, had it
// landed, the lookup would show it (Lag). Before last send + Horizon an
// absent answer settles nothing; the engine waits on a durable timer and
// looks again.
func (s Spec) Horizon() time.Duration { return s.SettleTime() + s.Lag }

// Guard is a business rule that keys alone cannot enforce: at most one active
// effect per scope (for example one refund per order line), whoever asks.
type Guard struct {
	// Scope names the rule, such as "refund-per-order".
	Scope string `json:",omitzero"`
	// Fields are the args fields whose values identify the entity, such as
	// ["order_id"]. The scope key is Scope plus these values.
	Fields []string `json:",omitzero"`
	// Hold makes a second effect in the scope wait for approval instead of
	// being refused.
	Hold bool `json:",omitzero"`
	// DuplicateWindow, when positive, holds for approval a call of the same
	// tool on the same entity with equal normalized args made inside this
	// window by another plan (a suspected duplicate).
	DuplicateWindow time.Duration `json:",omitzero"`
	// Form is how the entity values are normalised before they name the
	// scope; the zero value is FoldedEntity, so "o-16 " and "O-16" are one
	// order. See EntityForm.
	Form EntityForm `json:",omitzero"`
}

// Call is one attempt of a tool call.
type Call struct {
	// Key is the operation key {session}:{turn}:{step}:{tool} (with
	// ":compensate" for a reversal). It is the same on every attempt and HTTP
	// tools send it as Idempotency-Key.
	Key string
	// Args are the validated arguments, as JSON.
	Args json.RawMessage
	// Attempt counts from 1.
	Attempt int32
}

// Result is what a succeeded call produced.
type Result struct {
	// ExternalID is the provider's id for the effect (refund id, ticket id).
	ExternalID string `json:"external_id,omitempty"`
	// Data is the provider's answer, as JSON.
	Data json.RawMessage `json:"data,omitempty"`
}

// Tool is a callable tool. Execute must send Call.Key to the provider on every
// attempt and report failures with an *Error so their kind is known.
type Tool interface {
	Spec() Spec
	Execute(ctx context.Context, call Call) (Result, error)
}

// LookupStatus is what a provider says about a key.
type LookupStatus string

// The answers of a Reconcile.
const (
	// Found: the effect exists; Lookup.Result holds it.
	Found LookupStatus = "found"
	// Absent: no effect under this key (see Lookup.Authoritative).
	Absent LookupStatus = "absent"
	// Unknown: the provider could not say (lookup down, index lagging).
	Unknown LookupStatus = "unknown"
	// Mismatch: the provider holds an effect under this key that was made
	// with OTHER arguments (the key was reused, for example after a ledger
	// purge). It is not this call's effect: never adopt it, never reverse
	// it; a human decides. Lookup.Result holds the effect found.
	Mismatch LookupStatus = "mismatch"
)

// Lookup is the answer of a Reconcile.
type Lookup struct {
	Status LookupStatus `json:"status"`
	Result Result       `json:"result,omitempty"`
	// Differences, for Mismatch, names what differs between the call's
	// args and the effect found, for people.
	Differences []string `json:"differences,omitempty"`
	// Authoritative is true when an Absent answer is final: the provider
	// guarantees that a committed effect would have been found. An Absent
	// that is not authoritative (a lagging search index) is treated as
	// Unknown until the window closes.
	Authoritative bool `json:"authoritative"`
	// NotBefore, set by the engine (never by a tool) on an Absent answer
	// about a key it sent, is the in-flight horizon (Spec.Horizon): until
	// then the first request may still land, so the answer settles
	// nothing; the workflow waits until NotBefore and looks again.
	NotBefore time.Time `json:"not_before,omitzero"`
}

// Settles reports whether l settles a call: found, found with other
// arguments, or absent on the provider's word and past the in-flight
// horizon. A non-authoritative absent (a lagging index) or one inside the
// horizon settles nothing.
func (l Lookup) Settles() bool {
	switch l.Status {
	case Found, Mismatch:
		return true
	case Absent:
		return l.Authoritative && l.NotBefore.IsZero()
	}
	return false
}

// Reconciler is implemented by every write that can look itself up by key.
type Reconciler interface {
	Reconcile(ctx context.Context, key string) (Lookup, error)
}

// CallReconciler is a Reconciler whose lookup needs the call's arguments, not
// only its key: a provider that knows nothing of keys is asked about the
// effect the args describe (the file a move wrote, the entity a create made).
// The engine calls ReconcileCall, with the validated args of the call being
// reconciled, whenever a tool implements it.
type CallReconciler interface {
	Reconciler
	ReconcileCall(ctx context.Context, call Call) (Lookup, error)
}

// Reversal is the argument a compensator receives: what it must undo.
type Reversal struct {
	// OriginalKey is the key of the succeeded call being undone.
	OriginalKey string `json:"original_key"`
	// OriginalTool is the tool of that call.
	OriginalTool string `json:"original_tool"`
	// OriginalExternalID is the provider's id of the effect to reverse.
	OriginalExternalID string `json:"original_external_id"`
	// OriginalArgs are the args of the call being undone.
	OriginalArgs json.RawMessage `json:"original_args"`
}

// CompensationKey returns the key of the reversal of the call with key k.
func CompensationKey(k string) string { return k + ":compensate" }

// IsReversalKey reports whether k is the key of a reversal, of any round
// (see ReversalRetryKey).
func IsReversalKey(k string) bool {
	if strings.HasSuffix(k, ":compensate") {
		return true
	}
	i := strings.LastIndex(k, ":compensate:")
	if i < 0 {
		return false
	}
	n := k[i+len(":compensate:"):]
	return n != "" && strings.Trim(n, "0123456789") == ""
}

// ReversalRetryKey returns the key of round round of the reversal of the
// call with key k: CompensationKey(k) for round 1, then
// {k}:compensate:{round}. A new round starts only when a person retries a
// reversal the provider rejected for good: a provider that stores answers by
// key (as Stripe does) would replay the rejection under the old key forever,
// so the retry is a new request.
func ReversalRetryKey(k string, round int) string {
	if round <= 1 {
		return CompensationKey(k)
	}
	return fmt.Sprintf("%s:%d", CompensationKey(k), round)
}

// Package ledger is the journal of every side effect across all plans, agents
// and sessions. Temporal's history is the journal of one plan; the ledger is
// what refuses a second refund started by another agent, replays a result
// after a workflow reset, and lists everything that waits for a human.
//
// One Store interface has two drivers, PostgreSQL for production and SQLite
// (pure Go) as the embedded default, and both pass one conformance suite
// (package ledgertest).
//
// What the ledger promises, beyond one row per operation key:
//
//   - A human approval is a Permit: single-use, bound to one key and request
//     hash, consumed in the transaction of the claim that starts the call.
//     Retries of a started call need no permit and consume none. An
//     override covers only the guard holders its card showed.
//   - Leases follow the database's clock on PostgreSQL, so a worker whose
//     clock runs ahead cannot take over a live lease.
//   - A guard scope is held by every active operation in it, including a
//     succeeded one however old: Purge keeps those until they are
//     compensated. Transition to failed_final or compensated releases it.
//   - Transition is the saga's change of state; Resolve is a person's, and
//     only Resolve writes resolved_by, resolved_at and resolve_note.
//   - Human decisions are appended to an audit trail (RecordDecision) that
//     has no update or delete and that Purge never touches.
//   - Free text (notes, error codes, results, request ids) is redacted and
//     cleaned of NUL bytes and invalid UTF-8 before it is written, so no
//     text makes a write fail; identifiers with them are refused up front.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Status is an operation's state. The names are ARCHITECTURE.md's step states, the
// same in the workflow query, the ledger, the CLI and the UI.
type Status string

// The operation states.
const (
	Pending            Status = "pending"
	InProgress         Status = "in_progress"
	Succeeded          Status = "succeeded"
	FailedFinal        Status = "failed_final"
	Unknown            Status = "unknown"
	NeedsHuman         Status = "needs_human"
	Compensating       Status = "compensating"
	Compensated        Status = "compensated"
	CompensationFailed Status = "compensation_failed"
)

// Final reports whether s will never change without a human.
func (s Status) Final() bool {
	switch s {
	case Succeeded, FailedFinal, Compensated:
		return true
	}
	return false
}

// Verdict is what a Claim decided.
type Verdict string

// The verdicts of a Claim.
const (
	// Execute: the caller holds the lease and may call the provider.
	Execute Verdict = "execute"
	// ReconcileFirst: the caller holds the lease, but an earlier attempt
	// may have reached the provider (unknown, or an expired lease taken
	// over): it must reconcile by key before calling.
	ReconcileFirst Verdict = "reconcile_first"
	// Replay: the operation already succeeded; Operation holds the stored
	// result. Do not call.
	Replay Verdict = "replay"
	// Conflict: the key was claimed with another request hash. Do not call.
	Conflict Verdict = "conflict"
	// InFlight: another executor holds a live lease. Do not call; retry
	// later.
	InFlight Verdict = "in_flight"
	// Final: the operation ended for good (failed_final, compensated) or
	// waits for a human. Do not call.
	Final Verdict = "final"
	// GuardRefused: another active effect holds the tool's guard scope. A
	// refused call is not stored.
	GuardRefused Verdict = "guard_refused"
	// Held: a guard or the suspected-duplicate check holds the call for a
	// human's approval; Claim.Reason says why. The held call is stored with
	// status needs_human, AttemptCount 0 and HoldReason set, so it is listed
	// by Exceptions; claiming it again with a permit granted with Override
	// runs it (Execute).
	Held Verdict = "held"
	// NoPermit: the request names a permit that does not exist, belongs to
	// another key or request hash, or was consumed already. Do not call.
	NoPermit Verdict = "no_permit"
	// ClashUnseen: the request's override permit was granted on a card that
	// did not show every operation holding the guard scope now (one started
	// after the card was drawn). Do not call: ask again with a fresh card.
	// Nothing is stored or consumed; a held row stays held.
	ClashUnseen Verdict = "clash_unseen"
)

// Permit is a human's approval of one operation: single-use, bound to the
// key and the request hash, consumed by the claim that starts the call. An
// override permit is also bound to the guard holders its card showed.
type Permit struct {
	ID          string // the question id the approval answered
	Key         string
	RequestHash string
	// Policy is the rule that asked, such as "amount_minor > 50000",
	// recorded for the audit. A claim does not check it: the claim does not
	// know the rules; the request hash binds the arguments they judged.
	Policy string
	// Override lets the call through a guard clash or a suspected
	// duplicate that was shown to the approver.
	Override bool
	// Holders are the keys of the operations that held the guard scope on
	// the card the approver saw. An override lets the call through a clash
	// with these only: a claim finding another holder gives ClashUnseen.
	Holders    []string
	By         string
	GrantedAt  time.Time
	ConsumedAt time.Time // zero until a claim consumes it
}

// Transition is a machine change of an operation's state, made by the saga
// (not by a person): it takes no lease and never touches the resolved_by,
// resolved_at and resolve_note a human left.
type Transition struct {
	Key string
	// From lists the states the row may be in; another state returns
	// ErrTransition and changes nothing. Empty means any state.
	From       []Status
	Status     Status
	ExternalID string          // kept when empty
	ErrorCode  string          // kept when empty
	Result     json.RawMessage // kept when empty; sanitized like a Completion's
}

// DecisionRecord is one entry of the durable audit trail of human decisions
// (and of decisions refused). Entries are appended, never changed.
type DecisionRecord struct {
	ID         int64           `json:"id"`
	QuestionID string          `json:"question_id"`
	Key        string          `json:"operation_key"`
	WorkflowID string          `json:"workflow_id"`
	Kind       string          `json:"kind"` // approve, reject, resolve, override, expire, refused
	By         string          `json:"by"`
	Verified   bool            `json:"verified"` // the identity was checked (signature), not only typed
	SentAt     time.Time       `json:"sent_at"`
	AppliedAt  time.Time       `json:"applied_at"`
	Card       json.RawMessage `json:"card,omitempty"` // what the decider was shown
	// CardDigest is the digest of the card the decider's client showed
	// (workflows.CardDigest, "sha256:..."), as the decision carried and,
	// when signed, signed it; empty for clients that send none.
	CardDigest string `json:"card_digest,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	ExternalID string `json:"external_id,omitempty"`
	Note       string `json:"note,omitempty"`
	Refused    string `json:"refused,omitempty"` // why the decision was not applied
	// OpenedAt is when the question this decision answers was opened, when
	// the recorder knows it; Report measures a person's minutes with it.
	OpenedAt time.Time `json:"opened_at,omitzero"`
}

// ClaimRequest asks to run one operation.
type ClaimRequest struct {
	Key         string // operation key {session}:{turn}:{step}:{tool}
	ActionType  string // tool name
	RequestHash string // fingerprint of tool + canonical args
	WorkflowID  string
	RunID       string
	RequestID   string
	Executor    string        // who takes the lease (activity id + attempt)
	Lease       time.Duration // follows the activity's timeout
	// GuardScope is the guard scope key (scope + entity values), empty when
	// the tool has no guard. GuardHold makes a clash held, not refused.
	GuardScope string
	GuardHold  bool
	// Entity and NormalizedArgs feed the suspected-duplicate check when
	// DuplicateWindow is positive.
	Entity          string
	NormalizedArgs  string
	DuplicateWindow time.Duration
	// PermitID names a single-use approval permit (see Permit) granted by
	// a human for this key and request hash. The claim that starts the
	// call consumes it in the same transaction; a missing, stale, foreign
	// or already consumed permit gives verdict NoPermit and nothing runs.
	// A permit lets a guard clash or a suspected duplicate through only
	// when it was granted with Override, and a guard clash only with the
	// holders it names (Permit.Holders); another holder gives ClashUnseen.
	PermitID string
	// Summary is one line for people, nothing secret: tool, object and
	// amount ("apply_refund order_id ord_1001 129.00 EUR"). Shown on other
	// plans' approval cards.
	Summary string
	// LookOnly says the claimer only asks the provider (a reconcile) and
	// sends nothing: the claim does not move Operation.SentAt.
	LookOnly bool
}

// Claim is the answer to a ClaimRequest.
type Claim struct {
	Verdict   Verdict
	Operation Operation // the row after the claim
	Reason    string    // for Conflict, GuardRefused, Held, NoPermit and ClashUnseen: why, for people
}

// Operation is one row of the ledger.
type Operation struct {
	Key          string          `json:"operation_key"`
	ActionType   string          `json:"action_type"`
	RequestHash  string          `json:"request_hash"`
	Status       Status          `json:"status"`
	AttemptCount int             `json:"attempt_count"`
	ExternalID   string          `json:"external_id,omitempty"`
	Result       json.RawMessage `json:"result_json,omitempty"` // sanitized
	ErrorCode    string          `json:"error_code,omitempty"`
	LeaseOwner   string          `json:"lease_owner,omitempty"`
	LeaseUntil   time.Time       `json:"lease_until,omitzero"`
	WorkflowID   string          `json:"workflow_id,omitempty"`
	RunID        string          `json:"run_id,omitempty"`
	RequestID    string          `json:"request_id,omitempty"`
	GuardScope   string          `json:"guard_scope,omitempty"`
	HoldReason   string          `json:"hold_reason,omitempty"`
	Summary      string          `json:"summary,omitempty"`
	ResolvedBy   string          `json:"resolved_by,omitempty"`
	ResolvedAt   time.Time       `json:"resolved_at,omitzero"`
	ResolveNote  string          `json:"resolve_note,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	CompletedAt  time.Time       `json:"completed_at,omitzero"`
	// Replays counts the claims answered Replay from the stored success:
	// duplicates the ledger absorbed without calling anything.
	Replays int `json:"replays,omitempty"`
	// UnknownAt is the first time the outcome became unknown (an attempt
	// recorded unknown, or a claim had to reconcile first); SettledAt the
	// first time after it that the outcome was known again. A person
	// settled it when ResolvedAt equals SettledAt.
	UnknownAt time.Time `json:"unknown_at,omitzero"`
	SettledAt time.Time `json:"settled_at,omitzero"`
	// SentAt is the last time a claim let a call of this key go to the
	// provider (verdict Execute, on the database's clock): the start of
	// the in-flight horizon (tool.Spec.Horizon). A claim that must
	// reconcile first does not move it. Zero for a row that never sent
	// (held) or was written before the ledger kept it.
	SentAt time.Time `json:"sent_at,omitzero"`
}

// Completion records what an attempt learned. Only the lease owner may
// complete; a Completion from a stale executor returns ErrLeaseLost.
type Completion struct {
	Key        string
	Executor   string
	Status     Status // pending (provably not sent), unknown, succeeded, failed_final, ...
	ExternalID string
	Result     json.RawMessage // sanitized before it is stored
	ErrorCode  string
}

// Resolution is a human's decision on an operation.
type Resolution struct {
	Key        string
	Status     Status
	ExternalID string
	By         string
	Note       string
}

// ExceptionFilter selects the exception queue: every operation that needs
// a human or compensation_failed, plus the two below.
type ExceptionFilter struct {
	// UnknownOlderThan lists unknown operations unchanged for this long.
	UnknownOlderThan time.Duration
	// StuckFor lists in_progress operations whose lease ended this long
	// ago (zero: as soon as it ends): an executor died and no retry took
	// the operation over.
	StuckFor time.Duration
}

// Store is the ledger. Every write step goes through Claim, then Complete;
// no database transaction is held open during an external call.
type Store interface {
	// Claim atomically inserts the operation if absent, then takes a lease
	// with a conditional update, and returns what the caller may do.
	Claim(ctx context.Context, req ClaimRequest) (Claim, error)
	// Complete records an attempt's outcome and releases the lease.
	Complete(ctx context.Context, c Completion) (Operation, error)
	// Resolve records a human decision: who, when, why.
	Resolve(ctx context.Context, r Resolution) (Operation, error)
	// Get returns one operation, or ErrNotFound.
	Get(ctx context.Context, key string) (Operation, error)
	// Exceptions lists what waits for a human, oldest first.
	Exceptions(ctx context.Context, f ExceptionFilter) ([]Operation, error)
	// Purge removes final operations completed before the cutoff and
	// returns how many; it never removes one that is not final, nor a
	// succeeded one that holds a guard scope (it holds it until it is
	// compensated), nor any entry of the audit trail. It also forgets the
	// keyless calls whose ForgetAfter is before the cutoff and the question
	// claims that lapsed before it (neither counted).
	Purge(ctx context.Context, completedBefore time.Time) (int, error)
	// Transition records a machine change of state (see Transition). A
	// row that becomes failed_final or compensated no longer holds its
	// guard scope.
	Transition(ctx context.Context, t Transition) (Operation, error)
	// GrantPermit stores a single-use approval permit. Granting the same
	// permit again is a no-op; another permit under an existing ID is an
	// error.
	GrantPermit(ctx context.Context, p Permit) error
	// InScope lists the operations of a guard scope, any state, newest
	// first, at most limit of them (for the approval card).
	InScope(ctx context.Context, scope string, limit int) ([]Operation, error)
	// RecordDecision appends d to the audit trail and returns its id.
	RecordDecision(ctx context.Context, d DecisionRecord) (int64, error)
	// Decisions lists the audit trail of an operation key (and of its
	// reversal key+":compensate"), oldest first.
	Decisions(ctx context.Context, key string) ([]DecisionRecord, error)
	// DecisionLog lists the audit trail across operations, newest first,
	// as q filters it (the console's decided questions).
	DecisionLog(ctx context.Context, q DecisionQuery) ([]DecisionRecord, error)
	// Report reads the operating figures of the operations created (and
	// the decisions applied) at or after since, plus the exception queue
	// and the amounts in uncertainty as they are now. It writes nothing.
	Report(ctx context.Context, since time.Time) (Report, error)
	// KeylessCalls keep the MCP gateway's memory of calls sent without a
	// key (see KeylessCall).
	KeylessCalls
	// QuestionClaims keep which operator is working which open question
	// (see QuestionClaim).
	QuestionClaims
	// Close releases the store's connections.
	Close() error
}

// DecisionQuery filters DecisionLog. Zero fields do not filter.
type DecisionQuery struct {
	By    string    // who decided, exactly
	Kind  string    // approve, reject, resolve, override, expire, refused
	Since time.Time // applied at or after
	Until time.Time // applied before
	// Limit bounds the entries returned, 1 to MaxDecisionLog (zero:
	// MaxDecisionLog).
	Limit int
}

// MaxDecisionLog bounds one DecisionLog answer.
const MaxDecisionLog = 1000

// ErrNotFound is returned by Get for a key the ledger has never seen.
var ErrNotFound = errors.New("ledger: operation not found")

// ErrTransition is returned by Transition when the row is in none of the
// From states; the error's text names the state it is in.
var ErrTransition = errors.New("ledger: operation is not in a state this transition starts from")

// ErrLeaseLost is returned by Complete when the executor no longer holds the
// lease: another executor took over, and it must not overwrite the result.
var ErrLeaseLost = errors.New("ledger: lease lost to another executor; do not record this attempt")

// KeylessCall is the MCP gateway's memory of one write a caller sent without
// a key (package mcpgw): which turn of which AgentSession runs it, and what
// the caller was given. It lives in the ledger so that every gateway process
// shares it and it outlives a connection: the same caller's identical call
// through another MCP session, connection or replica is compared with it.
// Rows are read with KeylessCall and written with PutKeylessCall, a
// compare-and-swap on Version, so two gateways that decide at once never
// both win; the gateway makes every decision, the ledger keeps it.
type KeylessCall struct {
	// Caller is who sent the call: the gateway's name for an
	// authenticated identity, an agent's requested_by, or an MCP session
	// (at most MaxKeylessIdent bytes).
	Caller string `json:"caller"`
	// Fingerprint is plan.Fingerprint of the tool and its canonical
	// arguments (at most MaxKeylessIdent bytes).
	Fingerprint string `json:"fingerprint"`
	// Call is the turn that runs the call.
	Call KeylessTurn `json:"call"`
	// Held is the turn that holds a suspected duplicate of the call for a
	// person; Turn 0 when there is none.
	Held KeylessTurn `json:"held,omitzero"`
	// ForgetAfter is when the memory may be purged (Purge with a later
	// cutoff removes it); zero keeps it.
	ForgetAfter time.Time `json:"forget_after,omitzero"`
	// Version is the row's version as read: PutKeylessCall writes only
	// over that version (0: only when no row is stored) and returns the
	// new one.
	Version int64 `json:"version"`
}

// KeylessTurn is one turn a KeylessCall names.
type KeylessTurn struct {
	Session string `json:"session"` // the AgentSession (at most MaxKeylessIdent bytes)
	Turn    int64  `json:"turn"`
	// At is when the call was first made.
	At time.Time `json:"at,omitzero"`
	// Given is the state of the last result given to a caller ("" for
	// none; succeeded, failed, waiting, running: at most 32 bytes).
	Given string `json:"given,omitempty"`
	// DeliveredAt is when a caller was first given the final result.
	DeliveredAt time.Time `json:"delivered_at,omitzero"`
}

// MaxKeylessIdent bounds a KeylessCall's caller, fingerprint and sessions,
// in bytes.
const MaxKeylessIdent = 512

// ErrStale is returned by PutKeylessCall when the stored row is no longer
// the version the caller read (another gateway wrote it meanwhile): read it
// again and decide again.
var ErrStale = errors.New("ledger: the keyless call changed since it was read; read it again and decide again")

// KeylessCalls is the part of Store the MCP gateway uses.
type KeylessCalls interface {
	// KeylessCall returns the memory of caller's keyless call with
	// fingerprint, or ErrNotFound.
	KeylessCall(ctx context.Context, caller, fingerprint string) (KeylessCall, error)
	// PutKeylessCall stores c if the stored row is still c.Version (0:
	// none is stored) and returns it as stored, with its new version;
	// ErrStale otherwise, and nothing changes.
	PutKeylessCall(ctx context.Context, c KeylessCall) (KeylessCall, error)
}

// QuestionClaim is an operator's claim on one open question: others see who
// holds it and since when, until it is released or Until passes. A claim
// never stops a decision; the console records whose claim a decision
// overrides.
type QuestionClaim struct {
	WorkflowID string    `json:"workflow_id"` // at most MaxClaimIdent bytes
	QuestionID string    `json:"question_id"` // at most MaxClaimIdent bytes
	By         string    `json:"by"`          // the operator, at most MaxClaimBy bytes
	Since      time.Time `json:"since"`       // when By took it (kept when By renews it)
	Until      time.Time `json:"until"`       // when it lapses unless renewed
}

// Limits of a QuestionClaim.
const (
	// MaxClaimIdent bounds a claim's WorkflowID and QuestionID.
	MaxClaimIdent = 512
	// MaxClaimBy bounds a claim's By.
	MaxClaimBy = 128
	// MaxClaimFor bounds how long one claim (or renewal) lasts.
	MaxClaimFor = 8 * time.Hour
	// MaxQuestionClaims bounds the live claims QuestionClaims returns.
	MaxQuestionClaims = 10000
)

// ErrClaimed is returned (wrapped, naming the holder) by ClaimQuestion and
// ReleaseQuestion when another operator's claim on the question is live.
var ErrClaimed = errors.New("ledger: the question is claimed by another operator")

// QuestionClaims is the part of Store the operator console uses to share
// work: one row per question, shared by every console process.
type QuestionClaims interface {
	// ClaimQuestion gives the question to by for d (0 < d <= MaxClaimFor,
	// from the ledger's clock) if no one else's claim on it is live, and
	// returns the claim as stored; by renewing a live claim keeps its
	// Since. When another's claim is live it changes nothing and returns
	// that claim with an error wrapping ErrClaimed.
	ClaimQuestion(ctx context.Context, workflowID, questionID, by string, d time.Duration) (QuestionClaim, error)
	// ReleaseQuestion drops by's claim on the question (a lapsed claim of
	// anyone's too); nothing to release is no error. When another's claim
	// is live it changes nothing and returns that claim with an error
	// wrapping ErrClaimed.
	ReleaseQuestion(ctx context.Context, workflowID, questionID, by string) (QuestionClaim, error)
	// QuestionClaims lists the live claims (Until after now), oldest
	// first, at most MaxQuestionClaims.
	QuestionClaims(ctx context.Context) ([]QuestionClaim, error)
}

package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
)

// The external contract: other languages and the Temporal CLI depend on these
// names.
const (
	// WorkflowName is the workflow type every client starts.
	WorkflowName = "AgentPlan"
	// TaskQueue is the default task queue.
	TaskQueue = "agent-saga"
	// SignalApprove carries an ApproveSignal.
	SignalApprove = "approve"
	// SignalResolve carries a ResolveSignal.
	SignalResolve = "resolve"
	// QueryStatus returns a Status.
	QueryStatus = "status"
	// MemoPlanFingerprint is the memo field holding the plan fingerprint,
	// read by clients to refuse a different plan under the same ID.
	MemoPlanFingerprint = "plan_fingerprint"
)

// Search attribute names, registered on the server and shown in the UI.
const (
	// SearchAttrSession (Keyword) is the plan's session_id.
	SearchAttrSession = "AgentSagaSession"
	// SearchAttrState (Keyword) is the plan's SagaState.
	SearchAttrState = "AgentSagaState"
	// SearchAttrNeedsHuman (Bool) is true while the plan waits for a person.
	SearchAttrNeedsHuman = "AgentSagaNeedsHuman"
)

// SagaState is the state of a whole plan.
type SagaState string

// The plan states.
const (
	SagaRunning            SagaState = "running"
	SagaWaitingApproval    SagaState = "waiting_approval"
	SagaNeedsHuman         SagaState = "needs_human"
	SagaCompensating       SagaState = "compensating"
	SagaSucceeded          SagaState = "succeeded"
	SagaCompensated        SagaState = "compensated"
	SagaCompensationFailed SagaState = "compensation_failed"
	SagaFailed             SagaState = "failed"
)

// ApproveSignal is the payload of Update (and signal) `approve`. It answers
// one open approval question: QuestionID (when given) must be the open
// question's id, Fingerprint must equal the step's fingerprint (see
// StepStatus.Fingerprint), so no approval ever covers changed arguments.
// Override must be set to let a call through a guard clash shown on the
// card. RunID names the run of the plan the decision answers (Status.RunID):
// a signed decision must carry it, so a signature answers one question of
// one run and is refused by a reset or a second run of the same workflow ID.
// SentAt and Signature are set by a signing client (see package operators);
// without an operators file on the worker, By is accepted as typed and
// recorded as unverified.
//
//	{"step": 3, "question_id": "q1-step3-approval", "run_id": "0193…", "fingerprint": "9f2c…", "by": "alice", "approved": true, "reason": "customer verified"}
type ApproveSignal struct {
	Step        int       `json:"step"`
	QuestionID  string    `json:"question_id,omitempty"`
	RunID       string    `json:"run_id,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	By          string    `json:"by"`
	Approved    bool      `json:"approved"`
	Override    bool      `json:"override,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	SentAt      time.Time `json:"sent_at,omitzero"`
	Signature   string    `json:"signature,omitempty"`
	// CardDigest is CardDigest of the card the decider was shown
	// ("sha256:" and 64 hex digits), recorded with the decision and, when
	// set, signed (agentsaga-decision-v3). Clients from before it send
	// none.
	CardDigest string `json:"card_digest,omitempty"`
}

// Outcome is a human's decision about a step whose truth is unknown.
type Outcome string

// The outcomes a resolve may carry.
const (
	// OutcomeSucceeded: the effect happened (give its external_id if known).
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the effect did not happen and must not be retried.
	OutcomeFailed Outcome = "failed"
	// OutcomeRetry: the effect did not happen; call again with the same key.
	OutcomeRetry Outcome = "retry"
)

// ResolveSignal is the payload of Update (and signal) `resolve`, answering
// the open question of a step in needs_human (its outcome, a conflict, or a
// failed reversal). QuestionID, RunID, SentAt and Signature as for
// ApproveSignal.
//
//	{"step": 2, "question_id": "q2-step2-outcome", "run_id": "0193…", "outcome": "succeeded", "external_id": "msg_81", "by": "bob", "note": "seen in the mail log"}
type ResolveSignal struct {
	Step       int       `json:"step"`
	QuestionID string    `json:"question_id,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
	Outcome    Outcome   `json:"outcome"`
	ExternalID string    `json:"external_id,omitempty"`
	By         string    `json:"by"`
	Note       string    `json:"note,omitempty"`
	SentAt     time.Time `json:"sent_at,omitzero"`
	Signature  string    `json:"signature,omitempty"`
	// CardDigest as for ApproveSignal.
	CardDigest string `json:"card_digest,omitempty"`
}

// DecisionResult is what the `approve` and `resolve` Updates return.
type DecisionResult struct {
	QuestionID string `json:"question_id"`
	// Applied is false when the same decision had already been applied
	// (a double click): nothing happened twice.
	Applied bool `json:"applied"`
	// By is the decider as recorded; Verified says the identity was
	// checked against the operators file.
	By       string `json:"by"`
	Verified bool   `json:"verified"`
	// SentAt is the sent_at of the decision that was applied: a client
	// that finds another than the one it sent knows its decision was a
	// repeat, even when Temporal answered a repeated Update ID with the
	// first decision's result.
	SentAt  time.Time `json:"sent_at,omitzero"`
	Message string    `json:"message"`
}

// Question kinds: what a human is asked.
const (
	// QuestionApproval: may step N run (approval policy, guard clash or
	// suspected duplicate)? Answered by `approve`.
	QuestionApproval = "approval"
	// QuestionOutcome: what happened to step N (unknown outcome, or a
	// provider holding a different effect under the key)? Answered by
	// `resolve`.
	QuestionOutcome = "outcome"
	// QuestionReversal: step N's reversal failed; was it reversed by hand,
	// should it be retried, or does it stay? Answered by `resolve`.
	QuestionReversal = "reversal"
)

// Question is one open wait for a human. A decision answers the question
// open when it arrives, or none.
type Question struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Step        int       `json:"step"`
	Key         string    `json:"key"`
	Fingerprint string    `json:"fingerprint"`
	OpenedAt    time.Time `json:"opened_at"`
	// ExpiresAt is when an approval question expires (expired means
	// rejected and compensated). Zero for questions that stay open.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Answers lists what the decider may answer: approve/reject, or the
	// resolve outcomes that fit.
	Answers []string `json:"answers"`
	Card    Card     `json:"card"`
	// CardDigest is CardDigest(Card), worked out once as the question
	// opened, so a client listing many questions need not (empty in
	// questions opened before it was).
	CardDigest string `json:"card_digest,omitempty"`
}

// Card is the compact approval card: everything a person needs to decide
// one question, and nothing secret.
type Card struct {
	// Change: the tool and its one-line description.
	Change string `json:"change"`
	// System: the provider the tool writes to.
	System string `json:"system,omitempty"`
	// Object: the business object (the guard entity or a declared subject
	// field), such as "order_id ord_1001".
	Object string `json:"object,omitempty"`
	// Amount rendered from minor units ("1,500.00 EUR"), with the raw
	// figures beside it.
	Amount      string `json:"amount,omitempty"`
	AmountMinor int64  `json:"amount_minor,omitempty"`
	Currency    string `json:"currency,omitempty"`
	// Who asked.
	RequestID   string `json:"request_id,omitempty"`
	RequestedBy string `json:"requested_by,omitempty"`
	Session     string `json:"session"`
	// Rule: which rule asked (approval policy and threshold, guard clash,
	// unknown outcome and how long reconcile tried).
	Rule string `json:"rule"`
	// Clash: a guard clash or suspected duplicate; approving it needs
	// override.
	Clash string `json:"clash,omitempty"`
	// AlreadyRan: other effects on the same object in the ledger, such as
	// "ord_1002 already refunded 1,500.00 EUR by h-1:1:2:apply_refund".
	AlreadyRan []string `json:"already_ran,omitempty"`
	// Key is the operation key the decision is about.
	Key string `json:"key"`

	// The fields below came with issue 36: all omitempty, so a card from
	// before them has the same JSON, and the same CardDigest, as it had.

	// Reason: why the call is made, in the request's own words: its
	// reason, description or note argument, else the step's hold text
	// (at most MaxCardValueLen bytes).
	Reason string `json:"reason,omitempty"`
	// Arguments: the call's arguments as "name: value" in the tool's
	// order, money formatted ("amount_minor: 600.00 EUR"), secrets masked,
	// each value clipped to MaxCardValueLen, at most MaxCardArguments. A
	// reversal's card shows the arguments of the call it reverses.
	Arguments []string `json:"arguments,omitempty"`
	// Reverses (reversal questions): the effect the reversal undoes: the
	// original tool, its external id and its operation key.
	Reverses string `json:"reverses,omitempty"`
	// ReversalKey (reversal questions): the reversal's own operation key.
	ReversalKey string `json:"reversal_key,omitempty"`
	// ProviderAnswered (reversal questions): what the provider answered
	// the reversal (its refusal), masked, at most MaxCardLineLen.
	ProviderAnswered string `json:"provider_answered,omitempty"`
	// Calls: the calls of the key the question is about, oldest first:
	// when the workflow made each (its clock when it scheduled the call;
	// one call covers the activity's own retries, counted as attempts)
	// and what came back, masked and clipped to MaxCardLineLen, such as
	// "2026-12-06 22:10:01Z, 1 attempt: no answer within 10s (timeout):
	// the request may have reached the provider". The last MaxCardCalls.
	Calls []string `json:"calls,omitempty"`
	// LastSent: when the ledger last let a request for the key go to the
	// provider (ledger.Operation.SentAt; outcome questions), the time the
	// request that may have landed left.
	LastSent string `json:"last_sent,omitempty"`
	// Lookup: the provider's latest answer to a lookup by the key, with
	// its time and how many lookups were made.
	Lookup string `json:"lookup,omitempty"`
	// Does: what each answer does, for this tool and this question, in
	// the order the console shows the answers.
	Does []AnswerDoes `json:"does,omitempty"`
}

// AnswerDoes is what one answer to a question does.
type AnswerDoes struct {
	Answer string `json:"answer"`
	Does   string `json:"does"`
}

// Bounds of what a card shows of a call.
const (
	// MaxCardArguments bounds the arguments a card lists; more are
	// counted in one last line.
	MaxCardArguments = 16
	// MaxCardValueLen bounds, in bytes, one argument's value and the
	// reason on a card.
	MaxCardValueLen = 160
	// MaxCardCalls bounds the calls a card lists (the latest ones; the
	// earlier are counted).
	MaxCardCalls = 10
	// MaxCardLineLen bounds, in bytes, one call line, the lookup line and
	// the provider's answer on a card.
	MaxCardLineLen = 300
)

// Decision is a human decision kept in a step: an approval, a rejection, a
// resolution, an expiry, or a decision that was refused and why.
type Decision struct {
	Kind       string    `json:"kind"` // "approve", "resolve" or "expire"
	QuestionID string    `json:"question_id,omitempty"`
	By         string    `json:"by"`
	Verified   bool      `json:"verified,omitempty"`
	SentAt     time.Time `json:"sent_at,omitzero"`
	At         time.Time `json:"at"` // when it was applied (or refused)
	Approved   bool      `json:"approved,omitempty"`
	// Override: the approval lets the call through a clash on its card.
	Override   bool    `json:"override,omitempty"`
	Outcome    Outcome `json:"outcome,omitempty"`
	ExternalID string  `json:"external_id,omitempty"`
	Note       string  `json:"note,omitempty"`
	// Assertion: a person's "succeeded" for a tool that cannot look
	// itself up, recorded as that person's word (not checked).
	Assertion bool `json:"assertion,omitempty"`
	// Adopted: a person's "succeeded" that adopts an effect the provider
	// holds under the key but made with other arguments (a Mismatch),
	// naming its external id and why it is this step's.
	Adopted bool `json:"adopted,omitempty"`
	// Refused says why the signal was not accepted, for example a stale
	// fingerprint. Empty for accepted decisions.
	Refused string `json:"refused,omitempty"`
	// CardDigest is the digest of the card the decider said they were
	// shown (see CardDigest); empty from clients that send none.
	CardDigest string `json:"card_digest,omitempty"`
}

// Compensation is the state of a step's reversal (storno).
type Compensation struct {
	Key        string        `json:"key"`
	Tool       string        `json:"tool"`
	State      ledger.Status `json:"state"`
	Attempts   int           `json:"attempts"`
	ExternalID string        `json:"external_id,omitempty"`
	LastError  string        `json:"last_error,omitempty"`
	// InFlightUntil is StepStatus.InFlightUntil for the reversal.
	InFlightUntil time.Time `json:"in_flight_until,omitzero"`
}

// StepStatus is the state of one step, as the `status` query returns it.
type StepStatus struct {
	Step int `json:"step"`
	// Turn is the session turn the step belongs to (AgentSession only;
	// its keys use the step's number within that turn).
	Turn        int             `json:"turn,omitempty"`
	Key         string          `json:"key"`
	Tool        string          `json:"tool"`
	Class       tool.Class      `json:"class"`
	Fingerprint string          `json:"fingerprint"`
	State       ledger.Status   `json:"state"`
	Attempts    int             `json:"attempts"`
	ExternalID  string          `json:"external_id,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"` // sanitized
	LastError   string          `json:"last_error,omitempty"`
	ErrorCode   string          `json:"error_code,omitempty"`
	// Waiting says what the step waits for: "approval" or "resolve".
	Waiting string `json:"waiting,omitempty"`
	// InFlightUntil, while set, is the in-flight horizon the step waits
	// out: its last request may still land at the provider until then, so
	// an absent lookup answer settles nothing before it.
	InFlightUntil time.Time     `json:"in_flight_until,omitzero"`
	Decisions     []Decision    `json:"decisions,omitempty"`
	Compensation  *Compensation `json:"compensation,omitempty"`
}

// Status is the answer of the `status` query and the workflow's result.
type Status struct {
	WorkflowID string `json:"workflow_id"`
	// RunID is the Temporal run the status is of; a signed decision names
	// it (see ApproveSignal.RunID).
	RunID string `json:"run_id,omitempty"`
	// SignedDecisions: the worker answering the query accepts only
	// decisions signed with an operator's key (it has an operators file).
	// Set in query answers only, never in the history.
	SignedDecisions bool         `json:"signed_decisions,omitempty"`
	SessionID       string       `json:"session_id"`
	Turn            int          `json:"turn"`
	RequestID       string       `json:"request_id,omitempty"`
	PlanFingerprint string       `json:"plan_fingerprint"`
	State           SagaState    `json:"state"`
	Error           string       `json:"error,omitempty"`
	Steps           []StepStatus `json:"steps"`
	// LedgerErrors lists ledger writes of the workflow that failed after
	// their retries (the ledger and this status may disagree on them).
	LedgerErrors []string `json:"ledger_errors,omitempty"`
	// Questions are the open questions, oldest first.
	Questions []Question `json:"questions,omitempty"`
	// RefusedSignals counts the decision signals the plan refused; the
	// first MaxRefusedRecorded are recorded (clipped) in their steps and
	// the audit trail, the rest only counted.
	RefusedSignals int `json:"refused_signals,omitempty"`
}

// NeedsHuman reports whether the plan waits for a person.
func (s Status) NeedsHuman() bool {
	return s.State == SagaNeedsHuman || s.State == SagaWaitingApproval
}

// Update names: the same names as the signals, answered synchronously.
const (
	// UpdateApprove takes an ApproveSignal and returns a DecisionResult.
	UpdateApprove = SignalApprove
	// UpdateResolve takes a ResolveSignal and returns a DecisionResult.
	UpdateResolve = SignalResolve
)

// signingPrefix versions the bytes a decision signature covers (v2: the
// decision names its run); signingPrefixV3 those of a decision that names
// the digest of the card it was shown (v3). A decision without a card
// digest signs exactly the v2 bytes, so signatures of clients from before
// v3 still verify, and a v3 signature never verifies as v2 (stripping the
// digest changes the tag and the bytes).
const (
	signingPrefix   = "agentsaga-decision-v2\n"
	signingPrefixV3 = "agentsaga-decision-v3\n"
)

// SigningBytes returns the bytes an operator's signature of a covers: the
// workflow ID and every field of the decision except the signature itself
// (its run_id and card_digest included), so a signature answers exactly one
// question of one run of one plan, as shown on one card.
func (a ApproveSignal) SigningBytes(workflowID string) []byte {
	a.Signature = ""
	return signingBytes(workflowID, SignalApprove, a.CardDigest != "", a)
}

// SigningBytes returns the bytes an operator's signature of r covers (see
// ApproveSignal.SigningBytes).
func (r ResolveSignal) SigningBytes(workflowID string) []byte {
	r.Signature = ""
	return signingBytes(workflowID, SignalResolve, r.CardDigest != "", r)
}

// signingBytes is the signed form of a decision (its signature cleared) of
// kind for workflowID: v3 when it names a card digest, else v2.
func signingBytes(workflowID, kind string, v3 bool, decision any) []byte {
	b, _ := json.Marshal(struct {
		WorkflowID string `json:"workflow_id"`
		Kind       string `json:"kind"`
		Decision   any    `json:"decision"`
	}{workflowID, kind, decision})
	prefix := signingPrefix
	if v3 {
		prefix = signingPrefixV3
	}
	return append([]byte(prefix), b...)
}

// CardDigestPrefix starts every card digest.
const CardDigestPrefix = "sha256:"

// MaxCardDigestLen bounds a decision's card_digest: "sha256:" and 64 hex
// digits.
const MaxCardDigestLen = len(CardDigestPrefix) + 64

// CardDigest returns the digest of a card as a decider is shown it:
// "sha256:" and the hex SHA-256 of the card's JSON, after one round trip
// through JSON (what a client decodes from the status and encodes again),
// so the workflow, the CLI, the console and an auditor reading the card
// from the audit trail all get the same digest for the same card.
func CardDigest(c Card) string {
	b, _ := json.Marshal(c)
	var again Card
	if json.Unmarshal(b, &again) == nil {
		b, _ = json.Marshal(again)
	}
	sum := sha256.Sum256(b)
	return CardDigestPrefix + hex.EncodeToString(sum[:])
}

// CheckCardDigest refuses a card digest that is not empty and not
// "sha256:" with 64 lower-case hex digits.
func CheckCardDigest(d string) error {
	if d == "" {
		return nil
	}
	if len(d) != MaxCardDigestLen || !strings.HasPrefix(d, CardDigestPrefix) {
		return refused("card_digest is %d bytes: it is %q and 64 hex digits (%d bytes), the digest of the card shown", len(d), CardDigestPrefix, MaxCardDigestLen)
	}
	for _, c := range d[len(CardDigestPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return refused("card_digest holds %q: it is %q and 64 lower-case hex digits", c, CardDigestPrefix)
		}
	}
	return nil
}

// CardLine is one labelled line of a card, for people.
type CardLine struct {
	Label, Value string
}

// Lines returns the card's non-empty lines in the order people read them:
// change, system, the effect a reversal undoes, object, amount, reason,
// arguments, who asked, rule, clash, what the provider answered, the calls
// made and the latest lookup, already ran, what each answer does ("if
// retry"), key and the reversal's key. Every printer of a card (the UI's
// current details, the MCP gateway, the CLI, the console) words them the
// same way.
func (c Card) Lines() []CardLine {
	var out []CardLine
	add := func(label, v string) {
		if v != "" {
			out = append(out, CardLine{label, v})
		}
	}
	add("change", c.Change)
	add("system", c.System)
	add("reverses", c.Reverses)
	add("object", c.Object)
	add("amount", c.Amount)
	add("reason", c.Reason)
	for _, a := range c.Arguments {
		add("argument", a)
	}
	var who []string
	for _, w := range [][2]string{{"request ", c.RequestID}, {"requested by ", c.RequestedBy}, {"session ", c.Session}} {
		if w[1] != "" {
			who = append(who, w[0]+w[1])
		}
	}
	add("who asked", strings.Join(who, ", "))
	add("rule", c.Rule)
	add("clash", c.Clash)
	add("provider answered", c.ProviderAnswered)
	for _, s := range c.Calls {
		add("call", s)
	}
	add("last sent", c.LastSent)
	add("lookup", c.Lookup)
	for _, a := range c.AlreadyRan {
		add("already ran", a)
	}
	for _, d := range c.Does {
		add(DoesLabel(d.Answer), d.Does)
	}
	add("key", c.Key)
	add("reversal key", c.ReversalKey)
	return out
}

// DoesLabel is the label of the card line that says what answer does:
// "if retry".
func DoesLabel(answer string) string { return "if " + answer }

package workflows

import (
	"encoding/json"
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

// ApproveSignal is the payload of signal `approve`. Fingerprint must equal
// the step's fingerprint (see StepStatus.Fingerprint), so no approval ever
// covers changed arguments.
//
//	{"step": 3, "fingerprint": "9f2c…", "by": "alice", "approved": true, "reason": "customer verified"}
type ApproveSignal struct {
	Step        int    `json:"step"`
	Fingerprint string `json:"fingerprint"`
	By          string `json:"by"`
	Approved    bool   `json:"approved"`
	Reason      string `json:"reason,omitempty"`
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

// ResolveSignal is the payload of signal `resolve`, answering a step in
// needs_human (or a failed compensation of that step).
//
//	{"step": 2, "outcome": "succeeded", "external_id": "msg_81", "by": "bob", "note": "seen in the mail log"}
type ResolveSignal struct {
	Step       int     `json:"step"`
	Outcome    Outcome `json:"outcome"`
	ExternalID string  `json:"external_id,omitempty"`
	By         string  `json:"by"`
	Note       string  `json:"note,omitempty"`
}

// Decision is a human decision kept in a step: an approval, a rejection, a
// resolution, or a signal that was refused and why.
type Decision struct {
	Kind       string    `json:"kind"` // "approve" or "resolve"
	By         string    `json:"by"`
	At         time.Time `json:"at"`
	Approved   bool      `json:"approved,omitempty"`
	Outcome    Outcome   `json:"outcome,omitempty"`
	ExternalID string    `json:"external_id,omitempty"`
	Note       string    `json:"note,omitempty"`
	// Refused says why the signal was not accepted, for example a stale
	// fingerprint. Empty for accepted decisions.
	Refused string `json:"refused,omitempty"`
}

// Compensation is the state of a step's reversal (storno).
type Compensation struct {
	Key        string        `json:"key"`
	Tool       string        `json:"tool"`
	State      ledger.Status `json:"state"`
	Attempts   int           `json:"attempts"`
	ExternalID string        `json:"external_id,omitempty"`
	LastError  string        `json:"last_error,omitempty"`
}

// StepStatus is the state of one step, as the `status` query returns it.
type StepStatus struct {
	Step        int             `json:"step"`
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
	Waiting      string        `json:"waiting,omitempty"`
	Decisions    []Decision    `json:"decisions,omitempty"`
	Compensation *Compensation `json:"compensation,omitempty"`
}

// Status is the answer of the `status` query and the workflow's result.
type Status struct {
	WorkflowID      string       `json:"workflow_id"`
	SessionID       string       `json:"session_id"`
	Turn            int          `json:"turn"`
	RequestID       string       `json:"request_id,omitempty"`
	PlanFingerprint string       `json:"plan_fingerprint"`
	State           SagaState    `json:"state"`
	Error           string       `json:"error,omitempty"`
	Steps           []StepStatus `json:"steps"`
}

// NeedsHuman reports whether the plan waits for a person.
func (s Status) NeedsHuman() bool {
	return s.State == SagaNeedsHuman || s.State == SagaWaitingApproval
}

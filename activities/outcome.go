package activities

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// Error types of the ApplicationErrors ExecuteTool returns. The workflow
// decides a step's state from them; other-language clients see them in the
// Temporal UI.
const (
	// ErrUnknown: the request may have reached the provider and no answer
	// came back. UNKNOWN, never FAILED: the workflow reconciles.
	ErrUnknown = "OutcomeUnknown"
	// ErrRejected: the provider confirmed a business rejection. Final.
	ErrRejected = "Rejected"
	// ErrConflict: the key was used before with other arguments. Final; the
	// tool was not called.
	ErrConflict = "Conflict"
	// ErrHeld: a guard or the duplicate check holds the call for approval.
	ErrHeld = "HeldForApproval"
	// ErrGuardRefused: another active effect holds the tool's guard scope.
	ErrGuardRefused = "GuardRefused"
	// ErrAlreadyFinal: the ledger holds a final or human-owned state for the
	// key; the tool was not called.
	ErrAlreadyFinal = "AlreadyFinal"
	// ErrCompensated: the ledger says the key succeeded and was
	// compensated already (a reset, or another run of the same plan,
	// replays it); neither the tool nor its reversal was called. Final.
	ErrCompensated = "AlreadyCompensated"
	// ErrNotRegistered: this worker has no such tool.
	ErrNotRegistered = "ToolNotRegistered"
	// ErrLedger: the ledger could not be reached or could not record; the
	// message says whether the provider was called (and the external id).
	ErrLedger = "LedgerUnavailable"
	// ErrNoPermit: the call needs a human's approval and carries no valid
	// permit (none, or one the ledger refused). Final; the tool was not
	// called.
	ErrNoPermit = "ApprovalPermitMissing"
	// ErrRecordRefused: the ledger can never accept this record (an
	// unknown status, a row in none of the From states). Final.
	ErrRecordRefused = "RecordRefused"
)

// Classify turns a tool's error into the activity's error. This is where a
// timeout becomes UNKNOWN: any failure whose kind is not known (a timeout, a
// connection lost after sending, a bare error) is tool.KindUnknown, and a
// write's UNKNOWN is never retried blindly. Whether a kind is retried is
// tool.Retryable's table for the tool's class.
//
// Everything that leaves the tool is masked by redact.String: the message,
// the provider's code in Detail and every message of the cause chain (which
// Temporal stores in history and the SDK logs), so the status, history and
// the worker's log show what the ledger shows.
func Classify(class tool.Class, attempt int32, err error) error {
	kind := tool.KindOf(err)
	typ := string(kind)
	switch kind {
	case tool.KindUnknown:
		typ = ErrUnknown
	case tool.KindRejected:
		typ = ErrRejected
	case tool.KindConflict:
		typ = ErrConflict
	}
	retry := tool.Retryable(class, kind)
	wait := tool.RetryAfterOf(err)
	opts := temporal.ApplicationErrorOptions{
		NonRetryable: !retry,
		Cause:        MaskedChain(err),
		Details:      []any{Detail{Code: redact.String(tool.CodeOf(err)), Attempt: attempt, RetryAfter: wait}},
	}
	if retry && wait > 0 {
		// The provider said when to come back (Retry-After): the next
		// attempt waits that long instead of the backoff. Attempts stay
		// bounded by the tool's retry policy.
		opts.NextRetryDelay = wait
	}
	return temporal.NewApplicationErrorWithOptions(redact.String(err.Error()), typ, opts)
}

// MaskedChain returns a copy of err's chain that Temporal can carry without
// a secret: each error becomes an ApplicationError whose message is that
// error's text passed through redact.String and whose type is its Go type
// name (as Temporal would name it), linked to the masked copy of what it
// wraps. A chain that is already an ApplicationError keeps its type and
// retry flag. nil gives nil.
func MaskedChain(err error) error {
	if err == nil {
		return nil
	}
	var (
		msg  = err.Error()
		typ  = typeName(err)
		next = errors.Unwrap(err)
		opts temporal.ApplicationErrorOptions
	)
	if ae, ok := err.(*temporal.ApplicationError); ok {
		msg, typ, opts.NonRetryable = ae.Message(), ae.Type(), ae.NonRetryable()
	}
	opts.Cause = MaskedChain(next)
	return temporal.NewApplicationErrorWithOptions(redact.String(msg), typ, opts)
}

// typeName names err's type as Temporal's failure converter does: the Go
// type's name without pointers.
func typeName(err error) string {
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}

// IsUnknown reports whether a failed tool call of a write has an UNKNOWN
// outcome: the activity said so, a transient failure outlived its retries
// (the last attempt may have reached the provider), or the activity itself
// timed out (the worker died or hung after it may have sent the request).
func IsUnknown(err error) bool {
	if err == nil {
		return false
	}
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return true
	}
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		return true // a failure we cannot explain is never a proven failure
	}
	switch ae.Type() {
	case ErrRejected, ErrConflict, ErrHeld, ErrGuardRefused, ErrAlreadyFinal, ErrCompensated, ErrNotRegistered, ErrNoPermit, ErrRecordRefused, ErrClashUnseen, string(tool.KindNotSent):
		return false
	}
	return true
}

// ErrorType returns the ApplicationError type in err's chain, or "".
func ErrorType(err error) string {
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) {
		return ae.Type()
	}
	return ""
}

// Detail rides on every ExecuteTool error: the provider's code, the attempt
// that failed and how long the provider asked to wait before the next one.
type Detail struct {
	Code    string `json:"code,omitempty"`
	Attempt int32  `json:"attempt"`
	// RetryAfter is the provider's Retry-After (capped), zero when it did
	// not say; the workflow may honour it between its own attempts too.
	RetryAfter time.Duration `json:"retry_after,omitempty"`
}

// DetailOf returns the Detail carried by err, or a zero Detail.
func DetailOf(err error) Detail {
	var ae *temporal.ApplicationError
	var d Detail
	if errors.As(err, &ae) && ae.HasDetails() {
		_ = ae.Details(&d)
	}
	return d
}

// final is a non-retryable activity error; its message (which may quote a
// provider or a human) is masked.
func final(attempt int32, typ, format string, args ...any) error {
	return temporal.NewApplicationErrorWithOptions(redact.String(fmt.Sprintf(format, args...)), typ, temporal.ApplicationErrorOptions{
		NonRetryable: true, Details: []any{Detail{Attempt: attempt}},
	})
}

// retryable is a retryable activity error with a masked message.
func retryable(attempt int32, typ, format string, args ...any) error {
	return temporal.NewApplicationErrorWithOptions(redact.String(fmt.Sprintf(format, args...)), typ, temporal.ApplicationErrorOptions{
		Details: []any{Detail{Attempt: attempt}},
	})
}

// refused is the non-retryable ErrRecordRefused: a bookkeeping write the
// ledger can never accept, so retrying it would wedge the workflow.
func refused(format string, args ...any) error {
	return temporal.NewApplicationErrorWithOptions(redact.String(fmt.Sprintf(format, args...)), ErrRecordRefused, temporal.ApplicationErrorOptions{NonRetryable: true})
}

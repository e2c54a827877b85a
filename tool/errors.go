package tool

import (
	"errors"
	"fmt"
	"time"
)

// Kind says what is known about a failed call: whether the request left, and
// whether the provider answered. Tools report it by returning an *Error; any
// other error is taken as KindUnknown, the safe assumption.
type Kind string

// The kinds of failure a tool can report.
const (
	// KindNotSent: the request provably never reached the provider (dial
	// refused, request could not be built). Safe to send again.
	KindNotSent Kind = "not_sent"
	// KindUnavailable: the provider answered 5xx; for a keyed write it may
	// have committed, so a retry reconciles first.
	KindUnavailable Kind = "unavailable"
	// KindThrottled: the provider answered 429.
	KindThrottled Kind = "throttled"
	// KindInFlight: the provider is still working on the same key (409).
	KindInFlight Kind = "in_flight"
	// KindUnknown: the request left and no answer came back (timeout,
	// connection lost after sending). The outcome is UNKNOWN, never FAILED.
	KindUnknown Kind = "unknown"
	// KindRejected: a confirmed business rejection (validation, insufficient
	// funds, forbidden). Final; never retried.
	KindRejected Kind = "rejected"
	// KindConflict: the key was used before with other arguments. Final.
	KindConflict Kind = "conflict"
)

// Error is the error a tool returns to say what kind of failure happened.
type Error struct {
	Kind Kind
	// Code is a short machine-readable reason, such as "insufficient_funds"
	// or "http_503".
	Code string
	// Err is the underlying cause.
	Err error
	// RetryAfter is how long the provider asked to wait before the next
	// attempt (an HTTP Retry-After), zero when it did not say. Activities
	// turn it into the next retry's delay for retryable kinds.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("%s (%s)", e.Kind, e.Code)
	}
	return fmt.Sprintf("%s (%s): %v", e.Kind, e.Code, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Fail returns an *Error of kind k with the given code and cause.
func Fail(k Kind, code string, err error) error { return &Error{Kind: k, Code: code, Err: err} }

// KindOf returns the kind of err: the Kind of the first *Error in its chain,
// or KindUnknown for any other error (an unexplained failure of a call that
// may have left is UNKNOWN, never FAILED).
func KindOf(err error) Kind {
	var te *Error
	if errors.As(err, &te) {
		return te.Kind
	}
	return KindUnknown
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	var te *Error
	if errors.As(err, &te) {
		return te.Code
	}
	return ""
}

// RetryAfterOf returns the wait the provider asked for in the first *Error of
// err's chain, or zero.
func RetryAfterOf(err error) time.Duration {
	var te *Error
	if errors.As(err, &te) {
		return te.RetryAfter
	}
	return 0
}

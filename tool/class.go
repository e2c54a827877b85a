package tool

import (
	"fmt"
	"time"
)

// Class is a tool's side-effect class. It decides how the tool may be retried
// and what a lost response means.
type Class string

// The side-effect classes, as named in ARCHITECTURE.md and in every payload.
const (
	// Read has no side effect: it may be retried on timeouts and 5xx.
	Read Class = "READ"
	// IdempotentWrite is a write the provider deduplicates by Idempotency-Key.
	IdempotentWrite Class = "IDEMPOTENT_WRITE"
	// ConditionalWrite is a write made safe by a condition the provider
	// enforces, such as an upsert by external reference.
	ConditionalWrite Class = "CONDITIONAL_WRITE"
	// NonIdempotentWrite is a write that happens again if it is sent again.
	// It is retried only when the request provably never left.
	NonIdempotentWrite Class = "NON_IDEMPOTENT_WRITE"
)

// Classes lists every valid class in a stable order.
var Classes = []Class{Read, IdempotentWrite, ConditionalWrite, NonIdempotentWrite}

// Valid reports whether c is one of the four declared classes.
func (c Class) Valid() bool {
	for _, k := range Classes {
		if c == k {
			return true
		}
	}
	return false
}

// IsWrite reports whether calls of this class change something outside.
func (c Class) IsWrite() bool { return c.Valid() && c != Read }

// RetryPolicy is how often and how fast a tool call is attempted. It is the
// product's view of a Temporal retry policy; workflows translate it.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt too; 1 means never retried.
	MaxAttempts int32 `json:"max_attempts"`
	// InitialInterval is the wait before the second attempt.
	InitialInterval time.Duration `json:"initial_interval"`
	// BackoffCoefficient multiplies the wait after each attempt.
	BackoffCoefficient float64 `json:"backoff_coefficient"`
	// MaximumInterval caps the wait between attempts.
	MaximumInterval time.Duration `json:"maximum_interval"`
}

// Validate reports a policy that Temporal would refuse or that never runs.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("max_attempts is %d: set at least 1 (1 means no retry)", p.MaxAttempts)
	case p.InitialInterval <= 0:
		return fmt.Errorf("initial_interval is %s: set a positive duration", p.InitialInterval)
	case p.BackoffCoefficient < 1:
		return fmt.Errorf("backoff_coefficient is %g: set 1 or more", p.BackoffCoefficient)
	case p.MaximumInterval != 0 && p.MaximumInterval < p.InitialInterval:
		return fmt.Errorf("maximum_interval %s is below initial_interval %s: raise it or leave it zero (100 times the initial interval)", p.MaximumInterval, p.InitialInterval)
	}
	return nil
}

// DefaultRetry returns the class's default retry policy (ARCHITECTURE.md):
// READ 3 attempts from 200 ms doubling up to 5 s; writes 2 attempts from
// 500 ms doubling up to 10 s. Every class is bounded in attempts and in the
// wait between them, so a persistent outage ends in a decision, not a loop;
// a provider's Retry-After may lengthen one wait (capped by
// httptool.MaxRetryAfter), never add attempts. Which failures are retried is
// decided per class by Retryable.
func DefaultRetry(c Class) RetryPolicy {
	if c == Read {
		return RetryPolicy{MaxAttempts: 3, InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 5 * time.Second}
	}
	return RetryPolicy{MaxAttempts: 2, InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second}
}

// Retryable reports whether a failure of kind k may be retried for a tool of
// class c. This is the whole retry rule of ARCHITECTURE.md in one table:
//
//	READ:                  timeouts, 5xx, 429, not sent
//	IDEMPOTENT_WRITE:      5xx, 429, not sent (never a timeout: that is UNKNOWN)
//	CONDITIONAL_WRITE:     as IDEMPOTENT_WRITE
//	NON_IDEMPOTENT_WRITE:  not sent only
//
// Rejections and conflicts are final for every class.
func Retryable(c Class, k Kind) bool {
	switch k {
	case KindNotSent:
		return true
	case KindUnavailable, KindThrottled, KindInFlight:
		return c != NonIdempotentWrite
	case KindUnknown:
		return c == Read
	}
	return false
}

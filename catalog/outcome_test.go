package catalog_test

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/tool"
)

// The catalogue's errors become the activity outcomes the workflow acts on
// (activities.Classify): a rejection and a conflict are final, a lost
// answer is OutcomeUnknown and not retried for a write, a throttle is
// retried after the provider's Retry-After.
func TestProviderErrorsBecomeActivityOutcomes(t *testing.T) {
	p, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	spec, _ := reg.Spec("charge")
	for _, tc := range []struct {
		mode, typ string
		final     bool
		delay     time.Duration
	}{
		{"decline", activities.ErrRejected, true, 0},
		{"reuse", activities.ErrConflict, true, 0},
		{"drop", activities.ErrUnknown, true, 0},
		{"throttle", string(tool.KindThrottled), false, 7 * time.Second},
	} {
		p.mu.Lock()
		p.next = tc.mode
		p.mu.Unlock()
		_, err := call(t, reg, "charge", "s9:1:1:charge:"+tc.mode, chargeArgs, 1)
		var ae *temporal.ApplicationError
		if !errors.As(activities.Classify(spec.Class, 1, err), &ae) {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		if ae.Type() != tc.typ || ae.NonRetryable() != tc.final || ae.NextRetryDelay() != tc.delay {
			t.Errorf("%s: type %s final %v delay %s; want %s %v %s", tc.mode, ae.Type(), ae.NonRetryable(), ae.NextRetryDelay(), tc.typ, tc.final, tc.delay)
		}
	}
}

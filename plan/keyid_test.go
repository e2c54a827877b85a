package plan_test

import (
	"testing"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
)

// An operation key logged through KeyID keeps a Luhn-valid turn whole and
// masks a session id that is a card number.
func TestKeyIDKeepsTurnAndStep(t *testing.T) {
	for key, want := range map[string]string{
		plan.Key("s1", 1099511640121, 1, "send_email"):                  "s1:1099511640121:1:send_email",
		plan.Key("s1", 1099511640121, 1, "send_email") + ":compensate":  "s1:1099511640121:1:send_email:compensate",
		plan.Key("4111111111111111", 1099511640121, 2, "refund_charge"): "[redacted card ending 1111]:1099511640121:2:refund_charge",
	} {
		id := plan.KeyID(key)
		if got := redact.StringKeeping(id.Text, id.Counters...); got != want {
			t.Errorf("KeyID(%q) logs as %q, want %q", key, got, want)
		}
	}
}

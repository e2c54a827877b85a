package mcpgw

import "time"

// SetPersonPoll sets how often a call kept open for a person reads its
// turn, for a test; the returned func restores it.
func SetPersonPoll(d time.Duration) func() {
	old := personPoll
	personPoll = d
	return func() { personPoll = old }
}

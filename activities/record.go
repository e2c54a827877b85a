package activities

import (
	"context"
	"time"
)

// RecordTimeout bounds the ledger write that records what a call did. The
// write runs on a context detached from the activity's cancellation: once
// the provider has answered, a stopping worker or an activity that ran out
// of time must not lose a sure outcome and turn it into an unknown one.
const RecordTimeout = 10 * time.Second

// recordContext is the context of the ledger write that follows a call: ctx's
// values without its cancellation, bounded by RecordTimeout.
func recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), RecordTimeout)
}

package ledgerpg

import "time"

// WithWorkerClock sets the store's Go clock (the worker's clock) without
// replacing the database's clock, so a test can skew a worker.
func WithWorkerClock(now func() time.Time) Option { return func(o *options) { o.workerClock = now } }

// Migrations are the embedded schema migrations, for upgrade tests.
var Migrations = migrations

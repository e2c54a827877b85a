package ledgersqlite

// Migrations are the embedded schema migrations, for upgrade tests.
var Migrations = migrations

// WithoutBusyWait makes every wait for SQLite's write lock fail at once with
// SQLITE_BUSY, so a test sees whether writers of one process ever collide.
func WithoutBusyWait() Option { return func(o *options) { o.busy = 0 } }

package ledgersqlite

// Migrations are the embedded schema migrations, for upgrade tests.
var Migrations = migrations

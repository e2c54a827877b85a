-- Single-use approval permits (ledger.Permit). A claim consumes one in the
-- transaction that starts the call. Times are Unix microseconds (UTC).
CREATE TABLE permits (
    permit_id     TEXT PRIMARY KEY,
    operation_key TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    policy        TEXT NOT NULL DEFAULT '',
    override      INTEGER NOT NULL DEFAULT 0 CHECK (override IN (0, 1)),
    granted_by    TEXT NOT NULL,
    granted_at    INTEGER NOT NULL,
    consumed_at   INTEGER
);
CREATE INDEX permits_operation ON permits (operation_key);

-- The audit trail of human decisions: append-only, never purged.
CREATE TABLE decisions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    question_id   TEXT NOT NULL DEFAULT '',
    operation_key TEXT NOT NULL,
    workflow_id   TEXT NOT NULL DEFAULT '',
    kind          TEXT NOT NULL,
    decided_by    TEXT NOT NULL DEFAULT '',
    verified      INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),
    sent_at       INTEGER,
    applied_at    INTEGER NOT NULL,
    card          TEXT,
    outcome       TEXT NOT NULL DEFAULT '',
    external_id   TEXT NOT NULL DEFAULT '',
    note          TEXT NOT NULL DEFAULT '',
    refused       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX decisions_operation ON decisions (operation_key, id);
CREATE TRIGGER decisions_no_update BEFORE UPDATE ON decisions
BEGIN SELECT RAISE(ABORT, 'decisions are append-only: record a new decision instead'); END;
CREATE TRIGGER decisions_no_delete BEFORE DELETE ON decisions
BEGIN SELECT RAISE(ABORT, 'decisions are append-only: they are never deleted'); END;

-- Guard checks and InScope read (guard_scope, created_at); the queries
-- repeat "guard_scope <> ''" so SQLite can use this partial index.
DROP INDEX operations_guard_scope;
CREATE INDEX operations_scope ON operations (guard_scope, created_at, operation_key) WHERE guard_scope <> '';
-- The duplicate check compares args_hash = ?, which cannot use an index
-- restricted to args_hash <> ''.
DROP INDEX operations_duplicates;
CREATE INDEX operations_duplicate ON operations (action_type, entity, args_hash, created_at, operation_key);
-- Exceptions lists stuck executors: in_progress with a lease that ended.
CREATE INDEX operations_leases ON operations (lease_until) WHERE status = 'in_progress';

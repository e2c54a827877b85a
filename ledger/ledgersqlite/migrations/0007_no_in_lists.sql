-- The same rules without IN lists. SQLite evaluates "status IN (three or
-- more constants)" through an ephemeral table, built on every statement that
-- checks it: the CHECK on status and the predicates of the partial indexes
-- operations_exceptions and operations_purge made three such tables on every
-- claim and five on every completion, each a page cache the pure-Go
-- allocator maps and unmaps (about 40 % of a claim and completion's CPU).
-- The OR chains below accept exactly the same rows and are evaluated inline.
-- A CHECK cannot be altered in SQLite, so the table is rebuilt, as its ALTER
-- TABLE documentation describes; nothing refers to it by a foreign key.
CREATE TABLE operations_new (
    operation_key   TEXT PRIMARY KEY,
    action_type     TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status = 'pending' OR status = 'in_progress' OR status = 'succeeded'
                        OR status = 'failed_final' OR status = 'unknown' OR status = 'needs_human'
                        OR status = 'compensating' OR status = 'compensated' OR status = 'compensation_failed'),
    attempt_count   INTEGER NOT NULL DEFAULT 0,
    version         INTEGER NOT NULL DEFAULT 0,
    external_id     TEXT NOT NULL DEFAULT '',
    result_json     TEXT,
    error_code      TEXT NOT NULL DEFAULT '',
    lease_owner     TEXT NOT NULL DEFAULT '',
    lease_until     INTEGER,
    workflow_id     TEXT NOT NULL DEFAULT '',
    run_id          TEXT NOT NULL DEFAULT '',
    request_id      TEXT NOT NULL DEFAULT '',
    guard_scope     TEXT NOT NULL DEFAULT '',
    guard_key       TEXT,
    entity          TEXT NOT NULL DEFAULT '',
    args_hash       TEXT NOT NULL DEFAULT '',
    hold_reason     TEXT NOT NULL DEFAULT '',
    resolved_by     TEXT NOT NULL DEFAULT '',
    resolved_at     INTEGER,
    resolve_note    TEXT NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    completed_at    INTEGER,
    summary         TEXT NOT NULL DEFAULT '',
    replay_count    INTEGER NOT NULL DEFAULT 0,
    unknown_at      INTEGER,
    settled_at      INTEGER
);
INSERT INTO operations_new (operation_key, action_type, request_hash, status, attempt_count, version, external_id,
    result_json, error_code, lease_owner, lease_until, workflow_id, run_id, request_id, guard_scope, guard_key, entity,
    args_hash, hold_reason, resolved_by, resolved_at, resolve_note, created_at, updated_at, completed_at, summary,
    replay_count, unknown_at, settled_at)
SELECT operation_key, action_type, request_hash, status, attempt_count, version, external_id,
    result_json, error_code, lease_owner, lease_until, workflow_id, run_id, request_id, guard_scope, guard_key, entity,
    args_hash, hold_reason, resolved_by, resolved_at, resolve_note, created_at, updated_at, completed_at, summary,
    replay_count, unknown_at, settled_at
FROM operations;
DROP TABLE operations;
ALTER TABLE operations_new RENAME TO operations;

-- Every index of the table, as before but for the two predicates.
CREATE UNIQUE INDEX operations_guard_owner ON operations (guard_key)
    WHERE guard_key IS NOT NULL AND status NOT IN ('failed_final', 'compensated');
CREATE INDEX operations_exceptions ON operations (status, created_at)
    WHERE (status = 'unknown' OR status = 'needs_human' OR status = 'compensation_failed');
CREATE INDEX operations_purge ON operations (completed_at)
    WHERE (status = 'succeeded' OR status = 'failed_final' OR status = 'compensated');
CREATE INDEX operations_scope ON operations (guard_scope, created_at, operation_key) WHERE guard_scope <> '';
CREATE INDEX operations_duplicate ON operations (action_type, entity, args_hash, created_at, operation_key);
CREATE INDEX operations_leases ON operations (lease_until) WHERE status = 'in_progress';
CREATE INDEX operations_created ON operations (created_at);

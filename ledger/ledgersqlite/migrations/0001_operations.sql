-- The operation ledger. Times are Unix microseconds (UTC).
CREATE TABLE operations (
    operation_key   TEXT PRIMARY KEY,
    action_type     TEXT NOT NULL,
    request_hash    TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('pending', 'in_progress', 'succeeded', 'failed_final',
                        'unknown', 'needs_human', 'compensating', 'compensated', 'compensation_failed')),
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
    completed_at    INTEGER
);

-- At most one active operation owns a guard scope.
CREATE UNIQUE INDEX operations_guard_owner ON operations (guard_key)
    WHERE guard_key IS NOT NULL AND status NOT IN ('failed_final', 'compensated');
CREATE INDEX operations_guard_scope ON operations (guard_scope) WHERE guard_scope <> '';
CREATE INDEX operations_duplicates ON operations (action_type, entity, args_hash, created_at) WHERE args_hash <> '';
CREATE INDEX operations_exceptions ON operations (status, created_at)
    WHERE status IN ('unknown', 'needs_human', 'compensation_failed');
CREATE INDEX operations_purge ON operations (completed_at)
    WHERE status IN ('succeeded', 'failed_final', 'compensated');

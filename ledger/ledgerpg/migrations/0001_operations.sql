-- The operation ledger. Times are timestamptz.
CREATE TABLE operations (
    operation_key   text PRIMARY KEY,
    action_type     text NOT NULL,
    request_hash    text NOT NULL,
    status          text NOT NULL CHECK (status IN ('pending', 'in_progress', 'succeeded', 'failed_final',
                        'unknown', 'needs_human', 'compensating', 'compensated', 'compensation_failed')),
    attempt_count   integer NOT NULL DEFAULT 0,
    version         bigint NOT NULL DEFAULT 0,
    external_id     text NOT NULL DEFAULT '',
    result_json     jsonb,
    error_code      text NOT NULL DEFAULT '',
    lease_owner     text NOT NULL DEFAULT '',
    lease_until     timestamptz,
    workflow_id     text NOT NULL DEFAULT '',
    run_id          text NOT NULL DEFAULT '',
    request_id      text NOT NULL DEFAULT '',
    guard_scope     text NOT NULL DEFAULT '',
    guard_key       text,
    entity          text NOT NULL DEFAULT '',
    args_hash       text NOT NULL DEFAULT '',
    hold_reason     text NOT NULL DEFAULT '',
    resolved_by     text NOT NULL DEFAULT '',
    resolved_at     timestamptz,
    resolve_note    text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    completed_at    timestamptz
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

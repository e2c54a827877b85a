-- Single-use approval permits (ledger.Permit). A claim consumes one in the
-- transaction that starts the call.
CREATE TABLE permits (
    permit_id     text PRIMARY KEY,
    operation_key text NOT NULL,
    request_hash  text NOT NULL,
    policy        text NOT NULL DEFAULT '',
    override      boolean NOT NULL DEFAULT false,
    granted_by    text NOT NULL,
    granted_at    timestamptz NOT NULL,
    consumed_at   timestamptz
);
CREATE INDEX permits_operation ON permits (operation_key);

-- The audit trail of human decisions: append-only, never purged.
CREATE TABLE decisions (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    question_id   text NOT NULL DEFAULT '',
    operation_key text NOT NULL,
    workflow_id   text NOT NULL DEFAULT '',
    kind          text NOT NULL,
    decided_by    text NOT NULL DEFAULT '',
    verified      boolean NOT NULL DEFAULT false,
    sent_at       timestamptz,
    applied_at    timestamptz NOT NULL,
    card          jsonb,
    outcome       text NOT NULL DEFAULT '',
    external_id   text NOT NULL DEFAULT '',
    note          text NOT NULL DEFAULT '',
    refused       text NOT NULL DEFAULT ''
);
CREATE INDEX decisions_operation ON decisions (operation_key, id);
CREATE FUNCTION decisions_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'decisions are append-only: record a new decision instead of %', TG_OP;
END
$$;
CREATE TRIGGER decisions_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON decisions
    FOR EACH STATEMENT EXECUTE FUNCTION decisions_append_only();

-- Guard checks and InScope read (guard_scope, created_at); the queries
-- repeat "guard_scope <> ''" so the partial index applies to any parameter.
DROP INDEX operations_guard_scope;
CREATE INDEX operations_scope ON operations (guard_scope, created_at, operation_key) WHERE guard_scope <> '';
-- The duplicate check compares args_hash = $n, which a generic plan cannot
-- prove non-empty.
DROP INDEX operations_duplicates;
CREATE INDEX operations_duplicate ON operations (action_type, entity, args_hash, created_at, operation_key);
-- Exceptions lists stuck executors: in_progress with a lease that ended.
CREATE INDEX operations_leases ON operations (lease_until) WHERE status = 'in_progress';

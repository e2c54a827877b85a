-- The MCP gateway's memory of writes sent without a key (ledger.KeylessCall),
-- shared by every gateway process.
CREATE TABLE keyless_calls (
    caller            text NOT NULL,
    fingerprint       text NOT NULL,
    version           bigint NOT NULL,
    call_session      text NOT NULL,
    call_turn         bigint NOT NULL,
    call_at           timestamptz,
    call_given        text NOT NULL DEFAULT '',
    call_delivered_at timestamptz,
    held_session      text NOT NULL DEFAULT '',
    held_turn         bigint NOT NULL DEFAULT 0,
    held_at           timestamptz,
    held_given        text NOT NULL DEFAULT '',
    held_delivered_at timestamptz,
    forget_after      timestamptz,
    PRIMARY KEY (caller, fingerprint)
);
CREATE INDEX keyless_calls_forget ON keyless_calls (forget_after) WHERE forget_after IS NOT NULL;

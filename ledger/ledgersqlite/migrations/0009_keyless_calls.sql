-- The MCP gateway's memory of writes sent without a key (ledger.KeylessCall),
-- shared by every gateway process. Times are Unix microseconds (UTC).
CREATE TABLE keyless_calls (
    caller            TEXT NOT NULL,
    fingerprint       TEXT NOT NULL,
    version           INTEGER NOT NULL,
    call_session      TEXT NOT NULL,
    call_turn         INTEGER NOT NULL,
    call_at           INTEGER,
    call_given        TEXT NOT NULL DEFAULT '',
    call_delivered_at INTEGER,
    held_session      TEXT NOT NULL DEFAULT '',
    held_turn         INTEGER NOT NULL DEFAULT 0,
    held_at           INTEGER,
    held_given        TEXT NOT NULL DEFAULT '',
    held_delivered_at INTEGER,
    forget_after      INTEGER,
    PRIMARY KEY (caller, fingerprint)
);
CREATE INDEX keyless_calls_forget ON keyless_calls (forget_after) WHERE forget_after IS NOT NULL;

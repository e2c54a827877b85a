-- sent_at: the last time a claim let a call of the key go to the provider
-- (Unix microseconds, UTC). After a lost answer, an absent lookup answer
-- counts only once sent_at plus the tool's horizon (settle + lag) is past:
-- the first request can no longer land. NULL for a row that never sent or
-- was written before this migration (the engine then counts from
-- updated_at).
ALTER TABLE operations ADD COLUMN sent_at INTEGER;

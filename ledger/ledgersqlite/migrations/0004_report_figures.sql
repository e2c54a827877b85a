-- The figures of `starter report` (ledger.Store.Report). Times are Unix
-- microseconds (UTC).
-- replay_count: claims answered Replay from the stored success (a duplicate
-- absorbed by the ledger: nothing was called).
ALTER TABLE operations ADD COLUMN replay_count INTEGER NOT NULL DEFAULT 0;
-- unknown_at: the first time the operation's outcome became unknown (an
-- attempt recorded unknown, or a claim had to reconcile first).
ALTER TABLE operations ADD COLUMN unknown_at INTEGER;
-- settled_at: the first time after unknown_at that the outcome was known
-- again (succeeded, failed_final, pending, or a reversal state); by a person
-- when resolved_at equals it.
ALTER TABLE operations ADD COLUMN settled_at INTEGER;
CREATE INDEX operations_created ON operations (created_at);
-- opened_at: when the question a decision answers was opened, if the
-- recorder knew it (the minutes a person's decision took).
ALTER TABLE decisions ADD COLUMN opened_at INTEGER;
CREATE INDEX decisions_applied ON decisions (applied_at);

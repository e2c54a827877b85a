-- card_digest: the digest of the card the decider's client showed
-- (workflows.CardDigest, "sha256:" and 64 hex digits), as the decision
-- carried it ('' for decisions of clients that sent none, and for entries
-- recorded before this column).
ALTER TABLE decisions ADD COLUMN card_digest TEXT NOT NULL DEFAULT '';

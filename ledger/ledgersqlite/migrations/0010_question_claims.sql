-- Which operator is working which open question (ledger.QuestionClaim),
-- shared by every console process. Times are Unix microseconds (UTC).
CREATE TABLE question_claims (
    workflow_id   TEXT NOT NULL,
    question_id   TEXT NOT NULL,
    claimed_by    TEXT NOT NULL,
    claimed_at    INTEGER NOT NULL,
    claimed_until INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, question_id)
);
CREATE INDEX question_claims_until ON question_claims (claimed_until);

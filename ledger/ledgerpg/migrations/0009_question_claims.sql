-- Which operator is working which open question (ledger.QuestionClaim),
-- shared by every console process.
CREATE TABLE question_claims (
    workflow_id   text NOT NULL,
    question_id   text NOT NULL,
    claimed_by    text NOT NULL,
    claimed_at    timestamptz NOT NULL,
    claimed_until timestamptz NOT NULL,
    PRIMARY KEY (workflow_id, question_id)
);
CREATE INDEX question_claims_until ON question_claims (claimed_until);

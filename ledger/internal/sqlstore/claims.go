package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// ClaimQuestion implements ledger.Store: one statement that inserts the
// claim, or takes over the row only where it is by's own or has lapsed
// (compare and set); a row left unchanged is another's live claim.
func (s *Store) ClaimQuestion(ctx context.Context, workflowID, questionID, by string, d time.Duration) (ledger.QuestionClaim, error) {
	if err := checkQuestionClaim("claim question", workflowID, questionID, by); err != nil {
		return ledger.QuestionClaim{}, err
	}
	if d <= 0 || d > ledger.MaxClaimFor {
		return ledger.QuestionClaim{}, fmt.Errorf("ledger claim question: the duration %s is out of range: give more than 0 and at most %s", d, ledger.MaxClaimFor)
	}
	now := s.nowArg()
	res, err := s.w.ExecContext(ctx, s.expand(`INSERT INTO question_claims (workflow_id, question_id, claimed_by, claimed_at, claimed_until)
		VALUES (?, ?, ?, {now}, {now+})
		ON CONFLICT (workflow_id, question_id) DO UPDATE SET
			claimed_at = CASE WHEN question_claims.claimed_by = excluded.claimed_by AND question_claims.claimed_until > {now}
				THEN question_claims.claimed_at ELSE excluded.claimed_at END,
			claimed_by = excluded.claimed_by, claimed_until = excluded.claimed_until
		WHERE question_claims.claimed_by = excluded.claimed_by OR question_claims.claimed_until <= {now}`),
		workflowID, questionID, by, now, now, micros(d), now, now)
	if err != nil {
		return ledger.QuestionClaim{}, fmt.Errorf("ledger claim question %s of %s: %w", questionID, workflowID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ledger.QuestionClaim{}, fmt.Errorf("ledger claim question %s of %s: %w", questionID, workflowID, err)
	}
	c, err := s.questionClaim(ctx, workflowID, questionID)
	if err != nil {
		return ledger.QuestionClaim{}, err
	}
	if n == 0 {
		return c, claimedErr(c)
	}
	return c, nil
}

// ReleaseQuestion implements ledger.Store: a delete of by's claim or a
// lapsed one; a row left is another's live claim.
func (s *Store) ReleaseQuestion(ctx context.Context, workflowID, questionID, by string) (ledger.QuestionClaim, error) {
	if err := checkQuestionClaim("release question", workflowID, questionID, by); err != nil {
		return ledger.QuestionClaim{}, err
	}
	now := s.nowArg()
	if _, err := s.w.ExecContext(ctx, s.expand(`DELETE FROM question_claims WHERE workflow_id = ? AND question_id = ?
		AND (claimed_by = ? OR claimed_until <= {now})`), workflowID, questionID, by, now); err != nil {
		return ledger.QuestionClaim{}, fmt.Errorf("ledger release question %s of %s: %w", questionID, workflowID, err)
	}
	c, err := s.questionClaim(ctx, workflowID, questionID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return ledger.QuestionClaim{}, nil
	case err != nil:
		return ledger.QuestionClaim{}, err
	case c.By == by:
		// Renewed by by between the delete and the read: still by's.
		return ledger.QuestionClaim{}, fmt.Errorf("ledger release question %s of %s: %s claimed it again meanwhile; release it again", questionID, workflowID, by)
	}
	return c, claimedErr(c)
}

// QuestionClaims implements ledger.Store.
func (s *Store) QuestionClaims(ctx context.Context) ([]ledger.QuestionClaim, error) {
	rows, err := s.db.QueryContext(ctx, s.expand(`SELECT workflow_id, question_id, claimed_by, claimed_at, claimed_until
		FROM question_claims WHERE claimed_until > {now} ORDER BY claimed_at, workflow_id, question_id LIMIT ?`), s.nowArg(), ledger.MaxQuestionClaims)
	if err != nil {
		return nil, fmt.Errorf("ledger list question claims: %w", err)
	}
	defer rows.Close()
	var out []ledger.QuestionClaim
	for rows.Next() {
		var c ledger.QuestionClaim
		var since, until dbTime
		if err := rows.Scan(&c.WorkflowID, &c.QuestionID, &c.By, &since, &until); err != nil {
			return nil, fmt.Errorf("ledger list question claims: %w", err)
		}
		c.Since, c.Until = since.Time, until.Time
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger list question claims: %w", err)
	}
	return out, nil
}

// questionClaim reads the row of a question, lapsed or not; ErrNotFound
// when there is none.
func (s *Store) questionClaim(ctx context.Context, workflowID, questionID string) (ledger.QuestionClaim, error) {
	c := ledger.QuestionClaim{WorkflowID: workflowID, QuestionID: questionID}
	var since, until dbTime
	err := s.w.QueryRowContext(ctx, s.expand(`SELECT claimed_by, claimed_at, claimed_until FROM question_claims WHERE workflow_id = ? AND question_id = ?`),
		workflowID, questionID).Scan(&c.By, &since, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.QuestionClaim{}, ledger.ErrNotFound
	}
	if err != nil {
		return ledger.QuestionClaim{}, fmt.Errorf("ledger read the claim on question %s of %s: %w", questionID, workflowID, err)
	}
	c.Since, c.Until = since.Time, until.Time
	return c, nil
}

// purgeClaims forgets the claims that lapsed before cutoff.
func (s *Store) purgeClaims(ctx context.Context, cutoff time.Time) error {
	_, err := s.w.ExecContext(ctx, s.expand(`DELETE FROM question_claims WHERE claimed_until < {time}`), s.t(cutoff))
	return err
}

func claimedErr(c ledger.QuestionClaim) error {
	return fmt.Errorf("%w: %s holds question %s of %s since %s until %s; decide anyway (the override is recorded) or wait for its release",
		ledger.ErrClaimed, c.By, c.QuestionID, c.WorkflowID, c.Since.UTC().Format(time.RFC3339), c.Until.UTC().Format(time.RFC3339))
}

func checkQuestionClaim(op, workflowID, questionID, by string) error {
	for _, f := range []struct {
		name, v string
		limit   int
	}{{"WorkflowID", workflowID, ledger.MaxClaimIdent}, {"QuestionID", questionID, ledger.MaxClaimIdent}, {"By", by, ledger.MaxClaimBy}} {
		if f.v == "" || len(f.v) > f.limit {
			return fmt.Errorf("ledger %s: %s is %d bytes: give 1 to %d", op, f.name, len(f.v), f.limit)
		}
		if err := checkIdent(op, f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

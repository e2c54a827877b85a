package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// compensateSuffix names an operation's reversal key.
const compensateSuffix = ":compensate"

// RecordDecision implements ledger.Store. Free text (note, refusal, outcome)
// is redacted and the card passes through redact.JSON; NUL bytes and invalid
// UTF-8 are cleaned from every field, so an entry is never refused for its
// text. The zero AppliedAt means now.
func (s *Store) RecordDecision(ctx context.Context, d ledger.DecisionRecord) (int64, error) {
	if d.Key == "" || d.Kind == "" {
		return 0, fmt.Errorf("ledger record decision: set Key (the operation key) and Kind (approve, reject, resolve, ...)")
	}
	var id int64
	err := s.w.QueryRowContext(ctx, s.q.decision, cleanText(d.QuestionID), cleanText(d.Key), cleanText(d.WorkflowID),
		cleanText(d.Kind), cleanText(d.By), d.Verified, s.t(d.SentAt), s.t(d.AppliedAt), s.nowArg(), jsonArg(d.Card),
		note(d.Outcome), cleanText(d.ExternalID), note(d.Note), note(d.Refused), s.t(d.OpenedAt), cleanText(d.CardDigest)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("ledger record decision on %q: %w", d.Key, err)
	}
	return id, nil
}

// decisionKeys are the arguments of the decisions query for key: the key,
// its reversal ({key}:compensate) and the range holding every later round of
// its reversal ({key}:compensate:2, :3, ...: tool.ReversalRetryKey), from
// "{key}:compensate:" up to ":" + 1 (a range, not LIKE, so '_' and '%' in
// keys mean themselves and the index is used).
func decisionKeys(key string) []any {
	round := key + compensateSuffix + ":"
	return []any{key, key + compensateSuffix, round, key + compensateSuffix + ";"}
}

// Decisions implements ledger.Store.
func (s *Store) Decisions(ctx context.Context, key string) ([]ledger.DecisionRecord, error) {
	key = cleanText(key)
	ds, err := s.decisionRows(ctx, s.q.decisions, decisionKeys(key)...)
	if err != nil {
		return nil, fmt.Errorf("ledger decisions of %q: %w", key, err)
	}
	return ds, nil
}

// DecisionLog implements ledger.Store.
func (s *Store) DecisionLog(ctx context.Context, q ledger.DecisionQuery) ([]ledger.DecisionRecord, error) {
	if q.Limit < 0 || q.Limit > ledger.MaxDecisionLog {
		return nil, fmt.Errorf("ledger decision log: limit %d: give 1 to %d (0 for %d)", q.Limit, ledger.MaxDecisionLog, ledger.MaxDecisionLog)
	}
	if q.Limit == 0 {
		q.Limit = ledger.MaxDecisionLog
	}
	since, until := q.Since, q.Until
	if since.IsZero() {
		since = time.Unix(0, 0)
	}
	if until.IsZero() {
		until = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	by, kind := cleanText(q.By), cleanText(q.Kind)
	ds, err := s.decisionRows(ctx, s.q.decisionLog, s.d.Time(since.UTC()), s.d.Time(until.UTC()), by, by, kind, kind, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("ledger decision log: %w", err)
	}
	return ds, nil
}

// decisionRows runs query, a select of the decisions' columns.
func (s *Store) decisionRows(ctx context.Context, query string, args ...any) ([]ledger.DecisionRecord, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ds []ledger.DecisionRecord
	for rows.Next() {
		var (
			d             ledger.DecisionRecord
			sent, applied dbTime
			opened        dbTime
			card          sql.NullString
		)
		if err := rows.Scan(&d.ID, &d.QuestionID, &d.Key, &d.WorkflowID, &d.Kind, &d.By, &d.Verified, &sent, &applied,
			&card, &d.Outcome, &d.ExternalID, &d.Note, &d.Refused, &opened, &d.CardDigest); err != nil {
			return nil, err
		}
		d.SentAt, d.AppliedAt, d.OpenedAt = sent.Time, applied.Time, opened.Time
		if card.Valid {
			d.Card = []byte(card.String)
		}
		ds = append(ds, d)
	}
	return ds, rows.Err()
}

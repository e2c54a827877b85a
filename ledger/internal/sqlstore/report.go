package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"

	"github.com/agentsaga/agentsaga/tool"
)

// Report implements ledger.Store. It only reads: the per-tool figures are
// one aggregate query; unknown outcomes, decisions and uncertain amounts are
// read row by row and summed here, so both databases compute them alike.
func (s *Store) Report(ctx context.Context, since time.Time) (ledger.Report, error) {
	rep := ledger.Report{Since: since, At: s.now().UTC()}
	if err := s.reportTools(ctx, &rep); err != nil {
		return rep, fmt.Errorf("ledger report: operations by tool: %w", err)
	}
	if err := s.reportUnknown(ctx, &rep); err != nil {
		return rep, fmt.Errorf("ledger report: unknown outcomes: %w", err)
	}
	if err := s.reportHumans(ctx, &rep); err != nil {
		return rep, fmt.Errorf("ledger report: decisions: %w", err)
	}
	queue, err := s.Exceptions(ctx, ledger.ExceptionFilter{})
	if err != nil {
		return rep, fmt.Errorf("ledger report: %w", err)
	}
	rep.Queue = ledger.SummarizeQueue(queue, rep.At)
	for _, op := range queue {
		if !uncertain(op) {
			continue
		}
		rep.Uncertain.Operations++
		if minor, cur, ok := ledger.AmountIn(op.Summary); ok {
			rep.Uncertain.Amounts = ledger.AddAmount(rep.Uncertain.Amounts, minor, cur)
		} else {
			rep.Uncertain.WithoutAmount++
		}
	}
	if rep.Uncertain.Amounts == nil {
		rep.Uncertain.Amounts = []ledger.Amount{}
	}
	return rep, nil
}

// uncertain reports whether nobody knows now whether op's effect happened:
// unknown, a stuck executor, or waiting for a person after being unknown.
func uncertain(op ledger.Operation) bool {
	switch op.Status {
	case ledger.Unknown, ledger.InProgress:
		return true
	case ledger.NeedsHuman:
		return !op.UnknownAt.IsZero() && op.SettledAt.IsZero()
	}
	return false
}

// since is the window's start as a parameter; the zero time reads all.
func (s *Store) since(rep ledger.Report) any {
	if rep.Since.IsZero() {
		return s.d.Time(time.Unix(0, 0).UTC())
	}
	return s.t(rep.Since)
}

func (s *Store) reportTools(ctx context.Context, rep *ledger.Report) error {
	rows, err := s.db.QueryContext(ctx, s.expand(`SELECT action_type, COUNT(*),
		SUM(CASE WHEN status = 'succeeded' THEN 1 ELSE 0 END),
		SUM(CASE WHEN status = 'succeeded' AND attempt_count = 1 AND unknown_at IS NULL THEN 1 ELSE 0 END),
		SUM(replay_count),
		SUM(CASE WHEN status = 'failed_final' THEN 1 ELSE 0 END),
		SUM(CASE WHEN status = 'compensated' THEN 1 ELSE 0 END),
		SUM(CASE WHEN unknown_at IS NOT NULL THEN 1 ELSE 0 END),
		SUM(CASE WHEN hold_reason <> '' THEN 1 ELSE 0 END),
		SUM(CASE WHEN hold_reason <> '' AND attempt_count > 0 THEN 1 ELSE 0 END)
		FROM operations WHERE created_at >= {time} GROUP BY action_type ORDER BY action_type`), s.since(*rep))
	if err != nil {
		return err
	}
	defer rows.Close()
	rep.Tools = []ledger.ToolFigures{}
	for rows.Next() {
		var f ledger.ToolFigures
		var held, overridden int
		if err := rows.Scan(&f.Tool, &f.Operations, &f.Succeeded, &f.FirstAttempt, &f.Replays, &f.Failed, &f.Compensated,
			&f.Unknown, &held, &overridden); err != nil {
			return err
		}
		rep.Tools = append(rep.Tools, f)
		t := &rep.Totals
		t.Operations += f.Operations
		t.Succeeded += f.Succeeded
		t.FirstAttempt += f.FirstAttempt
		t.Replays += f.Replays
		t.Failed += f.Failed
		t.Compensated += f.Compensated
		t.Unknown += f.Unknown
		rep.Held.Held += held
		rep.Held.RunAfterOverride += overridden
	}
	rep.Held.Stopped = rep.Held.Held - rep.Held.RunAfterOverride
	return rows.Err()
}

func (s *Store) reportUnknown(ctx context.Context, rep *ledger.Report) error {
	rows, err := s.db.QueryContext(ctx, s.expand(`SELECT unknown_at, settled_at, resolved_at FROM operations
		WHERE created_at >= {time} AND unknown_at IS NOT NULL`), s.since(*rep))
	if err != nil {
		return err
	}
	defer rows.Close()
	u := &rep.Unknown
	var all, byReconcile, byHuman time.Duration
	for rows.Next() {
		var unknownAt, settledAt, resolvedAt dbTime
		if err := rows.Scan(&unknownAt, &settledAt, &resolvedAt); err != nil {
			return err
		}
		u.Total++
		if settledAt.Time.IsZero() {
			u.Open++
			continue
		}
		d := max(settledAt.Time.Sub(unknownAt.Time), 0)
		all += d
		if !resolvedAt.Time.IsZero() && resolvedAt.Time.Equal(settledAt.Time) {
			u.ByHuman++
			byHuman += d
		} else {
			u.ByReconcile++
			byReconcile += d
		}
	}
	u.MeanSettleSeconds = mean(all, u.ByHuman+u.ByReconcile)
	u.MeanReconcileSeconds = mean(byReconcile, u.ByReconcile)
	u.MeanHumanSettleSeconds = mean(byHuman, u.ByHuman)
	return rows.Err()
}

func mean(d time.Duration, n int) float64 {
	if n == 0 {
		return 0
	}
	return d.Seconds() / float64(n)
}

// Question kinds a decision answers, as Report's Why counts them.
const (
	whyApproval = "approval"
	whyHeld     = "held"
	whyOutcome  = "outcome"
	whyReversal = "reversal"
)

func (s *Store) reportHumans(ctx context.Context, rep *ledger.Report) error {
	rows, err := s.db.QueryContext(ctx, s.expand(`SELECT d.operation_key, d.kind, d.question_id, d.refused, d.applied_at,
		d.opened_at, o.operation_key, o.unknown_at, o.created_at, o.hold_reason
		FROM decisions d LEFT JOIN operations o ON o.operation_key = d.operation_key
		WHERE d.applied_at >= {time} ORDER BY d.id`), s.since(*rep))
	if err != nil {
		return err
	}
	defer rows.Close()
	h := &rep.Humans
	h.ByKind, h.Why = map[string]int{}, map[string]int{}
	decided := map[string]bool{}
	rowless := 0
	var wait time.Duration
	for rows.Next() {
		var (
			key, kind, question, refused        string
			rowKey, holdReason                  *string
			applied, opened, unknownAt, created dbTime
		)
		if err := rows.Scan(&key, &kind, &question, &refused, &applied, &opened, &rowKey, &unknownAt, &created, &holdReason); err != nil {
			return err
		}
		switch {
		case refused != "" || kind == "refused":
			h.Refused++
			continue
		case kind == "expire":
			h.Expired++
			continue
		}
		h.Decisions++
		h.ByKind[kind]++
		held := holdReason != nil && *holdReason != ""
		why := whyOf(key, kind, question, held)
		h.Why[why]++
		if !decided[key] {
			decided[key] = true
			if rowKey == nil {
				rowless++
			}
		}
		from := opened.Time
		switch {
		case !from.IsZero():
		case why == whyOutcome && !unknownAt.Time.IsZero():
			from = unknownAt.Time
		case held:
			from = created.Time
		}
		if from.IsZero() {
			h.Unmeasured++
			continue
		}
		h.Measured++
		wait += max(applied.Time.Sub(from), 0)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	h.Operations = len(decided)
	h.Share = ledger.Share(h.Operations, rep.Totals.Operations+rowless)
	h.WaitMinutes = wait.Minutes()
	return nil
}

// whyOf names the question a decision answered: from the question id the
// workflow writes (q{n}-step{n}-{kind}) when it says, else from the
// decision and the row.
func whyOf(key, kind, question string, held bool) string {
	if tool.IsReversalKey(key) {
		return whyReversal
	}
	if held {
		return whyHeld
	}
	if i := strings.LastIndexByte(question, '-'); i >= 0 {
		switch q := question[i+1:]; q {
		case whyApproval, whyOutcome, whyReversal:
			return q
		}
	}
	if kind == "resolve" {
		return whyOutcome
	}
	return whyApproval
}

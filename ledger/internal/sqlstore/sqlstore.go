// Package sqlstore is the one implementation of ledger.Store behind both SQL
// drivers. The drivers differ only in what a Dialect describes (placeholders,
// time encoding, how the guard checks are serialized); every decision is made
// here, once, so both drivers give the same verdicts.
package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/redact"
)

// Dialect is what differs between SQL databases.
type Dialect struct {
	// Name names the database in errors ("sqlite", "postgres").
	Name string
	// Numbered placeholders ($1, $2, ...) instead of "?".
	Numbered bool
	// Time encodes a time parameter; Scan of a time column must accept what
	// it stores.
	Time func(time.Time) any
	// Lock serializes the guard and duplicate checks of concurrent claims
	// inside tx, one lock per name. Nil when every transaction is already
	// serialized (SQLite's BEGIN IMMEDIATE).
	Lock func(ctx context.Context, tx *sql.Tx, names []string) error
	// IsUniqueViolation reports a unique constraint violation.
	IsUniqueViolation func(error) bool
}

// Store implements ledger.Store on a *sql.DB.
type Store struct {
	db  *sql.DB
	d   Dialect
	now func() time.Time
	q   queries
}

// New returns a Store on db, whose schema must be migrated. A nil clock
// means time.Now.
func New(db *sql.DB, d Dialect, clock func() time.Time) *Store {
	if clock == nil {
		clock = time.Now
	}
	s := &Store{db: db, d: d, now: clock}
	s.q = newQueries(s.rebind)
	return s
}

// DB returns the underlying database.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// clock returns now in UTC at the microsecond precision both databases keep.
func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

func (s *Store) rebind(q string) string {
	if !s.d.Numbered {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// t encodes a time parameter, NULL for the zero time.
func (s *Store) t(v time.Time) any {
	if v.IsZero() {
		return nil
	}
	return s.d.Time(v)
}

const columns = `operation_key, action_type, request_hash, status, attempt_count, version, external_id,
	result_json, error_code, lease_owner, lease_until, workflow_id, run_id, request_id, guard_scope,
	hold_reason, resolved_by, resolved_at, resolve_note, created_at, updated_at, completed_at`

// active is the SQL condition of a row that still counts for guards.
const active = `status NOT IN ('failed_final', 'compensated')`

// held is the SQL condition of a row held for approval: it waits for a human
// and never reached a provider.
const held = `(status = 'needs_human' AND attempt_count = 0 AND hold_reason <> '')`

type queries struct {
	get, exists, insert, claim, complete, resolve, exceptions, purge, guard, duplicate string
}

func newQueries(rebind func(string) string) queries {
	return queries{
		get:    rebind(`SELECT ` + columns + ` FROM operations WHERE operation_key = ?`),
		exists: rebind(`SELECT 1 FROM operations WHERE operation_key = ?`),
		insert: rebind(`INSERT INTO operations (operation_key, action_type, request_hash, status, attempt_count,
			lease_owner, lease_until, workflow_id, run_id, request_id, guard_scope, guard_key, entity, args_hash,
			hold_reason, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (operation_key) DO NOTHING`),
		// claim is the conditional update: it takes the lease only if the
		// row is still the version the verdict was decided on.
		claim: rebind(`UPDATE operations SET status = 'in_progress', attempt_count = attempt_count + ?,
			version = version + 1, lease_owner = ?, lease_until = ?, workflow_id = ?, run_id = ?, request_id = ?,
			updated_at = ?
			WHERE operation_key = ? AND version = ? RETURNING ` + columns),
		complete: rebind(`UPDATE operations SET status = ?,
			external_id = CASE WHEN ? = '' THEN external_id ELSE ? END,
			result_json = COALESCE(?, result_json), error_code = ?, lease_owner = '', lease_until = NULL,
			version = version + 1, updated_at = ?, completed_at = ?
			WHERE operation_key = ? AND status = 'in_progress' AND lease_owner = ? RETURNING ` + columns),
		resolve: rebind(`UPDATE operations SET status = ?,
			external_id = CASE WHEN ? = '' THEN external_id ELSE ? END,
			resolved_by = ?, resolved_at = ?, resolve_note = ?, lease_owner = '', lease_until = NULL,
			version = version + 1, updated_at = ?, completed_at = ?
			WHERE operation_key = ? RETURNING ` + columns),
		exceptions: rebind(`SELECT ` + columns + ` FROM operations
			WHERE status IN ('needs_human', 'compensation_failed') OR (status = 'unknown' AND updated_at <= ?)
			ORDER BY created_at, operation_key`),
		purge: rebind(`DELETE FROM operations
			WHERE status IN ('succeeded', 'failed_final', 'compensated')
			AND completed_at IS NOT NULL AND completed_at < ?`),
		guard: rebind(`SELECT operation_key, status FROM operations
			WHERE guard_scope = ? AND operation_key <> ? AND ` + active + ` AND NOT ` + held + `
			ORDER BY created_at, operation_key LIMIT 1`),
		duplicate: rebind(`SELECT operation_key, created_at FROM operations
			WHERE action_type = ? AND entity = ? AND args_hash = ? AND operation_key <> ? AND created_at >= ?
			AND ` + active + ` AND NOT ` + held + `
			ORDER BY created_at, operation_key LIMIT 1`),
	}
}

// maxRounds bounds how often a claim re-reads a row that changed under it.
const maxRounds = 16

// Claim implements ledger.Store.
func (s *Store) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, error) {
	if err := checkClaim(req); err != nil {
		return ledger.Claim{}, err
	}
	checks := req.GuardScope != "" || (req.DuplicateWindow > 0 && !(req.PermitID != ""))
	for range maxRounds {
		now := s.clock()
		if !checks {
			// Insert if absent: a fresh key is claimed by the insert itself.
			c, done, err := s.insertPlain(ctx, req, now)
			if err != nil || done {
				return c, err
			}
		} else {
			c, done, err := s.insertChecked(ctx, req, now)
			if err != nil || done {
				return c, err
			}
		}
		// The row exists: decide on it, then take the lease with a
		// conditional update.
		op, version, err := s.get(ctx, s.db, req.Key)
		if errors.Is(err, ledger.ErrNotFound) {
			continue // purged or never inserted (a refused guard): try again
		}
		if err != nil {
			return ledger.Claim{}, err
		}
		c, done, err := s.decide(ctx, req, op, version, now)
		if err != nil || done {
			return c, err
		}
	}
	return ledger.Claim{}, fmt.Errorf("claim %q: the row kept changing under %d attempts; retry the claim later", req.Key, maxRounds)
}

func checkClaim(req ledger.ClaimRequest) error {
	var missing []string
	if req.Key == "" {
		missing = append(missing, "Key (the operation key)")
	}
	if req.ActionType == "" {
		missing = append(missing, "ActionType (the tool name)")
	}
	if req.RequestHash == "" {
		missing = append(missing, "RequestHash (the request fingerprint)")
	}
	if req.Executor == "" {
		missing = append(missing, "Executor (who takes the lease)")
	}
	if req.Lease <= 0 {
		missing = append(missing, "Lease (a positive duration, the activity's timeout)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("ledger claim %q: set %s", req.Key, strings.Join(missing, ", "))
	}
	return nil
}

// fresh is the row a claim inserts.
type fresh struct {
	status     ledger.Status
	attempts   int
	guardKey   any // the scope while this row holds it, else NULL
	holdReason string
}

func (s *Store) insertRow(ctx context.Context, x execer, req ledger.ClaimRequest, now time.Time, f fresh) (bool, error) {
	var owner string
	var until time.Time
	if f.status == ledger.InProgress {
		owner, until = req.Executor, leaseUntil(now, req.Lease)
	}
	res, err := x.ExecContext(ctx, s.q.insert, req.Key, req.ActionType, req.RequestHash, string(f.status), f.attempts,
		owner, s.t(until), req.WorkflowID, req.RunID, req.RequestID, req.GuardScope, f.guardKey, req.Entity,
		argsHash(req.NormalizedArgs), f.holdReason, s.d.Time(now), s.d.Time(now))
	if err != nil {
		if s.d.IsUniqueViolation(err) {
			return false, nil // another row took the guard scope meanwhile: decide again
		}
		return false, fmt.Errorf("ledger claim %q: insert into %s: %w", req.Key, s.d.Name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("ledger claim %q: %w", req.Key, err)
	}
	return n == 1, nil
}

func leaseUntil(now time.Time, lease time.Duration) time.Time {
	return now.Add(lease).Truncate(time.Microsecond)
}

func argsHash(args string) string {
	if args == "" {
		return ""
	}
	h := sha256.Sum256([]byte(args))
	return hex.EncodeToString(h[:])
}

// insertPlain claims a fresh key with one INSERT; done is false when the key
// exists.
func (s *Store) insertPlain(ctx context.Context, req ledger.ClaimRequest, now time.Time) (ledger.Claim, bool, error) {
	ok, err := s.insertRow(ctx, s.db, req, now, fresh{status: ledger.InProgress, attempts: 1})
	if err != nil || !ok {
		return ledger.Claim{}, false, err
	}
	return ledger.Claim{Verdict: ledger.Execute, Operation: freshOperation(req, now)}, true, nil
}

func freshOperation(req ledger.ClaimRequest, now time.Time) ledger.Operation {
	return ledger.Operation{
		Key: req.Key, ActionType: req.ActionType, RequestHash: req.RequestHash, Status: ledger.InProgress,
		AttemptCount: 1, LeaseOwner: req.Executor, LeaseUntil: leaseUntil(now, req.Lease),
		WorkflowID: req.WorkflowID, RunID: req.RunID, RequestID: req.RequestID, GuardScope: req.GuardScope,
		CreatedAt: now, UpdatedAt: now,
	}
}

// insertChecked inserts a fresh key after the guard and duplicate checks, in
// one short transaction serialized per guard scope and per entity. done is
// false when the key exists.
func (s *Store) insertChecked(ctx context.Context, req ledger.ClaimRequest, now time.Time) (c ledger.Claim, done bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return c, false, fmt.Errorf("ledger claim %q: begin: %w", req.Key, err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	if s.d.Lock != nil {
		var names []string
		if req.GuardScope != "" {
			names = append(names, "guard|"+req.GuardScope)
		}
		if req.DuplicateWindow > 0 {
			names = append(names, "duplicate|"+req.ActionType+"|"+req.Entity)
		}
		if err := s.d.Lock(ctx, tx, names); err != nil {
			return c, false, fmt.Errorf("ledger claim %q: lock: %w", req.Key, err)
		}
	}
	var one int
	switch err := tx.QueryRowContext(ctx, s.q.exists, req.Key).Scan(&one); {
	case err == nil:
		return c, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return c, false, fmt.Errorf("ledger claim %q: %w", req.Key, err)
	}

	row := fresh{status: ledger.InProgress, attempts: 1}
	if req.GuardScope != "" {
		var other, status string
		switch err := tx.QueryRowContext(ctx, s.q.guard, req.GuardScope, req.Key).Scan(&other, &status); {
		case errors.Is(err, sql.ErrNoRows):
			row.guardKey = req.GuardScope
		case err != nil:
			return c, false, fmt.Errorf("ledger claim %q: guard check: %w", req.Key, err)
		case (req.PermitID != ""):
			// A human let this one through: it runs beside the holder
			// without taking the scope.
		case req.GuardHold:
			row = fresh{status: ledger.NeedsHuman, holdReason: fmt.Sprintf(
				"guard %q is held by operation %q (%s): approve to run this one as well, or resolve it as failed_final",
				req.GuardScope, other, status)}
		default:
			return ledger.Claim{Verdict: ledger.GuardRefused, Reason: fmt.Sprintf(
				"guard %q is held by operation %q (%s): only one active effect per scope; this call was not run",
				req.GuardScope, other, status)}, true, nil
		}
	}
	if row.status == ledger.InProgress && req.DuplicateWindow > 0 && !(req.PermitID != "") {
		var other string
		var created dbTime
		switch err := tx.QueryRowContext(ctx, s.q.duplicate, req.ActionType, req.Entity, argsHash(req.NormalizedArgs),
			req.Key, s.d.Time(now.Add(-req.DuplicateWindow))).Scan(&other, &created); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return c, false, fmt.Errorf("ledger claim %q: duplicate check: %w", req.Key, err)
		default:
			row = fresh{status: ledger.NeedsHuman, holdReason: fmt.Sprintf(
				"suspected duplicate of operation %q: same %s on entity %q with equal arguments %s earlier (window %s): approve to run it anyway",
				other, req.ActionType, req.Entity, now.Sub(created.Time), req.DuplicateWindow)}
		}
	}
	ok, err := s.insertRow(ctx, tx, req, now, row)
	if err != nil || !ok {
		return c, false, err
	}
	if err := tx.Commit(); err != nil {
		if s.d.IsUniqueViolation(err) {
			return c, false, nil
		}
		return c, false, fmt.Errorf("ledger claim %q: commit: %w", req.Key, err)
	}
	if row.status == ledger.NeedsHuman {
		op, _, err := s.get(ctx, s.db, req.Key)
		if err != nil {
			return c, true, err
		}
		return ledger.Claim{Verdict: ledger.Held, Operation: op, Reason: row.holdReason}, true, nil
	}
	return ledger.Claim{Verdict: ledger.Execute, Operation: freshOperation(req, now)}, true, nil
}

// decide returns the verdict on an existing row, taking the lease with a
// conditional update when the verdict gives it. done is false when the row
// changed meanwhile and the claim must read it again.
func (s *Store) decide(ctx context.Context, req ledger.ClaimRequest, op ledger.Operation, version int64, now time.Time) (ledger.Claim, bool, error) {
	if op.RequestHash != req.RequestHash {
		return ledger.Claim{Verdict: ledger.Conflict, Operation: op, Reason: fmt.Sprintf(
			"operation %q was claimed with request hash %s, this request has %s: the same key never runs other arguments; plan a new step for them",
			op.Key, op.RequestHash, req.RequestHash)}, true, nil
	}
	take := func(v ledger.Verdict, attempts int) (ledger.Claim, bool, error) {
		got, ok, err := s.take(ctx, req, op, version, now, attempts)
		if err != nil || !ok {
			return ledger.Claim{}, false, err
		}
		return ledger.Claim{Verdict: v, Operation: got}, true, nil
	}
	switch op.Status {
	case ledger.Succeeded:
		return ledger.Claim{Verdict: ledger.Replay, Operation: op}, true, nil
	case ledger.Pending:
		return take(ledger.Execute, 1)
	case ledger.Unknown:
		return take(ledger.ReconcileFirst, 1)
	case ledger.InProgress:
		switch {
		case op.LeaseOwner == req.Executor:
			// The same executor again: it may have called already.
			return take(ledger.ReconcileFirst, 0)
		case now.Before(op.LeaseUntil):
			return ledger.Claim{Verdict: ledger.InFlight, Operation: op, Reason: fmt.Sprintf(
				"executor %q holds the lease until %s: retry later", op.LeaseOwner, op.LeaseUntil.Format(time.RFC3339Nano))}, true, nil
		default:
			return take(ledger.ReconcileFirst, 1)
		}
	case ledger.NeedsHuman:
		if op.AttemptCount == 0 && op.HoldReason != "" {
			if req.PermitID != "" {
				return take(ledger.Execute, 1)
			}
			return ledger.Claim{Verdict: ledger.Held, Operation: op, Reason: op.HoldReason}, true, nil
		}
	}
	return ledger.Claim{Verdict: ledger.Final, Operation: op, Reason: fmt.Sprintf(
		"operation %q is %s: it is not run again; resolve it to change that", op.Key, op.Status)}, true, nil
}

// take is the conditional update that gives req the lease if the row is
// still at version.
func (s *Store) take(ctx context.Context, req ledger.ClaimRequest, op ledger.Operation, version int64, now time.Time, attempts int) (ledger.Operation, bool, error) {
	workflow, run, request := op.WorkflowID, op.RunID, op.RequestID
	if req.WorkflowID != "" {
		workflow, run, request = req.WorkflowID, req.RunID, req.RequestID
	}
	got, _, err := s.scan(s.db.QueryRowContext(ctx, s.q.claim, attempts, req.Executor, s.d.Time(leaseUntil(now, req.Lease)),
		workflow, run, request, s.d.Time(now), req.Key, version))
	if errors.Is(err, ledger.ErrNotFound) {
		return got, false, nil
	}
	if err != nil {
		return got, false, fmt.Errorf("ledger claim %q: take lease: %w", req.Key, err)
	}
	return got, true, nil
}

// Complete implements ledger.Store.
func (s *Store) Complete(ctx context.Context, c ledger.Completion) (ledger.Operation, error) {
	switch {
	case c.Key == "" || c.Executor == "":
		return ledger.Operation{}, fmt.Errorf("ledger complete %q: set Key and Executor (the one that holds the lease)", c.Key)
	case !validStatus(c.Status) || c.Status == ledger.InProgress:
		return ledger.Operation{}, fmt.Errorf("ledger complete %q: status %q: record an outcome (pending, unknown, succeeded, failed_final, needs_human, ...), not in_progress", c.Key, c.Status)
	}
	now := s.clock()
	var completed time.Time
	if c.Status.Final() {
		completed = now
	}
	op, _, err := s.scan(s.db.QueryRowContext(ctx, s.q.complete, string(c.Status), c.ExternalID, c.ExternalID,
		jsonArg(c.Result), redact.String(c.ErrorCode), s.d.Time(now), s.t(completed), c.Key, c.Executor))
	if errors.Is(err, ledger.ErrNotFound) {
		cur, _, gerr := s.get(ctx, s.db, c.Key)
		if gerr != nil {
			return ledger.Operation{}, fmt.Errorf("ledger complete %q: %w", c.Key, gerr)
		}
		return cur, fmt.Errorf("ledger complete %q by %q (status %s, lease owner %q): %w", c.Key, c.Executor, cur.Status, cur.LeaseOwner, ledger.ErrLeaseLost)
	}
	if err != nil {
		return ledger.Operation{}, fmt.Errorf("ledger complete %q: %w", c.Key, err)
	}
	return op, nil
}

// jsonArg is a redacted JSON parameter, NULL when empty.
func jsonArg(raw []byte) any {
	r := redact.JSON(raw)
	if r == nil {
		return nil
	}
	return string(r)
}

func validStatus(st ledger.Status) bool {
	switch st {
	case ledger.Pending, ledger.InProgress, ledger.Succeeded, ledger.FailedFinal, ledger.Unknown, ledger.NeedsHuman,
		ledger.Compensating, ledger.Compensated, ledger.CompensationFailed:
		return true
	}
	return false
}

// Resolve implements ledger.Store.
func (s *Store) Resolve(ctx context.Context, r ledger.Resolution) (ledger.Operation, error) {
	switch {
	case r.Key == "":
		return ledger.Operation{}, fmt.Errorf("ledger resolve: set Key")
	case r.By == "":
		return ledger.Operation{}, fmt.Errorf("ledger resolve %q: set By (who decided)", r.Key)
	case !validStatus(r.Status) || r.Status == ledger.InProgress:
		return ledger.Operation{}, fmt.Errorf("ledger resolve %q: status %q: decide an outcome (succeeded, failed_final, pending to run it again, ...), not in_progress", r.Key, r.Status)
	}
	now := s.clock()
	var completed time.Time
	if r.Status.Final() {
		completed = now
	}
	op, _, err := s.scan(s.db.QueryRowContext(ctx, s.q.resolve, string(r.Status), r.ExternalID, r.ExternalID,
		r.By, s.d.Time(now), redact.String(r.Note), s.d.Time(now), s.t(completed), r.Key))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return op, fmt.Errorf("ledger resolve %q: %w", r.Key, err)
	case err != nil && s.d.IsUniqueViolation(err):
		return op, fmt.Errorf("ledger resolve %q as %s: its guard scope is held by another active operation: resolve that one first: %w", r.Key, r.Status, err)
	case err != nil:
		return op, fmt.Errorf("ledger resolve %q: %w", r.Key, err)
	}
	return op, nil
}

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, key string) (ledger.Operation, error) {
	op, _, err := s.get(ctx, s.db, key)
	if err != nil {
		return op, fmt.Errorf("ledger get %q: %w", key, err)
	}
	return op, nil
}

// Exceptions implements ledger.Store.
func (s *Store) Exceptions(ctx context.Context, f ledger.ExceptionFilter) ([]ledger.Operation, error) {
	rows, err := s.db.QueryContext(ctx, s.q.exceptions, s.d.Time(s.clock().Add(-f.UnknownOlderThan)))
	if err != nil {
		return nil, fmt.Errorf("ledger exceptions: %w", err)
	}
	defer rows.Close()
	var ops []ledger.Operation
	for rows.Next() {
		op, _, err := s.scan(rows)
		if err != nil {
			return nil, fmt.Errorf("ledger exceptions: %w", err)
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger exceptions: %w", err)
	}
	return ops, nil
}

// Purge implements ledger.Store.
func (s *Store) Purge(ctx context.Context, completedBefore time.Time) (int, error) {
	if completedBefore.IsZero() {
		return 0, fmt.Errorf("ledger purge: set a cutoff (now minus the retention window)")
	}
	res, err := s.db.ExecContext(ctx, s.q.purge, s.d.Time(completedBefore.UTC()))
	if err != nil {
		return 0, fmt.Errorf("ledger purge: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("ledger purge: %w", err)
	}
	return int(n), nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) get(ctx context.Context, q queryer, key string) (ledger.Operation, int64, error) {
	return s.scan(q.QueryRowContext(ctx, s.q.get, key))
}

type scanner interface{ Scan(dest ...any) error }

// scan reads one row of columns; sql.ErrNoRows becomes ledger.ErrNotFound.
func (s *Store) scan(r scanner) (ledger.Operation, int64, error) {
	var (
		op                                     ledger.Operation
		status                                 string
		version                                int64
		result                                 sql.NullString
		leaseUntil, resolved, created, updated dbTime
		completed                              dbTime
	)
	err := r.Scan(&op.Key, &op.ActionType, &op.RequestHash, &status, &op.AttemptCount, &version, &op.ExternalID,
		&result, &op.ErrorCode, &op.LeaseOwner, &leaseUntil, &op.WorkflowID, &op.RunID, &op.RequestID, &op.GuardScope,
		&op.HoldReason, &op.ResolvedBy, &resolved, &op.ResolveNote, &created, &updated, &completed)
	if errors.Is(err, sql.ErrNoRows) {
		return op, 0, ledger.ErrNotFound
	}
	if err != nil {
		return op, 0, err
	}
	op.Status = ledger.Status(status)
	if result.Valid {
		op.Result = []byte(result.String)
	}
	op.LeaseUntil, op.ResolvedAt, op.CreatedAt, op.UpdatedAt, op.CompletedAt =
		leaseUntil.Time, resolved.Time, created.Time, updated.Time, completed.Time
	return op, version, nil
}

// dbTime scans a time stored as Unix microseconds (SQLite) or a timestamp
// (PostgreSQL); NULL is the zero time.
type dbTime struct{ Time time.Time }

// Scan implements sql.Scanner.
func (t *dbTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		t.Time = time.Time{}
	case int64:
		t.Time = time.UnixMicro(x).UTC()
	case time.Time:
		t.Time = x.UTC()
	default:
		return fmt.Errorf("time column holds %T, want Unix microseconds or a timestamp", v)
	}
	return nil
}

// errTODO marks ledger methods being written (replaced before this lands).
var errTODO = errors.New("ledger: not implemented yet")

// Transition implements ledger.Store.
func (s *Store) Transition(ctx context.Context, t ledger.Transition) (ledger.Operation, error) {
	return ledger.Operation{}, errTODO
}

// GrantPermit implements ledger.Store.
func (s *Store) GrantPermit(ctx context.Context, p ledger.Permit) error { return errTODO }

// InScope implements ledger.Store.
func (s *Store) InScope(ctx context.Context, scope string, limit int) ([]ledger.Operation, error) {
	return nil, errTODO
}

// RecordDecision implements ledger.Store.
func (s *Store) RecordDecision(ctx context.Context, d ledger.DecisionRecord) (int64, error) {
	return 0, errTODO
}

// Decisions implements ledger.Store.
func (s *Store) Decisions(ctx context.Context, key string) ([]ledger.DecisionRecord, error) {
	return nil, errTODO
}

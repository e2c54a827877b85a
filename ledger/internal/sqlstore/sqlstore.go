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
	// TimeParam is the SQL of one time parameter ("?", or a cast where the
	// database cannot infer the type).
	TimeParam string
	// Now is the SQL of the current time with one parameter: the store's Go
	// clock, or NULL for the database's own clock. NowPlus is the same plus
	// a second parameter in microseconds. Without DBClock the parameter is
	// never NULL, so Now may simply be "?".
	Now, NowPlus string
	// DBClock makes the database's clock decide every time the store
	// records or compares (lease expiry above all): a worker whose clock
	// runs ahead must not take over a live lease. A driver turns it off
	// only when a test injects a clock.
	DBClock bool
	// Lock serializes the guard and duplicate checks of concurrent claims
	// inside tx, one lock per name. Nil when every transaction is already
	// serialized (SQLite's BEGIN IMMEDIATE).
	Lock func(ctx context.Context, tx *sql.Tx, names []string) error
	// IsUniqueViolation reports a unique constraint violation.
	IsUniqueViolation func(error) bool
	// ReadBack makes the writes of a claim and a completion read their row
	// back (see writeRow) instead of returning it. SQLite answers RETURNING
	// from an ephemeral table with a page cache of its own, which the
	// pure-Go allocator maps and unmaps on every statement: an munmap stalls
	// every core running the process (a TLB shootdown), several times what
	// the read costs.
	ReadBack bool
}

// Conns are the connection pools of a Store. Write runs every statement that
// writes, Read every other; they may be one pool. A database that takes one
// writer at a time (SQLite) gets a Write pool of one connection, so the
// process's writers queue in Go and each runs the moment the one before it
// commits, instead of colliding on the database's lock and sleeping in its
// busy handler (1, 2, 5, 10 ms and on), while reads run beside them.
type Conns struct {
	Read, Write *sql.DB
}

// Store implements ledger.Store on a *sql.DB.
type Store struct {
	db  *sql.DB // reads
	w   *sql.DB // writes: db itself, or a pool of its own
	d   Dialect
	now func() time.Time
	q   queries
	// The statements of every claim, prepared once: SQLite (modernc)
	// would otherwise compile each on every call. insert, claim and
	// complete are without RETURNING under d.ReadBack, and readStmt reads
	// their row back on the writer.
	insertStmt, getNowStmt, claimStmt, completeStmt, readStmt *sql.Stmt
}

// New returns a Store on the pools c (c.Write nil means c.Read), whose schema
// must be migrated; Close closes both. clock is the store's Go clock (nil
// means time.Now); it is the time of every record unless d.DBClock is set,
// when the database's clock is used instead.
func New(ctx context.Context, c Conns, d Dialect, clock func() time.Time) (*Store, error) {
	if clock == nil {
		clock = time.Now
	}
	if c.Write == nil {
		c.Write = c.Read
	}
	s := &Store{db: c.Read, w: c.Write, d: d, now: clock}
	s.q = newQueries(s.expand)
	type prepared struct {
		st **sql.Stmt
		db *sql.DB
		q  string
	}
	ws := StepWrites(s)
	stmts := []prepared{{&s.insertStmt, s.w, ws[0].SQL}, {&s.claimStmt, s.w, ws[1].SQL},
		{&s.completeStmt, s.w, ws[2].SQL}, {&s.getNowStmt, s.db, s.q.getNow}}
	if d.ReadBack {
		stmts = append(stmts, prepared{&s.readStmt, s.w, ws[3].SQL})
	}
	for _, p := range stmts {
		st, err := p.db.PrepareContext(ctx, p.q)
		if err != nil {
			s.closeStmts()
			return nil, fmt.Errorf("prepare the ledger's statements: %w", err)
		}
		*p.st = st
	}
	return s, nil
}

// DB returns the underlying database: the pool of reads.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database's pools.
func (s *Store) Close() error {
	s.closeStmts()
	err := s.db.Close()
	if s.w != s.db {
		err = errors.Join(err, s.w.Close())
	}
	return err
}

func (s *Store) closeStmts() {
	for _, st := range []*sql.Stmt{s.insertStmt, s.getNowStmt, s.claimStmt, s.completeStmt, s.readStmt} {
		if st != nil {
			_ = st.Close()
		}
	}
}

// returning ends every statement that Dialect.ReadBack runs without it.
const returning = ` RETURNING ` + columns

// withoutReturning is q without its RETURNING clause.
func withoutReturning(q string) string {
	w, ok := strings.CutSuffix(q, returning)
	if !ok {
		panic("sqlstore: a write read back must end with RETURNING " + columns)
	}
	return w
}

// writeRow runs st, a write of the row of key prepared on the writer, in q
// (the writer or a transaction on it), and returns the row as st left it;
// ledger.ErrNotFound when st changed no row. The row comes from st's
// RETURNING or, under Dialect.ReadBack, is read back after the write: in its
// transaction, or else on the writer once the write committed (not in a
// transaction of its own, where SQLite would keep a statement journal for
// the write). That read may see a later write of another process to the row:
// the row as it is now, which the caller could as well have read a moment
// later. If the read fails, the write stays committed and an error is
// returned, as when a claim's answer is lost: the row holds the lease, so a
// retry is in flight until the lease ends and then reconciles first.
func (s *Store) writeRow(ctx context.Context, q queryer, st *sql.Stmt, key string, args ...any) (ledger.Operation, error) {
	if !s.d.ReadBack {
		op, _, err := s.scan(stmt(ctx, q, st).QueryRowContext(ctx, args...))
		return op, err
	}
	res, err := stmt(ctx, q, st).ExecContext(ctx, args...)
	if err != nil {
		return ledger.Operation{}, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ledger.Operation{}, err
	}
	if n == 0 {
		return ledger.Operation{}, ledger.ErrNotFound
	}
	op, _, err := s.scan(stmt(ctx, q, s.readStmt).QueryRowContext(ctx, key))
	if err != nil {
		return ledger.Operation{}, fmt.Errorf("read back the row written: %w", err)
	}
	return op, nil
}

// stmt returns st for use in q, a transaction or the database.
func stmt(ctx context.Context, q queryer, st *sql.Stmt) *sql.Stmt {
	if tx, ok := q.(*sql.Tx); ok {
		return tx.StmtContext(ctx, st)
	}
	return st
}

// nowArg is the parameter of a {now} or {now+}: the Go clock in UTC at the
// microsecond precision both databases keep, or NULL when the database's
// clock decides.
func (s *Store) nowArg() any {
	if s.d.DBClock {
		return nil
	}
	return s.d.Time(s.now().UTC().Truncate(time.Microsecond))
}

// micros is a duration parameter of a {now+}.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// expand replaces the time tokens of a query with the dialect's SQL and
// numbers the placeholders: {now} is the current time (one parameter,
// nowArg), {now+} the current time plus a duration (two parameters, nowArg
// and micros), {time} a time parameter.
func (s *Store) expand(q string) string {
	q = strings.NewReplacer("{now+}", s.d.NowPlus, "{now}", s.d.Now, "{time}", s.d.TimeParam).Replace(q)
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
	return s.d.Time(v.UTC())
}

// flag is a 0/1 parameter compared with "? = 1".
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

const columns = `operation_key, action_type, request_hash, status, attempt_count, version, external_id,
	result_json, error_code, lease_owner, lease_until, workflow_id, run_id, request_id, guard_scope,
	hold_reason, resolved_by, resolved_at, resolve_note, created_at, updated_at, completed_at, summary,
	replay_count, unknown_at, settled_at, sent_at`

// active is the SQL condition of a row that still counts for guards.
const active = `status NOT IN ('failed_final', 'compensated')`

// exceptional and purgeable are the predicates of the partial indexes
// operations_exceptions and operations_purge, which a query repeats to use
// them. They are OR chains, not IN lists: SQLite would build an ephemeral
// table for an IN list of three constants on every statement (both databases
// match the chain to their index).
const (
	exceptional = `(status = 'unknown' OR status = 'needs_human' OR status = 'compensation_failed')`
	purgeable   = `(status = 'succeeded' OR status = 'failed_final' OR status = 'compensated')`
)

// held is the SQL condition of a row held for approval: it waits for a human
// and never reached a provider.
const held = `(status = 'needs_human' AND attempt_count = 0 AND hold_reason <> '')`

// finalFlag is the "? = 1" parameter that sets completed_at: st is final.
func finalFlag(st ledger.Status) int { return flag(st.Final()) }

// unknownFlag is the "? = 1" parameter that sets unknown_at (once): st is
// an unknown outcome.
func unknownFlag(st ledger.Status) int { return flag(st == ledger.Unknown) }

// settleFlag is the "? = 1" parameter that sets settled_at (once, after
// unknown_at): st says what happened.
func settleFlag(st ledger.Status) int {
	switch st {
	case ledger.Succeeded, ledger.FailedFinal, ledger.Pending, ledger.Compensating, ledger.Compensated, ledger.CompensationFailed:
		return 1
	}
	return 0
}

// marks is the SQL that keeps unknown_at and settled_at: two "? = 1" flags,
// each followed by a {now}.
const marks = `unknown_at = CASE WHEN ? = 1 AND unknown_at IS NULL THEN {now} ELSE unknown_at END,
	settled_at = CASE WHEN ? = 1 AND unknown_at IS NOT NULL AND settled_at IS NULL THEN {now} ELSE settled_at END`

// marksArgs are the parameters of marks for a row becoming st.
func (s *Store) marksArgs(st ledger.Status, now any) []any {
	return []any{unknownFlag(st), now, settleFlag(st), now}
}

type queries struct {
	get, getNow, exists, insert, claim, complete, resolve, exceptions, purge, guard, duplicate, inScope string
	permit, consume, grant, decision, decisions, decisionLog, replayed, holders                         string
}

func newQueries(expand func(string) string) queries {
	return queries{
		get:    expand(`SELECT ` + columns + ` FROM operations WHERE operation_key = ?`),
		getNow: expand(`SELECT ` + columns + `, {now} FROM operations WHERE operation_key = ?`),
		exists: expand(`SELECT 1 FROM operations WHERE operation_key = ?`),
		insert: expand(`INSERT INTO operations (operation_key, action_type, request_hash, status, attempt_count,
			lease_owner, lease_until, workflow_id, run_id, request_id, guard_scope, guard_key, entity, args_hash,
			hold_reason, created_at, updated_at, summary, sent_at)
			VALUES (?, ?, ?, ?, ?, ?, CASE WHEN ? = 1 THEN {now+} ELSE NULL END, ?, ?, ?, ?, ?, ?, ?, ?, {now}, {now}, ?,
			CASE WHEN ? = 1 THEN {now} ELSE NULL END)
			ON CONFLICT (operation_key) DO NOTHING RETURNING ` + columns),
		// claim is the conditional update: it takes the lease only if the
		// row is still the version the verdict was decided on.
		// A claim that must reconcile first marks the outcome unknown;
		// one that lets a call go marks when it was sent (sent_at, the
		// start of the in-flight horizon).
		claim: expand(`UPDATE operations SET status = 'in_progress', attempt_count = attempt_count + ?,
			version = version + 1, lease_owner = ?, lease_until = {now+}, workflow_id = ?, run_id = ?, request_id = ?,
			updated_at = {now}, unknown_at = CASE WHEN ? = 1 AND unknown_at IS NULL THEN {now} ELSE unknown_at END,
			sent_at = CASE WHEN ? = 1 THEN sent_at ELSE {now} END
			WHERE operation_key = ? AND version = ? RETURNING ` + columns),
		// replayed counts a claim answered from the stored success.
		replayed: expand(`UPDATE operations SET replay_count = replay_count + 1 WHERE operation_key = ? AND status = 'succeeded'`),
		complete: expand(`UPDATE operations SET status = ?,
			external_id = CASE WHEN ? = '' THEN external_id ELSE ? END,
			result_json = COALESCE(?, result_json), error_code = ?, lease_owner = '', lease_until = NULL,
			version = version + 1, updated_at = {now}, completed_at = CASE WHEN ? = 1 THEN {now} ELSE NULL END,
			` + marks + `
			WHERE operation_key = ? AND status = 'in_progress' AND lease_owner = ? RETURNING ` + columns),
		resolve: expand(`UPDATE operations SET status = ?,
			external_id = CASE WHEN ? = '' THEN external_id ELSE ? END,
			resolved_by = ?, resolved_at = {now}, resolve_note = ?, lease_owner = '', lease_until = NULL,
			version = version + 1, updated_at = {now}, completed_at = CASE WHEN ? = 1 THEN {now} ELSE NULL END,
			` + marks + `
			WHERE operation_key = ? RETURNING ` + columns),
		// exceptions: waiting for a human, compensation failed, unknown
		// for a while, or in progress with a lease that ended a while ago
		// (a stuck executor).
		// Each branch repeats the predicate of a partial index
		// (operations_exceptions, operations_leases) so both databases
		// can read the two indexes instead of the table.
		exceptions: expand(`SELECT ` + columns + ` FROM operations
			WHERE (` + exceptional + `
				AND (status <> 'unknown' OR updated_at <= {now+}))
			OR (status = 'in_progress' AND lease_until <= {now+})
			ORDER BY created_at, operation_key`),
		// purge keeps a succeeded row with a guard scope: it holds the
		// scope until it is compensated, however old it is.
		purge: expand(`DELETE FROM operations
			WHERE ` + purgeable + `
			AND completed_at IS NOT NULL AND completed_at < {time}
			AND NOT (status = 'succeeded' AND guard_scope <> '')`),
		// The "guard_scope <> ''" terms let both databases use the partial
		// index operations_scope.
		guard: expand(`SELECT operation_key, status FROM operations
			WHERE guard_scope = ? AND guard_scope <> '' AND operation_key <> ? AND ` + active + ` AND NOT ` + held + `
			ORDER BY created_at, operation_key LIMIT 1`),
		duplicate: expand(`SELECT operation_key, created_at, {now} FROM operations
			WHERE action_type = ? AND entity = ? AND args_hash = ? AND operation_key <> ? AND created_at >= {now+}
			AND ` + active + ` AND NOT ` + held + `
			ORDER BY created_at, operation_key LIMIT 1`),
		inScope: expand(`SELECT ` + columns + ` FROM operations
			WHERE guard_scope = ? AND guard_scope <> ''
			ORDER BY created_at DESC, operation_key DESC LIMIT ?`),
		// holders lists every operation that holds a guard scope, as the
		// guard query decides it (an override is checked against them).
		holders: expand(`SELECT operation_key FROM operations
			WHERE guard_scope = ? AND guard_scope <> '' AND operation_key <> ? AND ` + active + ` AND NOT ` + held + `
			ORDER BY created_at, operation_key LIMIT ` + strconv.Itoa(maxHolders+1)),
		permit: expand(`SELECT operation_key, request_hash, policy, override, granted_by, granted_at, consumed_at, holders
			FROM permits WHERE permit_id = ?`),
		consume: expand(`UPDATE permits SET consumed_at = {now} WHERE permit_id = ? AND consumed_at IS NULL`),
		grant: expand(`INSERT INTO permits (permit_id, operation_key, request_hash, policy, override, granted_by, holders, granted_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, COALESCE({time}, {now})) ON CONFLICT (permit_id) DO NOTHING`),
		decision: expand(`INSERT INTO decisions (question_id, operation_key, workflow_id, kind, decided_by, verified,
			sent_at, applied_at, card, outcome, external_id, note, refused, opened_at, card_digest)
			VALUES (?, ?, ?, ?, ?, ?, {time}, COALESCE({time}, {now}), ?, ?, ?, ?, ?, {time}, ?) RETURNING id`),
		decisions: expand(`SELECT id, question_id, operation_key, workflow_id, kind, decided_by, verified, sent_at,
			applied_at, card, outcome, external_id, note, refused, opened_at, card_digest
			FROM decisions WHERE operation_key IN (?, ?) OR (operation_key > ? AND operation_key < ?) ORDER BY id`),
		// decisionLog reads the audit trail by time (decisions_applied),
		// newest first; '' and the zero times do not filter.
		decisionLog: expand(`SELECT id, question_id, operation_key, workflow_id, kind, decided_by, verified, sent_at,
			applied_at, card, outcome, external_id, note, refused, opened_at, card_digest
			FROM decisions WHERE applied_at >= ? AND applied_at < ? AND (? = '' OR decided_by = ?) AND (? = '' OR kind = ?)
			ORDER BY applied_at DESC, id DESC LIMIT ?`),
	}
}

// maxRounds bounds how often a claim re-reads a row that changed under it.
const maxRounds = 16

// Claim implements ledger.Store.
func (s *Store) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, error) {
	if err := checkClaim(req); err != nil {
		return ledger.Claim{}, err
	}
	req.WorkflowID, req.RunID, req.RequestID = cleanText(req.WorkflowID), cleanText(req.RunID), cleanText(req.RequestID)
	// A permit, a guard or the duplicate check need a transaction around
	// the insert; a plain claim of a fresh key is the insert itself.
	checked := req.PermitID != "" || req.GuardScope != "" || req.DuplicateWindow > 0
	for range maxRounds {
		var (
			c    ledger.Claim
			done bool
			err  error
		)
		if checked {
			c, done, err = s.insertChecked(ctx, req)
		} else {
			c, done, err = s.insertPlain(ctx, req)
		}
		if err != nil || done {
			return c, err
		}
		// The row exists: decide on it at the time the database read it,
		// then take the lease with a conditional update.
		op, version, now, err := s.getNow(ctx, req.Key)
		if errors.Is(err, ledger.ErrNotFound) {
			continue // purged meanwhile: try again
		}
		if err != nil {
			return ledger.Claim{}, fmt.Errorf("ledger claim %q: %w", req.Key, err)
		}
		c, done, err = s.decide(ctx, req, op, version, now)
		if err != nil || done {
			return c, err
		}
	}
	return ledger.Claim{}, fmt.Errorf("ledger claim %q: the row kept changing under %d attempts; retry the claim later", req.Key, maxRounds)
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
	for _, f := range []struct{ name, v string }{{"Key", req.Key}, {"ActionType", req.ActionType},
		{"RequestHash", req.RequestHash}, {"Executor", req.Executor}, {"GuardScope", req.GuardScope},
		{"Entity", req.Entity}, {"PermitID", req.PermitID}} {
		if err := checkIdent("claim", f.name, f.v); err != nil {
			return err
		}
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

// insertRow inserts the row of a fresh key; ok is false when the key exists
// or another row took the guard scope meanwhile (decide again).
func (s *Store) insertRow(ctx context.Context, q queryer, req ledger.ClaimRequest, f fresh) (op ledger.Operation, ok bool, err error) {
	var owner string
	running := f.status == ledger.InProgress
	if running {
		owner = req.Executor
	}
	now := s.nowArg()
	op, err = s.writeRow(ctx, q, s.insertStmt, req.Key, req.Key, req.ActionType, req.RequestHash, string(f.status),
		f.attempts, owner, flag(running), now, micros(req.Lease), req.WorkflowID, req.RunID, req.RequestID,
		req.GuardScope, f.guardKey, req.Entity, argsHash(req.NormalizedArgs), cleanText(f.holdReason), now, now,
		cleanText(redact.String(req.Summary)), flag(running && !req.LookOnly), now)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return op, false, nil // the key exists
	case err != nil && s.d.IsUniqueViolation(err):
		return op, false, nil // another row took the guard scope meanwhile
	case err != nil:
		return op, false, fmt.Errorf("ledger claim %q: insert into %s: %w", req.Key, s.d.Name, err)
	}
	return op, true, nil
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
func (s *Store) insertPlain(ctx context.Context, req ledger.ClaimRequest) (ledger.Claim, bool, error) {
	op, ok, err := s.insertRow(ctx, s.w, req, fresh{status: ledger.InProgress, attempts: 1})
	if err != nil || !ok {
		return ledger.Claim{}, false, err
	}
	return ledger.Claim{Verdict: ledger.Execute, Operation: op}, true, nil
}

// insertChecked inserts a fresh key after the permit, guard and duplicate
// checks, in one short transaction serialized per guard scope and per entity,
// which also consumes the permit. done is false when the key exists.
func (s *Store) insertChecked(ctx context.Context, req ledger.ClaimRequest) (c ledger.Claim, done bool, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
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

	var (
		override bool
		permit   ledger.Permit
	)
	if req.PermitID != "" {
		p, reason, err := s.checkPermit(ctx, tx, req)
		if err != nil {
			return c, false, err
		}
		if reason != "" {
			// A concurrent claim of this key may have consumed the
			// permit and committed its row since the check above: then
			// this is a claim of an existing row.
			switch err := tx.QueryRowContext(ctx, s.q.exists, req.Key).Scan(&one); {
			case err == nil:
				return c, false, nil
			case !errors.Is(err, sql.ErrNoRows):
				return c, false, fmt.Errorf("ledger claim %q: %w", req.Key, err)
			}
			return ledger.Claim{Verdict: ledger.NoPermit, Reason: reason}, true, nil
		}
		override, permit = p.Override, p
	}

	row := fresh{status: ledger.InProgress, attempts: 1}
	if req.GuardScope != "" {
		var other, status string
		switch err := tx.QueryRowContext(ctx, s.q.guard, req.GuardScope, req.Key).Scan(&other, &status); {
		case errors.Is(err, sql.ErrNoRows):
			row.guardKey = req.GuardScope
		case err != nil:
			return c, false, fmt.Errorf("ledger claim %q: guard check: %w", req.Key, err)
		case override:
			// A human saw the clash and let this one through: it runs
			// beside the holders the card showed, without taking the
			// scope; a holder the card did not show asks again.
			reason, err := s.unseenHolders(ctx, tx, req, permit)
			if err != nil {
				return c, false, err
			}
			if reason != "" {
				return ledger.Claim{Verdict: ledger.ClashUnseen, Reason: reason}, true, nil
			}
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
	if row.status == ledger.InProgress && req.DuplicateWindow > 0 && !override {
		var other string
		var created, now dbTime
		nowArg := s.nowArg()
		switch err := tx.QueryRowContext(ctx, s.q.duplicate, nowArg, req.ActionType, req.Entity, argsHash(req.NormalizedArgs),
			req.Key, nowArg, -micros(req.DuplicateWindow)).Scan(&other, &created, &now); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return c, false, fmt.Errorf("ledger claim %q: duplicate check: %w", req.Key, err)
		default:
			row = fresh{status: ledger.NeedsHuman, holdReason: fmt.Sprintf(
				"suspected duplicate of operation %q: same %s on entity %q with equal arguments %s earlier (window %s): approve to run it anyway",
				other, req.ActionType, req.Entity, now.Time.Sub(created.Time), req.DuplicateWindow)}
		}
	}
	op, ok, err := s.insertRow(ctx, tx, req, row)
	if err != nil || !ok {
		return c, false, err
	}
	if row.status == ledger.InProgress && req.PermitID != "" {
		// The row is inserted first: a concurrent claim of the same key
		// waits on it and then sees the key taken (InFlight), not a
		// consumed permit.
		if reason, err := s.consume(ctx, tx, req); err != nil || reason != "" {
			return ledger.Claim{Verdict: ledger.NoPermit, Reason: reason}, err == nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		if s.d.IsUniqueViolation(err) {
			return c, false, nil
		}
		return c, false, fmt.Errorf("ledger claim %q: commit: %w", req.Key, err)
	}
	if row.status == ledger.NeedsHuman {
		return ledger.Claim{Verdict: ledger.Held, Operation: op, Reason: row.holdReason}, true, nil
	}
	return ledger.Claim{Verdict: ledger.Execute, Operation: op}, true, nil
}

// decide returns the verdict on an existing row, read at the database time
// now, taking the lease with a conditional update when the verdict gives it.
// done is false when the row changed meanwhile and the claim must read it
// again. A permit is looked at only for a held row: any other existing row is
// a retry of a call that already started, and needs none.
func (s *Store) decide(ctx context.Context, req ledger.ClaimRequest, op ledger.Operation, version int64, now time.Time) (ledger.Claim, bool, error) {
	if op.RequestHash != req.RequestHash {
		return ledger.Claim{Verdict: ledger.Conflict, Operation: op, Reason: fmt.Sprintf(
			"operation %q was claimed with request hash %s, this request has %s: the same key never runs other arguments; plan a new step for them",
			op.Key, op.RequestHash, req.RequestHash)}, true, nil
	}
	take := func(v ledger.Verdict, attempts int) (ledger.Claim, bool, error) {
		got, ok, err := s.take(ctx, s.w, req, version, attempts, v == ledger.ReconcileFirst)
		if err != nil || !ok {
			return ledger.Claim{}, false, err
		}
		return ledger.Claim{Verdict: v, Operation: got}, true, nil
	}
	switch op.Status {
	case ledger.Succeeded:
		// Count the duplicate absorbed; the row is otherwise untouched.
		if _, err := s.w.ExecContext(ctx, s.q.replayed, req.Key); err != nil {
			return ledger.Claim{}, false, fmt.Errorf("ledger claim %q: count the replay: %w", req.Key, err)
		}
		op.Replays++
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
			if req.PermitID == "" {
				return ledger.Claim{Verdict: ledger.Held, Operation: op, Reason: op.HoldReason}, true, nil
			}
			return s.takeHeld(ctx, req, op, version)
		}
	}
	return ledger.Claim{Verdict: ledger.Final, Operation: op, Reason: fmt.Sprintf(
		"operation %q is %s: it is not run again; resolve it to change that", op.Key, op.Status)}, true, nil
}

// takeHeld runs a held row with req's permit: the lease is taken and the
// permit consumed in one transaction, or neither.
func (s *Store) takeHeld(ctx context.Context, req ledger.ClaimRequest, op ledger.Operation, version int64) (ledger.Claim, bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return ledger.Claim{}, false, fmt.Errorf("ledger claim %q: begin: %w", req.Key, err)
	}
	defer func() { _ = tx.Rollback() }()
	if s.d.Lock != nil && op.GuardScope != "" {
		// The holders are compared under the scope's lock, as a fresh
		// claim's guard check is.
		if err := s.d.Lock(ctx, tx, []string{"guard|" + op.GuardScope}); err != nil {
			return ledger.Claim{}, false, fmt.Errorf("ledger claim %q: lock: %w", req.Key, err)
		}
	}
	// The conditional update first: if the row changed (a concurrent claim
	// ran it with this permit), decide again on the new row; otherwise the
	// update holds the row until the permit is checked and consumed, and is
	// rolled back if the permit does not cover it.
	got, ok, err := s.take(ctx, tx, req, version, 1, false)
	if err != nil || !ok {
		return ledger.Claim{}, false, err
	}
	p, reason, err := s.checkPermit(ctx, tx, req)
	if err != nil {
		return ledger.Claim{}, false, err
	}
	if reason != "" {
		return ledger.Claim{Verdict: ledger.NoPermit, Operation: op, Reason: reason}, true, nil
	}
	if !p.Override {
		return ledger.Claim{Verdict: ledger.Held, Operation: op, Reason: op.HoldReason + fmt.Sprintf(
			" (permit %q was granted without override, so it does not cover this)", req.PermitID)}, true, nil
	}
	if op.GuardScope != "" {
		scoped := req
		scoped.GuardScope = op.GuardScope
		reason, err := s.unseenHolders(ctx, tx, scoped, p)
		if err != nil {
			return ledger.Claim{}, false, err
		}
		if reason != "" {
			return ledger.Claim{Verdict: ledger.ClashUnseen, Operation: op, Reason: reason}, true, nil
		}
	}
	if reason, err := s.consume(ctx, tx, req); err != nil || reason != "" {
		return ledger.Claim{Verdict: ledger.NoPermit, Operation: op, Reason: reason}, err == nil, err
	}
	if err := tx.Commit(); err != nil {
		return ledger.Claim{}, false, fmt.Errorf("ledger claim %q: commit: %w", req.Key, err)
	}
	return ledger.Claim{Verdict: ledger.Execute, Operation: got}, true, nil
}

// take is the conditional update that gives req the lease if the row is
// still at version.
// A claim that must reconcile first (unknown) marks the outcome unknown.
func (s *Store) take(ctx context.Context, q queryer, req ledger.ClaimRequest, version int64, attempts int, unknown bool) (ledger.Operation, bool, error) {
	now := s.nowArg()
	got, err := s.writeRow(ctx, q, s.claimStmt, req.Key, attempts, req.Executor, now, micros(req.Lease),
		req.WorkflowID, req.RunID, req.RequestID, now, flag(unknown), now, flag(unknown || req.LookOnly), now, req.Key, version)
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
	if err := checkIdent("complete", "Key", c.Key); err != nil {
		return ledger.Operation{}, err
	}
	if err := checkIdent("complete", "Executor", c.Executor); err != nil {
		return ledger.Operation{}, err
	}
	ext := cleanText(c.ExternalID)
	now := s.nowArg()
	args := append([]any{string(c.Status), ext, ext, jsonArg(c.Result), note(c.ErrorCode), now, finalFlag(c.Status), now},
		s.marksArgs(c.Status, now)...)
	op, err := s.writeRow(ctx, s.w, s.completeStmt, c.Key, append(args, c.Key, c.Executor)...)
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
	if err := checkIdent("resolve", "Key", r.Key); err != nil {
		return ledger.Operation{}, err
	}
	ext := cleanText(r.ExternalID)
	now := s.nowArg()
	args := append([]any{string(r.Status), ext, ext, cleanText(r.By), now, note(r.Note), now, finalFlag(r.Status), now},
		s.marksArgs(r.Status, now)...)
	op, _, err := s.scan(s.w.QueryRowContext(ctx, s.q.resolve, append(args, r.Key)...))
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

// Transition implements ledger.Store.
func (s *Store) Transition(ctx context.Context, t ledger.Transition) (ledger.Operation, error) {
	switch {
	case t.Key == "":
		return ledger.Operation{}, fmt.Errorf("ledger transition: set Key")
	case !validStatus(t.Status) || t.Status == ledger.InProgress:
		return ledger.Operation{}, fmt.Errorf("ledger transition %q: status %q: name the state reached (succeeded, failed_final, compensating, compensated, ...); in_progress is taken by Claim only", t.Key, t.Status)
	}
	if err := checkIdent("transition", "Key", t.Key); err != nil {
		return ledger.Operation{}, err
	}
	ext, code := cleanText(t.ExternalID), note(t.ErrorCode)
	now := s.nowArg()
	args := append([]any{string(t.Status), ext, ext, code, code, jsonArg(t.Result), now, finalFlag(t.Status), now},
		s.marksArgs(t.Status, now)...)
	args = append(args, t.Key)
	var from string
	if len(t.From) > 0 {
		marks := make([]string, len(t.From))
		for i, st := range t.From {
			marks[i] = "?"
			args = append(args, string(st))
		}
		from = ` AND status IN (` + strings.Join(marks, ", ") + `)`
	}
	// Only the machine's columns change: resolved_by, resolved_at and
	// resolve_note keep what a human wrote.
	q := s.expand(`UPDATE operations SET status = ?,
		external_id = CASE WHEN ? = '' THEN external_id ELSE ? END,
		error_code = CASE WHEN ? = '' THEN error_code ELSE ? END,
		result_json = COALESCE(?, result_json), lease_owner = '', lease_until = NULL, version = version + 1,
		updated_at = {now}, completed_at = CASE WHEN ? = 1 THEN {now} ELSE NULL END,
		` + marks + `
		WHERE operation_key = ?` + from + ` RETURNING ` + columns)
	op, _, err := s.scan(s.w.QueryRowContext(ctx, q, args...))
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		cur, _, gerr := s.get(ctx, s.db, t.Key)
		if gerr != nil {
			return ledger.Operation{}, fmt.Errorf("ledger transition %q to %s: %w", t.Key, t.Status, gerr)
		}
		return cur, fmt.Errorf("ledger transition %q to %s: it is %s, not one of %v: %w", t.Key, t.Status, cur.Status, t.From, ledger.ErrTransition)
	case err != nil && s.d.IsUniqueViolation(err):
		return op, fmt.Errorf("ledger transition %q to %s: its guard scope is held by another active operation: %w", t.Key, t.Status, err)
	case err != nil:
		return op, fmt.Errorf("ledger transition %q to %s: %w", t.Key, t.Status, err)
	}
	return op, nil
}

// Get implements ledger.Store.
func (s *Store) Get(ctx context.Context, key string) (ledger.Operation, error) {
	if checkIdent("get", "key", key) != nil {
		return ledger.Operation{}, fmt.Errorf("ledger get %q: %w", key, ledger.ErrNotFound) // never stored
	}
	op, _, err := s.get(ctx, s.db, key)
	if err != nil {
		return op, fmt.Errorf("ledger get %q: %w", key, err)
	}
	return op, nil
}

// Exceptions implements ledger.Store.
func (s *Store) Exceptions(ctx context.Context, f ledger.ExceptionFilter) ([]ledger.Operation, error) {
	now := s.nowArg()
	ops, err := s.list(ctx, s.q.exceptions, now, -micros(f.UnknownOlderThan), now, -micros(f.StuckFor))
	if err != nil {
		return nil, fmt.Errorf("ledger exceptions: %w", err)
	}
	return ops, nil
}

// InScope implements ledger.Store.
func (s *Store) InScope(ctx context.Context, scope string, limit int) ([]ledger.Operation, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("ledger in scope %q: limit %d: ask for a positive number of operations", scope, limit)
	}
	if scope == "" || checkIdent("in scope", "scope", scope) != nil {
		return nil, nil // no operation holds such a scope
	}
	ops, err := s.list(ctx, s.q.inScope, scope, limit)
	if err != nil {
		return nil, fmt.Errorf("ledger in scope %q: %w", scope, err)
	}
	return ops, nil
}

func (s *Store) list(ctx context.Context, q string, args ...any) ([]ledger.Operation, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ops []ledger.Operation
	for rows.Next() {
		op, _, err := s.scan(rows)
		if err != nil {
			return nil, err
		}
		ops = append(ops, op)
	}
	return ops, rows.Err()
}

// Purge implements ledger.Store.
func (s *Store) Purge(ctx context.Context, completedBefore time.Time) (int, error) {
	if completedBefore.IsZero() {
		return 0, fmt.Errorf("ledger purge: set a cutoff (now minus the retention window)")
	}
	res, err := s.w.ExecContext(ctx, s.q.purge, s.t(completedBefore))
	if err != nil {
		return 0, fmt.Errorf("ledger purge: %w", err)
	}
	if err := s.purgeKeyless(ctx, completedBefore); err != nil {
		return 0, fmt.Errorf("ledger purge keyless calls: %w", err)
	}
	if err := s.purgeClaims(ctx, completedBefore); err != nil {
		return 0, fmt.Errorf("ledger purge question claims: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("ledger purge: %w", err)
	}
	return int(n), nil
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) get(ctx context.Context, q queryer, key string) (ledger.Operation, int64, error) {
	return s.scan(q.QueryRowContext(ctx, s.q.get, key))
}

// getNow reads a row and the database's time of the read.
func (s *Store) getNow(ctx context.Context, key string) (ledger.Operation, int64, time.Time, error) {
	var now dbTime
	op, version, err := s.scan(s.getNowStmt.QueryRowContext(ctx, s.nowArg(), key), &now)
	return op, version, now.Time, err
}

type scanner interface{ Scan(dest ...any) error }

// scan reads one row of columns, then extra; sql.ErrNoRows becomes
// ledger.ErrNotFound.
func (s *Store) scan(r scanner, extra ...any) (ledger.Operation, int64, error) {
	var (
		op                                      ledger.Operation
		status                                  string
		version                                 int64
		result                                  sql.NullString
		leaseUntil, resolved, created, updated  dbTime
		completed, unknownAt, settledAt, sentAt dbTime
	)
	dest := append([]any{&op.Key, &op.ActionType, &op.RequestHash, &status, &op.AttemptCount, &version, &op.ExternalID,
		&result, &op.ErrorCode, &op.LeaseOwner, &leaseUntil, &op.WorkflowID, &op.RunID, &op.RequestID, &op.GuardScope,
		&op.HoldReason, &op.ResolvedBy, &resolved, &op.ResolveNote, &created, &updated, &completed, &op.Summary,
		&op.Replays, &unknownAt, &settledAt, &sentAt}, extra...)
	err := r.Scan(dest...)
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
	op.LeaseUntil, op.ResolvedAt, op.CreatedAt, op.UpdatedAt, op.CompletedAt, op.UnknownAt, op.SettledAt =
		leaseUntil.Time, resolved.Time, created.Time, updated.Time, completed.Time, unknownAt.Time, settledAt.Time
	op.SentAt = sentAt.Time
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

// IndexedQuery is a query the schema has an index for, with sample
// arguments, so a driver's tests can check that the database's plan uses it.
type IndexedQuery struct {
	Name  string
	SQL   string
	Args  []any
	Index string // the index the plan must name
}

// IndexedQueries returns the queries of s that must use an index.
func IndexedQueries(s *Store) []IndexedQuery {
	now := s.nowArg()
	return []IndexedQuery{
		{"guard", s.q.guard, []any{"refund-per-order:o-1", "k"}, "operations_scope"},
		{"holders", s.q.holders, []any{"refund-per-order:o-1", "k"}, "operations_scope"},
		{"in scope", s.q.inScope, []any{"refund-per-order:o-1", 10}, "operations_scope"},
		{"duplicate", s.q.duplicate, []any{now, "apply_refund", "order:o-1", "ab12", "k", now, int64(-1e9)}, "operations_duplicate"},
		{"decisions", s.q.decisions, decisionKeys("k"), "decisions_operation"},
		{"decision log", s.q.decisionLog, []any{s.d.Time(time.Now().Add(-time.Hour)), s.d.Time(time.Now()), "alice", "alice", "", "", 50}, "decisions_applied"},
		{"permit", s.q.permit, []any{"q-1"}, "permits_pkey|sqlite_autoindex_permits_1"},
		{"exceptions", s.q.exceptions, []any{now, int64(-1e9), now, int64(0)}, "operations_exceptions"},
		{"stuck leases", s.q.exceptions, []any{now, int64(-1e9), now, int64(0)}, "operations_leases"},
		{"purge", s.q.purge, []any{s.d.Time(time.Now())}, "operations_purge"},
	}
}

// Statement is one statement of a Store as it is prepared, for a driver's
// tests to read the database's program of it.
type Statement struct {
	Name string
	SQL  string
}

// StepWrites returns the writes of every write step, a fresh claim and its
// completion, and the lease taken again, as s prepared them.
func StepWrites(s *Store) []Statement {
	write := func(q string) string { return q }
	if s.d.ReadBack {
		write = withoutReturning
	}
	ws := []Statement{{"insert", write(s.q.insert)}, {"claim", write(s.q.claim)}, {"complete", write(s.q.complete)}}
	if s.d.ReadBack {
		ws = append(ws, Statement{"read back", s.q.get})
	}
	return ws
}

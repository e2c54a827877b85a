package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// keylessColumns are the columns of keyless_calls KeylessCall reads, in the
// order scanKeyless scans them.
const keylessColumns = `version, call_session, call_turn, call_at, call_given, call_delivered_at,
	held_session, held_turn, held_at, held_given, held_delivered_at, forget_after`

// maxGiven bounds a KeylessTurn's Given.
const maxGiven = 32

// KeylessCall implements ledger.Store.
func (s *Store) KeylessCall(ctx context.Context, caller, fingerprint string) (ledger.KeylessCall, error) {
	if err := checkKeylessIdents("read keyless call", caller, fingerprint); err != nil {
		return ledger.KeylessCall{}, err
	}
	c := ledger.KeylessCall{Caller: caller, Fingerprint: fingerprint}
	var callAt, callDelivered, heldAt, heldDelivered, forget dbTime
	err := s.db.QueryRowContext(ctx, s.expand(`SELECT `+keylessColumns+` FROM keyless_calls WHERE caller = ? AND fingerprint = ?`), caller, fingerprint).Scan(
		&c.Version, &c.Call.Session, &c.Call.Turn, &callAt, &c.Call.Given, &callDelivered,
		&c.Held.Session, &c.Held.Turn, &heldAt, &c.Held.Given, &heldDelivered, &forget)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.KeylessCall{}, ledger.ErrNotFound
	}
	if err != nil {
		return ledger.KeylessCall{}, fmt.Errorf("ledger read keyless call of %q: %w", caller, err)
	}
	c.Call.At, c.Call.DeliveredAt, c.Held.At, c.Held.DeliveredAt, c.ForgetAfter = callAt.Time, callDelivered.Time, heldAt.Time, heldDelivered.Time, forget.Time
	return c, nil
}

// PutKeylessCall implements ledger.Store: an insert when c.Version is 0, else
// an update of the row still at c.Version; ErrStale when another writer got
// there first.
func (s *Store) PutKeylessCall(ctx context.Context, c ledger.KeylessCall) (ledger.KeylessCall, error) {
	if err := checkKeylessIdents("write keyless call", c.Caller, c.Fingerprint); err != nil {
		return ledger.KeylessCall{}, err
	}
	if err := checkKeylessTurn("Call", c.Call, true); err != nil {
		return ledger.KeylessCall{}, err
	}
	if err := checkKeylessTurn("Held", c.Held, false); err != nil {
		return ledger.KeylessCall{}, err
	}
	if c.Version < 0 {
		return ledger.KeylessCall{}, fmt.Errorf("ledger write keyless call: Version %d: give the version read, or 0 for a new row", c.Version)
	}
	for _, t := range []*time.Time{&c.Call.At, &c.Call.DeliveredAt, &c.Held.At, &c.Held.DeliveredAt, &c.ForgetAfter} {
		*t = t.UTC().Truncate(time.Microsecond) // what both databases keep
	}
	if c.Held.Turn == 0 {
		c.Held = ledger.KeylessTurn{}
	}
	vals := []any{c.Call.Session, c.Call.Turn, s.t(c.Call.At), c.Call.Given, s.t(c.Call.DeliveredAt),
		c.Held.Session, c.Held.Turn, s.t(c.Held.At), c.Held.Given, s.t(c.Held.DeliveredAt), s.t(c.ForgetAfter)}
	var (
		res sql.Result
		err error
	)
	if c.Version == 0 {
		res, err = s.w.ExecContext(ctx, s.expand(`INSERT INTO keyless_calls (caller, fingerprint, version, `+keylessColumns[len("version, "):]+`)
			VALUES (?, ?, 1, ?, ?, {time}, ?, {time}, ?, ?, {time}, ?, {time}, {time})
			ON CONFLICT (caller, fingerprint) DO NOTHING`), append([]any{c.Caller, c.Fingerprint}, vals...)...)
	} else {
		res, err = s.w.ExecContext(ctx, s.expand(`UPDATE keyless_calls SET version = version + 1,
			call_session = ?, call_turn = ?, call_at = {time}, call_given = ?, call_delivered_at = {time},
			held_session = ?, held_turn = ?, held_at = {time}, held_given = ?, held_delivered_at = {time}, forget_after = {time}
			WHERE caller = ? AND fingerprint = ? AND version = ?`), append(vals, c.Caller, c.Fingerprint, c.Version)...)
	}
	if err != nil {
		return ledger.KeylessCall{}, fmt.Errorf("ledger write keyless call of %q: %w", c.Caller, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return ledger.KeylessCall{}, fmt.Errorf("ledger write keyless call of %q: %w", c.Caller, err)
	}
	if n == 0 {
		return ledger.KeylessCall{}, ledger.ErrStale
	}
	c.Version++
	return c, nil
}

// purgeKeyless forgets the keyless calls whose ForgetAfter is before cutoff.
func (s *Store) purgeKeyless(ctx context.Context, cutoff time.Time) error {
	_, err := s.w.ExecContext(ctx, s.expand(`DELETE FROM keyless_calls WHERE forget_after IS NOT NULL AND forget_after < {time}`), s.t(cutoff))
	return err
}

func checkKeylessIdents(op, caller, fingerprint string) error {
	for _, f := range []struct{ name, v string }{{"Caller", caller}, {"Fingerprint", fingerprint}} {
		if f.v == "" || len(f.v) > ledger.MaxKeylessIdent {
			return fmt.Errorf("ledger %s: %s is %d bytes: give 1 to %d", op, f.name, len(f.v), ledger.MaxKeylessIdent)
		}
		if err := checkIdent(op, f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

func checkKeylessTurn(name string, t ledger.KeylessTurn, required bool) error {
	if t.Turn == 0 && !required {
		return nil
	}
	switch {
	case t.Turn < 1:
		return fmt.Errorf("ledger write keyless call: %s.Turn %d: give the turn that runs the call (from 1)", name, t.Turn)
	case t.Session == "" || len(t.Session) > ledger.MaxKeylessIdent:
		return fmt.Errorf("ledger write keyless call: %s.Session is %d bytes: give 1 to %d", name, len(t.Session), ledger.MaxKeylessIdent)
	case len(t.Given) > maxGiven:
		return fmt.Errorf("ledger write keyless call: %s.Given is %d bytes: give a state of at most %d", name, len(t.Given), maxGiven)
	}
	if err := checkIdent("write keyless call", name+".Session", t.Session); err != nil {
		return err
	}
	return checkIdent("write keyless call", name+".Given", t.Given)
}

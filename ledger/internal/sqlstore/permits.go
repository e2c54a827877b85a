package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// GrantPermit implements ledger.Store. Granting the same permit again (same
// id, key, request hash, policy, override and approver) is a no-op, so a
// retried activity may grant twice; GrantedAt is not compared, and the zero
// GrantedAt means now. Another permit under an existing id is an error.
func (s *Store) GrantPermit(ctx context.Context, p ledger.Permit) error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"ID (the question id)", p.ID}, {"Key", p.Key},
		{"RequestHash", p.RequestHash}, {"By (who approved)", p.By}} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("ledger grant permit %q: set %v", p.ID, missing)
	}
	for _, f := range []struct{ name, v string }{{"ID", p.ID}, {"Key", p.Key}, {"RequestHash", p.RequestHash}} {
		if err := checkIdent("grant permit", f.name, f.v); err != nil {
			return err
		}
	}
	holders, err := holdersArg(p.Holders)
	if err != nil {
		return fmt.Errorf("ledger grant permit %q: %w", p.ID, err)
	}
	p.Policy, p.By = cleanText(p.Policy), cleanText(p.By)
	res, err := s.w.ExecContext(ctx, s.q.grant, p.ID, p.Key, p.RequestHash, p.Policy, p.Override, p.By, holders,
		s.t(p.GrantedAt), s.nowArg())
	if err != nil {
		return fmt.Errorf("ledger grant permit %q: %w", p.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("ledger grant permit %q: %w", p.ID, err)
	} else if n == 1 {
		return nil
	}
	got, err := s.readPermit(ctx, s.db, p.ID)
	if err != nil {
		return fmt.Errorf("ledger grant permit %q: %w", p.ID, err)
	}
	if got.Key != p.Key || got.RequestHash != p.RequestHash || got.Policy != p.Policy || got.Override != p.Override || got.By != p.By ||
		!slices.Equal(got.Holders, normalHolders(p.Holders)) {
		return fmt.Errorf("ledger grant permit %q: the id already names another permit (operation %q, request hash %s, policy %q, override %t, by %q, holders %v): a permit id names one approval; grant this one under a new id",
			p.ID, got.Key, got.RequestHash, got.Policy, got.Override, got.By, got.Holders)
	}
	return nil
}

// maxHolders bounds the guard holders one permit names.
const maxHolders = 100

// normalHolders returns keys sorted, without repeats (nil when empty).
func normalHolders(keys []string) []string {
	if len(keys) == 0 {
		return nil
	}
	out := slices.Clone(keys)
	slices.Sort(out)
	return slices.Compact(out)
}

// holdersArg is the stored form of a permit's holders: a JSON array of the
// sorted keys, or the empty string for none.
func holdersArg(keys []string) (string, error) {
	keys = normalHolders(keys)
	if len(keys) > maxHolders {
		return "", fmt.Errorf("the permit names %d guard holders, at most %d are kept: refuse the approval and settle the scope's operations first", len(keys), maxHolders)
	}
	for _, k := range keys {
		if k == "" {
			return "", fmt.Errorf("the permit names an empty guard holder key: name each holder's operation key")
		}
		if err := checkIdent("grant permit", "Holders", k); err != nil {
			return "", err
		}
	}
	if len(keys) == 0 {
		return "", nil
	}
	b, err := json.Marshal(keys)
	return string(b), err
}

// readPermit returns the permit id, or sql.ErrNoRows.
func (s *Store) readPermit(ctx context.Context, q queryer, id string) (ledger.Permit, error) {
	p := ledger.Permit{ID: id}
	var granted, consumed dbTime
	var holders string
	err := q.QueryRowContext(ctx, s.q.permit, id).Scan(&p.Key, &p.RequestHash, &p.Policy, &p.Override, &p.By, &granted, &consumed, &holders)
	p.GrantedAt, p.ConsumedAt = granted.Time, consumed.Time
	if err == nil && holders != "" {
		if jerr := json.Unmarshal([]byte(holders), &p.Holders); jerr != nil {
			return p, fmt.Errorf("permit %q: stored holders %q are not a JSON array of keys: %w", id, holders, jerr)
		}
		p.Holders = normalHolders(p.Holders)
	}
	return p, err
}

// unseenHolders checks an override permit against the guard scope's holders
// now, inside tx (under the scope's lock): a holder the permit does not name
// was not on the approver's card, and gives a reason for verdict ClashUnseen.
func (s *Store) unseenHolders(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest, p ledger.Permit) (string, error) {
	rows, err := tx.QueryContext(ctx, s.q.holders, req.GuardScope, req.Key)
	if err != nil {
		return "", fmt.Errorf("ledger claim %q: list the holders of guard %q: %w", req.Key, req.GuardScope, err)
	}
	defer rows.Close()
	var unseen []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return "", fmt.Errorf("ledger claim %q: list the holders of guard %q: %w", req.Key, req.GuardScope, err)
		}
		if _, seen := slices.BinarySearch(p.Holders, k); !seen {
			unseen = append(unseen, k)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("ledger claim %q: list the holders of guard %q: %w", req.Key, req.GuardScope, err)
	}
	if len(unseen) == 0 {
		return "", nil
	}
	shown := "none"
	if len(p.Holders) > 0 {
		shown = strings.Join(p.Holders, ", ")
	}
	return fmt.Sprintf("guard %q is held by %s, which the card of permit %q did not show (it showed %s): the override covers only the clash the approver saw; ask again with a fresh card",
		req.GuardScope, strings.Join(unseen, ", "), req.PermitID, shown), nil
}

// checkPermit reads req's permit inside tx. A permit that cannot start req
// gives a reason, for verdict NoPermit.
func (s *Store) checkPermit(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (ledger.Permit, string, error) {
	p, err := s.readPermit(ctx, tx, req.PermitID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return p, fmt.Sprintf("permit %q does not exist: no approval was recorded under it; ask for approval again", req.PermitID), nil
	case err != nil:
		return p, "", fmt.Errorf("ledger claim %q: read permit %q: %w", req.Key, req.PermitID, err)
	case p.Key != req.Key:
		return p, fmt.Sprintf("permit %q approves operation %q, not %q: a permit runs the one step it was granted for", req.PermitID, p.Key, req.Key), nil
	case p.RequestHash != req.RequestHash:
		return p, fmt.Sprintf("permit %q approves request hash %s, this request has %s: the arguments changed after the approval; ask again", req.PermitID, p.RequestHash, req.RequestHash), nil
	case !p.ConsumedAt.IsZero():
		return p, fmt.Sprintf("permit %q was used at %s: a permit starts one call once; ask for a new approval", req.PermitID, p.ConsumedAt.Format(time.RFC3339Nano)), nil
	}
	return p, "", nil
}

// consume marks req's permit used inside tx; a reason means it was used
// meanwhile.
func (s *Store) consume(ctx context.Context, tx *sql.Tx, req ledger.ClaimRequest) (string, error) {
	res, err := tx.ExecContext(ctx, s.q.consume, s.nowArg(), req.PermitID)
	if err != nil {
		return "", fmt.Errorf("ledger claim %q: consume permit %q: %w", req.Key, req.PermitID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return "", fmt.Errorf("ledger claim %q: consume permit %q: %w", req.Key, req.PermitID, err)
	}
	if n != 1 {
		return fmt.Sprintf("permit %q was used by another claim meanwhile: a permit starts one call once", req.PermitID), nil
	}
	return "", nil
}

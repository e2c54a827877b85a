package sandbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/tool"
)

// payments is a card acquirer: payments, refunds and their reversals, all
// under Stripe-like idempotency keys.
type payments struct {
	s  *Sandbox
	db *sql.DB
	mu sync.Mutex // makes claim-check-insert and commit atomic
}

// Entry is a row of the payments ledger as the payments API answers it.
type Entry struct {
	ID             string    `json:"id"`
	Object         string    `json:"object"` // payment, refund or reversal
	Kind           string    `json:"kind"`   // payment, refund, payment_reversal, refund_reversal
	AmountMinor    int64     `json:"amount_minor"`
	Currency       string    `json:"currency"`
	OrderID        string    `json:"order_id,omitempty"`
	CustomerID     string    `json:"customer_id,omitempty"`
	PaymentMethod  string    `json:"payment_method,omitempty"` // a token, never a card number
	Reverses       string    `json:"reverses,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Status         string    `json:"status"`
	IdempotencyKey string    `json:"idempotency_key"`
	CreatedAt      time.Time `json:"created_at"`
}

func newPayments(ctx context.Context, s *Sandbox, open func(string) (*sql.DB, error)) (*payments, error) {
	db, err := open(Payments)
	if err != nil {
		return nil, err
	}
	p := &payments{s: s, db: db}
	err = migrate(ctx, db, Payments,
		`CREATE TABLE IF NOT EXISTS idempotency_keys (
			key          TEXT PRIMARY KEY,
			request_hash TEXT NOT NULL,
			state        TEXT NOT NULL CHECK (state IN ('in_flight','done')),
			status_code  INTEGER,
			response     BLOB,
			created_at   INTEGER NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS entries (
			id              TEXT PRIMARY KEY,
			kind            TEXT NOT NULL CHECK (kind IN ('payment','refund','payment_reversal','refund_reversal')),
			idempotency_key TEXT NOT NULL UNIQUE REFERENCES idempotency_keys(key),
			amount_minor    INTEGER NOT NULL CHECK (amount_minor <> 0),
			currency        TEXT NOT NULL,
			order_id        TEXT,
			customer_id     TEXT,
			payment_method  TEXT,
			reverses        TEXT UNIQUE REFERENCES entries(id),
			reason          TEXT,
			status          TEXT NOT NULL,
			created_at      INTEGER NOT NULL,
			CHECK ((kind LIKE '%_reversal') = (reverses IS NOT NULL)),
			CHECK ((kind LIKE '%_reversal') = (amount_minor < 0)))`,
		// The process that held these claims is gone: release them.
		`DELETE FROM idempotency_keys WHERE state = 'in_flight'`,
	)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return p, nil
}

func (p *payments) name() string { return Payments }
func (p *payments) close() error { return p.db.Close() }

func (p *payments) routes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("POST "+prefix+"/v1/payments", p.createPayment)
	mux.HandleFunc("GET "+prefix+"/v1/payments", p.lookup("payments.lookup", "payment"))
	mux.HandleFunc("POST "+prefix+"/v1/payments/{id}/reverse", p.reverse("payments.reverse", "payment"))
	mux.HandleFunc("POST "+prefix+"/v1/refunds", p.createRefund)
	mux.HandleFunc("GET "+prefix+"/v1/refunds", p.lookup("refunds.lookup", "refund"))
	mux.HandleFunc("POST "+prefix+"/v1/refunds/{id}/reverse", p.reverse("refunds.reverse", "refund"))
	mux.HandleFunc("GET "+prefix+"/v1/reversals", p.lookup("reversals.lookup", "payment_reversal", "refund_reversal"))
}

// createPaymentRequest is the body of POST /v1/payments.
type createPaymentRequest struct {
	CustomerID    string `json:"customer_id"`
	OrderID       string `json:"order_id"`
	AmountMinor   int64  `json:"amount_minor"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Description   string `json:"description"`
}

func (p *payments) createPayment(w http.ResponseWriter, r *http.Request) {
	var req createPaymentRequest
	p.keyed(w, r, "payments.create", &req, func() *apiError {
		if e := checkMoney(req.AmountMinor, req.Currency); e != nil {
			return e
		}
		if req.CustomerID == "" {
			return badRequest("invalid_request", "customer_id is required")
		}
		if tool.LooksLikeCardNumber(req.PaymentMethod) {
			return badRequest("raw_card_number", "payment_method looks like a card number: send a token such as tok_visa, never a card number")
		}
		if req.PaymentMethod == "" {
			return badRequest("invalid_request", "payment_method is required (a token such as tok_visa)")
		}
		return nil
	}, func(ctx context.Context, tx *sql.Tx, key string) (int, any, error) {
		e := Entry{ID: newID("pay_"), Object: "payment", Kind: "payment", AmountMinor: req.AmountMinor, Currency: req.Currency,
			OrderID: req.OrderID, CustomerID: req.CustomerID, PaymentMethod: req.PaymentMethod, Reason: req.Description, Status: "succeeded", IdempotencyKey: key}
		return http.StatusCreated, e, p.insert(ctx, tx, &e, req.PaymentMethod)
	})
}

// createRefundRequest is the body of POST /v1/refunds.
type createRefundRequest struct {
	OrderID     string `json:"order_id"`
	PaymentID   string `json:"payment_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Reason      string `json:"reason"`
}

// maxRefundMinor is the largest refund the acquirer accepts.
const maxRefundMinor = 10_000_000

func (p *payments) createRefund(w http.ResponseWriter, r *http.Request) {
	var req createRefundRequest
	p.keyed(w, r, "refunds.create", &req, func() *apiError {
		if e := checkMoney(req.AmountMinor, req.Currency); e != nil {
			return e
		}
		if req.OrderID == "" && req.PaymentID == "" {
			return badRequest("invalid_request", "order_id or payment_id is required")
		}
		return nil
	}, func(ctx context.Context, tx *sql.Tx, key string) (int, any, error) {
		if req.AmountMinor > maxRefundMinor {
			return http.StatusPaymentRequired, errorJSON("amount_too_large",
				fmt.Sprintf("refunds above %d minor units are declined", maxRefundMinor)), nil
		}
		e := Entry{ID: newID("re_"), Object: "refund", Kind: "refund", AmountMinor: req.AmountMinor, Currency: req.Currency,
			OrderID: req.OrderID, Reason: req.Reason, Status: "succeeded", IdempotencyKey: key}
		return http.StatusCreated, e, p.insert(ctx, tx, &e, "")
	})
}

// reverseRequest is the body of POST /v1/{payments,refunds}/{id}/reverse.
type reverseRequest struct {
	Reason string `json:"reason"`
}

func (p *payments) reverse(op, kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req reverseRequest
		id := r.PathValue("id")
		p.keyed(w, r, op, &req, func() *apiError { return nil }, func(ctx context.Context, tx *sql.Tx, key string) (int, any, error) {
			orig, err := scanEntry(tx.QueryRowContext(ctx, entrySelect+` WHERE id = ?`, id))
			if errors.Is(err, sql.ErrNoRows) || (err == nil && orig.Kind != kind) {
				return http.StatusNotFound, errorJSON("not_found", fmt.Sprintf("no %s %s: check the id", kind, id)), nil
			}
			if err != nil {
				return 0, nil, err
			}
			var prior string
			err = tx.QueryRowContext(ctx, `SELECT id FROM entries WHERE reverses = ?`, id).Scan(&prior)
			if err == nil {
				return http.StatusBadRequest, map[string]any{"error": map[string]string{"code": "already_reversed",
					"message": fmt.Sprintf("%s %s was already reversed by %s", kind, id, prior)}, "reversal_id": prior}, nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return 0, nil, err
			}
			e := Entry{ID: newID("rev_"), Object: "reversal", Kind: kind + "_reversal", AmountMinor: -orig.AmountMinor, Currency: orig.Currency,
				OrderID: orig.OrderID, CustomerID: orig.CustomerID, Reverses: orig.ID, Reason: req.Reason, Status: "succeeded", IdempotencyKey: key}
			return http.StatusCreated, e, p.insert(ctx, tx, &e, "")
		})
	}
}

func errorJSON(code, message string) json.RawMessage { return errorBody(code, message) }

func (p *payments) insert(ctx context.Context, tx *sql.Tx, e *Entry, method string) error {
	e.CreatedAt = fromNanos(now())
	_, err := tx.ExecContext(ctx, `INSERT INTO entries (id, kind, idempotency_key, amount_minor, currency, order_id, customer_id,
		payment_method, reverses, reason, status, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		e.ID, e.Kind, e.IdempotencyKey, e.AmountMinor, e.Currency, nullable(e.OrderID), nullable(e.CustomerID),
		nullable(method), nullable(e.Reverses), nullable(e.Reason), e.Status, e.CreatedAt.UnixNano())
	if err != nil {
		return fmt.Errorf("insert %s: %w", e.Kind, err)
	}
	return nil
}

const entrySelect = `SELECT id, kind, idempotency_key, amount_minor, currency, COALESCE(order_id,''), COALESCE(customer_id,''),
	COALESCE(payment_method,''), COALESCE(reverses,''), COALESCE(reason,''), status, created_at FROM entries`

type rowScanner interface{ Scan(dest ...any) error }

func scanEntry(row rowScanner) (Entry, error) {
	var e Entry
	var created int64
	err := row.Scan(&e.ID, &e.Kind, &e.IdempotencyKey, &e.AmountMinor, &e.Currency, &e.OrderID, &e.CustomerID,
		&e.PaymentMethod, &e.Reverses, &e.Reason, &e.Status, &created)
	if err != nil {
		return Entry{}, err
	}
	e.CreatedAt = fromNanos(created)
	switch e.Kind {
	case "payment", "refund":
		e.Object = e.Kind
	default:
		e.Object = "reversal"
	}
	return e, nil
}

// keyed runs the idempotency protocol around one write: validate, claim the
// key, fault, commit the row and the answer together, answer.
func (p *payments) keyed(w http.ResponseWriter, r *http.Request, op string, req any, validate func() *apiError,
	commit func(ctx context.Context, tx *sql.Tx, key string) (int, any, error)) {
	x, ok := p.s.begin(w, r, op)
	if !ok {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		writeError(w, http.StatusBadRequest, "idempotency_key_required", "send an Idempotency-Key header with every POST")
		return
	}
	canon, aerr := readJSON(r, req)
	if aerr == nil {
		aerr = validate()
	}
	if aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	hash := requestHash(r, canon)
	ctx := x.ctx

	p.mu.Lock()
	status, body, outcome, err := p.claim(ctx, key, hash)
	p.mu.Unlock()
	if err != nil {
		internal(w, p.s.log, op, err)
		return
	}
	switch outcome {
	case replayed:
		w.Header().Set("Idempotent-Replayed", "true")
		writeRaw(w, status, body)
		return
	case refused:
		writeRaw(w, status, body)
		return
	}
	if x.is(DropBeforeCommit) {
		p.release(ctx, key)
		x.drop()
		return
	}
	x.pause()
	if x.is(Reject) {
		status, body = x.rejection()
		p.mu.Lock()
		_, err = p.db.ExecContext(ctx, `UPDATE idempotency_keys SET state='done', status_code=?, response=? WHERE key=?`, status, body, key)
		p.mu.Unlock()
	} else {
		p.mu.Lock()
		status, body, err = p.commit(ctx, key, commit)
		p.mu.Unlock()
	}
	if err != nil {
		p.release(ctx, key)
		internal(w, p.s.log, op, err)
		return
	}
	p.s.log.Debug("sandbox request", "op", op, "status", status)
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeRaw(w, status, body)
}

type claimOutcome int

const (
	claimed  claimOutcome = iota // the caller holds the key
	replayed                     // answer the stored response
	refused                      // answer 409 or 422
)

// claim takes the key for this request, or returns the answer to give
// instead: the stored one (replay), 409 (in flight) or 422 (mismatch).
func (p *payments) claim(ctx context.Context, key, hash string) (status int, body []byte, outcome claimOutcome, err error) {
	var (
		storedHash, state string
		code              sql.NullInt64
		resp              []byte
	)
	err = p.db.QueryRowContext(ctx, `SELECT request_hash, state, status_code, response FROM idempotency_keys WHERE key = ?`, key).
		Scan(&storedHash, &state, &code, &resp)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = p.db.ExecContext(ctx, `INSERT INTO idempotency_keys (key, request_hash, state, created_at) VALUES (?,?,'in_flight',?)`, key, hash, now())
		if err != nil {
			return 0, nil, refused, fmt.Errorf("claim idempotency key: %w", err)
		}
		return 0, nil, claimed, nil
	case err != nil:
		return 0, nil, refused, fmt.Errorf("read idempotency key: %w", err)
	case storedHash != hash:
		return http.StatusUnprocessableEntity, errorBody("idempotency_key_mismatch",
			"this Idempotency-Key was used with a different request: send the original request or use a new key"), refused, nil
	case state == "in_flight":
		return http.StatusConflict, errorBody("request_in_progress",
			"a request with this Idempotency-Key is still being processed: retry later"), refused, nil
	}
	return int(code.Int64), resp, replayed, nil
}

func (p *payments) release(ctx context.Context, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.db.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE key = ? AND state = 'in_flight'`, key); err != nil {
		p.s.log.Error("sandbox: release idempotency key", "err", err)
	}
}

func (p *payments) commit(ctx context.Context, key string, fn func(ctx context.Context, tx *sql.Tx, key string) (int, any, error)) (int, []byte, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, nil, fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	status, v, err := fn(ctx, tx, key)
	if err != nil {
		return 0, nil, err
	}
	body, err := json.Marshal(v)
	if err != nil {
		return 0, nil, fmt.Errorf("encode the answer: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET state='done', status_code=?, response=? WHERE key=?`, status, body, key); err != nil {
		return 0, nil, fmt.Errorf("store the answer: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, fmt.Errorf("commit: %w", err)
	}
	return status, body, nil
}

// lookup answers GET ?idempotency_key=K with the entry committed under K.
func (p *payments) lookup(op string, kinds ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		x, ok := p.s.begin(w, r, op)
		if !ok {
			return
		}
		key := r.URL.Query().Get("idempotency_key")
		if key == "" {
			writeError(w, http.StatusBadRequest, "invalid_request", "add ?idempotency_key=KEY")
			return
		}
		x.pause()
		if x.is(LookupLag) {
			writeError(w, http.StatusNotFound, "not_found", "nothing committed under this key")
			return
		}
		p.mu.Lock()
		var state string
		err := p.db.QueryRowContext(x.ctx, `SELECT state FROM idempotency_keys WHERE key = ?`, key).Scan(&state)
		var e Entry
		if err == nil && state == "done" {
			e, err = scanEntry(p.db.QueryRowContext(x.ctx, entrySelect+` WHERE idempotency_key = ?`, key))
		}
		p.mu.Unlock()
		switch {
		case err == nil && state == "done" && x.hidden(e.CreatedAt):
			writeError(w, http.StatusNotFound, "not_found", "nothing committed under this key")
		case err == nil && state == "in_flight":
			writeError(w, http.StatusConflict, "request_in_progress", "a request with this key is still being processed: look again later")
		case errors.Is(err, sql.ErrNoRows):
			writeError(w, http.StatusNotFound, "not_found", "nothing committed under this key")
		case err != nil:
			internal(w, p.s.log, op, err)
		default:
			for _, k := range kinds {
				if e.Kind == k {
					writeJSON(w, http.StatusOK, e)
					return
				}
			}
			writeError(w, http.StatusNotFound, "not_found", "nothing of this kind committed under this key")
		}
	}
}

func (p *payments) effects(ctx context.Context) ([]Effect, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rows, err := p.db.QueryContext(ctx, entrySelect+` ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Effect
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, Effect{Provider: Payments, Kind: e.Kind, ID: e.ID, Key: e.IdempotencyKey, Reverses: e.Reverses,
			OrderID: e.OrderID, AmountMinor: e.AmountMinor, Currency: e.Currency, Status: e.Status, Summary: e.Reason, CreatedAt: e.CreatedAt})
	}
	return out, rows.Err()
}

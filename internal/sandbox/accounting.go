package sandbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// accounting is a 1C-like accounting system: documents (invoices and storno
// documents) with a unique integration key and sequential numbers. A storno
// is a new document with the opposite amount; nothing is ever changed.
type accounting struct {
	s  *Sandbox
	db *sql.DB
	mu sync.Mutex
}

// Document is an accounting document as the API answers it.
type Document struct {
	ID             string    `json:"id"`
	Number         string    `json:"number"`
	Kind           string    `json:"kind"` // invoice or storno
	IntegrationKey string    `json:"integration_key"`
	CustomerID     string    `json:"customer_id"`
	OrderID        string    `json:"order_id,omitempty"`
	AmountMinor    int64     `json:"amount_minor"`
	Currency       string    `json:"currency"`
	Description    string    `json:"description,omitempty"`
	Reverses       string    `json:"reverses,omitempty"`
	Created        bool      `json:"created"`
	CreatedAt      time.Time `json:"created_at"`
}

func newAccounting(ctx context.Context, s *Sandbox, open func(string) (*sql.DB, error)) (*accounting, error) {
	db, err := open(Accounting)
	if err != nil {
		return nil, err
	}
	a := &accounting{s: s, db: db}
	err = migrate(ctx, db, Accounting,
		`CREATE TABLE IF NOT EXISTS documents (
			id              TEXT PRIMARY KEY,
			number          INTEGER NOT NULL UNIQUE,
			kind            TEXT NOT NULL CHECK (kind IN ('invoice','storno')),
			integration_key TEXT NOT NULL UNIQUE,
			request_hash    TEXT NOT NULL,
			customer_id     TEXT NOT NULL,
			order_id        TEXT,
			amount_minor    INTEGER NOT NULL,
			currency        TEXT NOT NULL,
			description     TEXT,
			reverses        TEXT UNIQUE REFERENCES documents(id),
			created_at      INTEGER NOT NULL,
			CHECK ((kind = 'storno') = (reverses IS NOT NULL)),
			CHECK ((kind = 'storno') = (amount_minor < 0)))`)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return a, nil
}

func (a *accounting) name() string { return Accounting }
func (a *accounting) close() error { return a.db.Close() }

func (a *accounting) routes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("POST "+prefix+"/v1/invoices", a.createInvoice)
	mux.HandleFunc("POST "+prefix+"/v1/invoices/{id}/storno", a.storno)
	mux.HandleFunc("GET "+prefix+"/v1/documents", a.lookup)
}

// createInvoiceRequest is the body of POST /v1/invoices.
type createInvoiceRequest struct {
	IntegrationKey string `json:"integration_key"`
	CustomerID     string `json:"customer_id"`
	OrderID        string `json:"order_id"`
	AmountMinor    int64  `json:"amount_minor"`
	Currency       string `json:"currency"`
	Description    string `json:"description"`
}

// stornoRequest is the body of POST /v1/invoices/{id}/storno.
type stornoRequest struct {
	IntegrationKey string `json:"integration_key"`
	Reason         string `json:"reason"`
}

const documentSelect = `SELECT id, number, kind, integration_key, request_hash, customer_id, COALESCE(order_id,''), amount_minor, currency,
	COALESCE(description,''), COALESCE(reverses,''), created_at FROM documents`

func scanDocument(row rowScanner) (Document, string, error) {
	var (
		d       Document
		number  int64
		hash    string
		created int64
	)
	err := row.Scan(&d.ID, &number, &d.Kind, &d.IntegrationKey, &hash, &d.CustomerID, &d.OrderID, &d.AmountMinor, &d.Currency,
		&d.Description, &d.Reverses, &created)
	if err != nil {
		return Document{}, "", err
	}
	d.Number = fmt.Sprintf("%08d", number)
	d.CreatedAt = fromNanos(created)
	return d, hash, nil
}

func (a *accounting) createInvoice(w http.ResponseWriter, r *http.Request) {
	var req createInvoiceRequest
	a.write(w, r, "invoices.create", &req, func() *apiError {
		if req.IntegrationKey == "" {
			return badRequest("invalid_request", "integration_key is required")
		}
		if req.CustomerID == "" {
			return badRequest("invalid_request", "customer_id is required")
		}
		return checkMoney(req.AmountMinor, req.Currency)
	}, func(ctx context.Context, tx *sql.Tx) (Document, *apiError, error) {
		return Document{Kind: "invoice", IntegrationKey: req.IntegrationKey, CustomerID: req.CustomerID, OrderID: req.OrderID,
			AmountMinor: req.AmountMinor, Currency: req.Currency, Description: req.Description}, nil, nil
	}, func() string { return req.IntegrationKey })
}

func (a *accounting) storno(w http.ResponseWriter, r *http.Request) {
	var req stornoRequest
	id := r.PathValue("id")
	a.write(w, r, "invoices.storno", &req, func() *apiError {
		if req.IntegrationKey == "" {
			return badRequest("invalid_request", "integration_key is required")
		}
		return nil
	}, func(ctx context.Context, tx *sql.Tx) (Document, *apiError, error) {
		orig, _, err := scanDocument(tx.QueryRowContext(ctx, documentSelect+` WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) || (err == nil && orig.Kind != "invoice") {
			return Document{}, &apiError{http.StatusNotFound, "not_found", fmt.Sprintf("no invoice %s: check the id", id)}, nil
		}
		if err != nil {
			return Document{}, nil, err
		}
		prior, _, err := scanDocument(tx.QueryRowContext(ctx, documentSelect+` WHERE reverses = ?`, id))
		if err == nil {
			return Document{}, badRequest("already_reversed", "invoice %s was already reversed by storno %s", id, prior.ID), nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Document{}, nil, err
		}
		return Document{Kind: "storno", IntegrationKey: req.IntegrationKey, CustomerID: orig.CustomerID, OrderID: orig.OrderID,
			AmountMinor: -orig.AmountMinor, Currency: orig.Currency, Description: req.Reason, Reverses: orig.ID}, nil, nil
	}, func() string { return req.IntegrationKey })
}

// write creates one document under its integration key. A known key with
// the same request answers 200 with the existing document; with another
// request it answers 422 integration_key_conflict.
func (a *accounting) write(w http.ResponseWriter, r *http.Request, op string, req any, validate func() *apiError,
	build func(ctx context.Context, tx *sql.Tx) (Document, *apiError, error), key func() string) {
	x, ok := a.s.begin(w, r, op)
	if !ok {
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
	if x.is(DropBeforeCommit) {
		x.drop()
		return
	}
	x.pause()
	if x.is(Reject) {
		x.writeRejection()
		return
	}
	a.mu.Lock()
	status, v, err := a.insert(x.ctx, key(), hash, build)
	a.mu.Unlock()
	if err != nil {
		internal(w, a.s.log, op, err)
		return
	}
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeJSON(w, status, v)
}

func (a *accounting) insert(ctx context.Context, key, hash string, build func(ctx context.Context, tx *sql.Tx) (Document, *apiError, error)) (int, any, error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = tx.Rollback() }()
	existing, storedHash, err := scanDocument(tx.QueryRowContext(ctx, documentSelect+` WHERE integration_key = ?`, key))
	switch {
	case err == nil && storedHash == hash:
		return http.StatusOK, existing, nil
	case err == nil:
		return http.StatusUnprocessableEntity, errorJSON("integration_key_conflict",
			fmt.Sprintf("integration key %s already names document %s with other data: use the original data or a new key", key, existing.ID)), nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, nil, err
	}
	d, aerr, err := build(ctx, tx)
	if err != nil {
		return 0, nil, err
	}
	if aerr != nil {
		return aerr.status, errorJSON(aerr.code, aerr.message), nil
	}
	var number int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(number), 0) + 1 FROM documents`).Scan(&number); err != nil {
		return 0, nil, err
	}
	d.ID, d.Number, d.Created, d.CreatedAt = newID("doc_"), fmt.Sprintf("%08d", number), true, fromNanos(now())
	_, err = tx.ExecContext(ctx, `INSERT INTO documents (id, number, kind, integration_key, request_hash, customer_id, order_id,
		amount_minor, currency, description, reverses, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		d.ID, number, d.Kind, d.IntegrationKey, hash, d.CustomerID, nullable(d.OrderID), d.AmountMinor, d.Currency,
		nullable(d.Description), nullable(d.Reverses), d.CreatedAt.UnixNano())
	if err != nil {
		return 0, nil, fmt.Errorf("insert %s: %w", d.Kind, err)
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, d, nil
}

// lookup answers GET /v1/documents?integration_key=K.
func (a *accounting) lookup(w http.ResponseWriter, r *http.Request) {
	const op = "invoices.lookup"
	x, ok := a.s.begin(w, r, op)
	if !ok {
		return
	}
	key := r.URL.Query().Get("integration_key")
	if key == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "add ?integration_key=KEY")
		return
	}
	x.pause()
	if x.is(LookupLag) {
		writeError(w, http.StatusNotFound, "not_found", "no document under this integration key")
		return
	}
	a.mu.Lock()
	d, _, err := scanDocument(a.db.QueryRowContext(x.ctx, documentSelect+` WHERE integration_key = ?`, key))
	a.mu.Unlock()
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && x.hidden(d.CreatedAt)):
		writeError(w, http.StatusNotFound, "not_found", "no document under this integration key")
	case err != nil:
		internal(w, a.s.log, op, err)
	default:
		writeJSON(w, http.StatusOK, d)
	}
}

func (a *accounting) effects(ctx context.Context) ([]Effect, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	rows, err := a.db.QueryContext(ctx, documentSelect+` ORDER BY number`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Effect
	for rows.Next() {
		d, _, err := scanDocument(rows)
		if err != nil {
			return nil, err
		}
		kind := "invoice"
		if d.Kind == "storno" {
			kind = "invoice_storno"
		}
		out = append(out, Effect{Provider: Accounting, Kind: kind, ID: d.ID, Key: d.IntegrationKey, Reverses: d.Reverses,
			OrderID: d.OrderID, AmountMinor: d.AmountMinor, Currency: d.Currency, Status: "posted", Summary: d.Description, CreatedAt: d.CreatedAt})
	}
	return out, rows.Err()
}

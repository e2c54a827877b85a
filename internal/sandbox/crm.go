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

// crm is a helpdesk: tickets with an optional unique external_ref, a search
// index that may lag, and closures as entries of their own.
type crm struct {
	s   *Sandbox
	db  *sql.DB
	mu  sync.Mutex
	lag IndexLag
}

// Ticket is a ticket as the CRM API answers it.
type Ticket struct {
	ID          string    `json:"id"`
	Number      int64     `json:"number"`
	ExternalRef string    `json:"external_ref,omitempty"`
	Subject     string    `json:"subject"`
	Body        string    `json:"body,omitempty"`
	OrderID     string    `json:"order_id,omitempty"`
	Priority    string    `json:"priority"`
	Status      string    `json:"status"` // open or closed
	Created     bool      `json:"created"`
	CreatedAt   time.Time `json:"created_at"`
}

// Closure is the record of a ticket being closed.
type Closure struct {
	ID        string    `json:"id"`
	TicketID  string    `json:"ticket_id"`
	Ref       string    `json:"ref"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// TicketSearch is the answer of a ticket search.
type TicketSearch struct {
	Tickets []Ticket `json:"tickets"`
	// IndexCaughtUp is true when every committed ticket is visible to
	// search: only then does an empty answer mean "no such ticket".
	IndexCaughtUp bool `json:"index_caught_up"`
}

func newCRM(ctx context.Context, s *Sandbox, open func(string) (*sql.DB, error)) (*crm, error) {
	db, err := open(CRM)
	if err != nil {
		return nil, err
	}
	c := &crm{s: s, db: db, lag: s.opts.IndexLag}
	err = migrate(ctx, db, CRM,
		`CREATE TABLE IF NOT EXISTS tickets (
			id              TEXT PRIMARY KEY,
			number          INTEGER NOT NULL UNIQUE,
			external_ref    TEXT UNIQUE,
			subject         TEXT NOT NULL,
			body            TEXT,
			order_id        TEXT,
			priority        TEXT NOT NULL,
			status          TEXT NOT NULL CHECK (status IN ('open','closed')),
			created_at      INTEGER NOT NULL,
			hidden_searches INTEGER NOT NULL DEFAULT 0,
			visible_at      INTEGER NOT NULL DEFAULT 0)`,
		`CREATE TABLE IF NOT EXISTS closures (
			id         TEXT PRIMARY KEY,
			ticket_id  TEXT NOT NULL UNIQUE REFERENCES tickets(id),
			ref        TEXT NOT NULL UNIQUE,
			reason     TEXT,
			created_at INTEGER NOT NULL)`)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return c, nil
}

func (c *crm) name() string { return CRM }
func (c *crm) close() error { return c.db.Close() }

func (c *crm) setLag(l IndexLag) {
	c.mu.Lock()
	c.lag = l
	c.mu.Unlock()
}

func (c *crm) routes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("POST "+prefix+"/v1/tickets", c.create)
	mux.HandleFunc("GET "+prefix+"/v1/tickets", c.search)
	mux.HandleFunc("POST "+prefix+"/v1/tickets/{id}/close", c.closeTicket)
	mux.HandleFunc("GET "+prefix+"/v1/closures", c.lookupClosure)
}

// createTicketRequest is the body of POST /v1/tickets.
type createTicketRequest struct {
	ExternalRef string `json:"external_ref"`
	Subject     string `json:"subject"`
	Body        string `json:"body"`
	OrderID     string `json:"order_id"`
	Priority    string `json:"priority"`
}

const ticketSelect = `SELECT id, number, COALESCE(external_ref,''), subject, COALESCE(body,''), COALESCE(order_id,''), priority, status, created_at FROM tickets`

func scanTicket(row rowScanner) (Ticket, error) {
	var t Ticket
	var created int64
	if err := row.Scan(&t.ID, &t.Number, &t.ExternalRef, &t.Subject, &t.Body, &t.OrderID, &t.Priority, &t.Status, &created); err != nil {
		return Ticket{}, err
	}
	t.CreatedAt = fromNanos(created)
	return t, nil
}

// create upserts a ticket by external_ref: a known ref answers 200 with the
// existing ticket and changes nothing.
func (c *crm) create(w http.ResponseWriter, r *http.Request) {
	const op = "tickets.create"
	x, ok := c.s.begin(w, r, op)
	if !ok {
		return
	}
	var req createTicketRequest
	if _, aerr := readJSON(r, &req); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if req.Subject == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "subject is required")
		return
	}
	switch req.Priority {
	case "":
		req.Priority = "normal"
	case "low", "normal", "high", "urgent":
	default:
		writeError(w, http.StatusBadRequest, "invalid_request", "priority must be low, normal, high or urgent")
		return
	}
	if x.is(DropBeforeCommit) {
		x.drop()
		return
	}
	x.pause()
	if x.is(Reject) {
		x.writeRejection()
		return
	}
	c.mu.Lock()
	t, status, err := c.upsert(x.ctx, req)
	c.mu.Unlock()
	if err != nil {
		internal(w, c.s.log, op, err)
		return
	}
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeJSON(w, status, t)
}

func (c *crm) upsert(ctx context.Context, req createTicketRequest) (Ticket, int, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return Ticket{}, 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if req.ExternalRef != "" {
		t, err := scanTicket(tx.QueryRowContext(ctx, ticketSelect+` WHERE external_ref = ?`, req.ExternalRef))
		if err == nil {
			return t, http.StatusOK, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return Ticket{}, 0, err
		}
	}
	var number int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(number), 1000) + 1 FROM tickets`).Scan(&number); err != nil {
		return Ticket{}, 0, err
	}
	t := Ticket{ID: newID("tkt_"), Number: number, ExternalRef: req.ExternalRef, Subject: req.Subject, Body: req.Body, OrderID: req.OrderID,
		Priority: req.Priority, Status: "open", Created: true, CreatedAt: fromNanos(now())}
	visibleAt := int64(0)
	if c.lag.Duration > 0 {
		visibleAt = t.CreatedAt.Add(c.lag.Duration).UnixNano()
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO tickets (id, number, external_ref, subject, body, order_id, priority, status, created_at,
		hidden_searches, visible_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)`, t.ID, t.Number, nullable(t.ExternalRef), t.Subject,
		nullable(req.Body), nullable(t.OrderID), t.Priority, t.Status, t.CreatedAt.UnixNano(), c.lag.Searches, visibleAt)
	if err != nil {
		return Ticket{}, 0, fmt.Errorf("insert ticket: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Ticket{}, 0, err
	}
	return t, http.StatusCreated, nil
}

// search finds tickets by external_ref through the lagging index. Every
// search counts down the hidden_searches of every ticket not yet indexed.
func (c *crm) search(w http.ResponseWriter, r *http.Request) {
	const op = "tickets.search"
	x, ok := c.s.begin(w, r, op)
	if !ok {
		return
	}
	ref := r.URL.Query().Get("external_ref")
	if ref == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "add ?external_ref=REF")
		return
	}
	x.pause()
	if x.is(LookupLag) {
		writeJSON(w, http.StatusOK, TicketSearch{Tickets: []Ticket{}, IndexCaughtUp: false})
		return
	}
	c.mu.Lock()
	res, err := c.searchIndex(x.ctx, ref)
	c.mu.Unlock()
	if err != nil {
		internal(w, c.s.log, op, err)
		return
	}
	visible := res.Tickets[:0]
	for _, t := range res.Tickets {
		if x.hidden(t.CreatedAt) {
			res.IndexCaughtUp = false
			continue
		}
		visible = append(visible, t)
	}
	res.Tickets = visible
	writeJSON(w, http.StatusOK, res)
}

func (c *crm) searchIndex(ctx context.Context, ref string) (TicketSearch, error) {
	t := now()
	res := TicketSearch{Tickets: []Ticket{}}
	rows, err := c.db.QueryContext(ctx, ticketSelect+` WHERE external_ref = ? AND hidden_searches <= 0 AND visible_at <= ?`, ref, t)
	if err != nil {
		return res, err
	}
	for rows.Next() {
		tk, err := scanTicket(rows)
		if err != nil {
			rows.Close()
			return res, err
		}
		res.Tickets = append(res.Tickets, tk)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return res, err
	}
	var pending int
	if err := c.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM tickets WHERE hidden_searches > 0 OR visible_at > ?`, t).Scan(&pending); err != nil {
		return res, err
	}
	res.IndexCaughtUp = pending == 0
	_, err = c.db.ExecContext(ctx, `UPDATE tickets SET hidden_searches = hidden_searches - 1 WHERE hidden_searches > 0`)
	return res, err
}

// closeTicketRequest is the body of POST /v1/tickets/{id}/close.
type closeTicketRequest struct {
	Ref    string `json:"ref"`
	Reason string `json:"reason"`
}

func (c *crm) closeTicket(w http.ResponseWriter, r *http.Request) {
	const op = "tickets.close"
	x, ok := c.s.begin(w, r, op)
	if !ok {
		return
	}
	var req closeTicketRequest
	if _, aerr := readJSON(r, &req); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if req.Ref == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "ref is required: it makes closing safe to repeat")
		return
	}
	if x.is(DropBeforeCommit) {
		x.drop()
		return
	}
	x.pause()
	if x.is(Reject) {
		x.writeRejection()
		return
	}
	c.mu.Lock()
	status, v, err := c.closeTx(x.ctx, r.PathValue("id"), req)
	c.mu.Unlock()
	if err != nil {
		internal(w, c.s.log, op, err)
		return
	}
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeJSON(w, status, v)
}

const closureSelect = `SELECT id, ticket_id, ref, COALESCE(reason,''), created_at FROM closures`

func scanClosure(row rowScanner) (Closure, error) {
	var cl Closure
	var created int64
	if err := row.Scan(&cl.ID, &cl.TicketID, &cl.Ref, &cl.Reason, &created); err != nil {
		return Closure{}, err
	}
	cl.CreatedAt = fromNanos(created)
	return cl, nil
}

func (c *crm) closeTx(ctx context.Context, id string, req closeTicketRequest) (int, any, error) {
	tx, err := c.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = tx.Rollback() }()
	cl, err := scanClosure(tx.QueryRowContext(ctx, closureSelect+` WHERE ref = ?`, req.Ref))
	switch {
	case err == nil && cl.TicketID == id:
		return http.StatusOK, cl, nil
	case err == nil:
		return http.StatusBadRequest, errorJSON("ref_in_use", fmt.Sprintf("ref %s already closed ticket %s: use a new ref", req.Ref, cl.TicketID)), nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, nil, err
	}
	if _, err := scanTicket(tx.QueryRowContext(ctx, ticketSelect+` WHERE id = ?`, id)); errors.Is(err, sql.ErrNoRows) {
		return http.StatusNotFound, errorJSON("not_found", fmt.Sprintf("no ticket %s: check the id", id)), nil
	} else if err != nil {
		return 0, nil, err
	}
	if prior, err := scanClosure(tx.QueryRowContext(ctx, closureSelect+` WHERE ticket_id = ?`, id)); err == nil {
		return http.StatusBadRequest, errorJSON("already_closed", fmt.Sprintf("ticket %s was already closed by %s", id, prior.Ref)), nil
	} else if !errors.Is(err, sql.ErrNoRows) {
		return 0, nil, err
	}
	cl = Closure{ID: newID("cls_"), TicketID: id, Ref: req.Ref, Reason: req.Reason, CreatedAt: fromNanos(now())}
	if _, err := tx.ExecContext(ctx, `INSERT INTO closures VALUES (?,?,?,?,?)`, cl.ID, cl.TicketID, cl.Ref, nullable(cl.Reason), cl.CreatedAt.UnixNano()); err != nil {
		return 0, nil, fmt.Errorf("insert closure: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE tickets SET status = 'closed' WHERE id = ?`, id); err != nil {
		return 0, nil, err
	}
	if err := tx.Commit(); err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, cl, nil
}

// lookupClosure answers GET /v1/closures?ref=K (not through the index).
func (c *crm) lookupClosure(w http.ResponseWriter, r *http.Request) {
	const op = "closures.lookup"
	x, ok := c.s.begin(w, r, op)
	if !ok {
		return
	}
	ref := r.URL.Query().Get("ref")
	if ref == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "add ?ref=REF")
		return
	}
	x.pause()
	if x.is(LookupLag) {
		writeError(w, http.StatusNotFound, "not_found", "no closure under this ref")
		return
	}
	c.mu.Lock()
	cl, err := scanClosure(c.db.QueryRowContext(x.ctx, closureSelect+` WHERE ref = ?`, ref))
	c.mu.Unlock()
	switch {
	case errors.Is(err, sql.ErrNoRows) || (err == nil && x.hidden(cl.CreatedAt)):
		writeError(w, http.StatusNotFound, "not_found", "no closure under this ref")
	case err != nil:
		internal(w, c.s.log, op, err)
	default:
		writeJSON(w, http.StatusOK, cl)
	}
}

func (c *crm) effects(ctx context.Context) ([]Effect, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Effect
	rows, err := c.db.QueryContext(ctx, ticketSelect+` ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		t, err := scanTicket(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, Effect{Provider: CRM, Kind: "ticket", ID: t.ID, Key: t.ExternalRef, OrderID: t.OrderID,
			Status: t.Status, Summary: t.Subject, CreatedAt: t.CreatedAt})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = c.db.QueryContext(ctx, closureSelect+` ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		cl, err := scanClosure(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, Effect{Provider: CRM, Kind: "ticket_closure", ID: cl.ID, Key: cl.Ref, Reverses: cl.TicketID,
			Status: "closed", Summary: cl.Reason, CreatedAt: cl.CreatedAt})
	}
	return out, rows.Err()
}

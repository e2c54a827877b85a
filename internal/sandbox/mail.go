package sandbox

import (
	"context"
	"database/sql"
	"net/http"
	"sync"
	"time"
)

// mail is a mail relay with no idempotency key and no lookup: every request
// that is processed sends a message, and nobody can ask later whether one
// was sent.
type mail struct {
	s  *Sandbox
	db *sql.DB
	mu sync.Mutex
}

// Message is the relay's answer to a send.
type Message struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"` // queued
	CreatedAt time.Time `json:"created_at"`
}

func newMail(ctx context.Context, s *Sandbox, open func(string) (*sql.DB, error)) (*mail, error) {
	db, err := open(Mail)
	if err != nil {
		return nil, err
	}
	m := &mail{s: s, db: db}
	err = migrate(ctx, db, Mail, `CREATE TABLE IF NOT EXISTS messages (
		id         TEXT PRIMARY KEY,
		to_addr    TEXT NOT NULL,
		subject    TEXT NOT NULL,
		body       TEXT NOT NULL,
		created_at INTEGER NOT NULL)`)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return m, nil
}

func (m *mail) name() string { return Mail }
func (m *mail) close() error { return m.db.Close() }

func (m *mail) routes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("POST "+prefix+"/v1/messages", m.send)
}

// sendRequest is the body of POST /v1/messages.
type sendRequest struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

func (m *mail) send(w http.ResponseWriter, r *http.Request) {
	const op = "mail.send"
	x, ok := m.s.begin(w, r, op)
	if !ok {
		return
	}
	var req sendRequest
	if _, aerr := readJSON(r, &req); aerr != nil {
		writeAPIError(w, aerr)
		return
	}
	if req.To == "" || req.Subject == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "to and subject are required")
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
	msg := Message{ID: newID("msg_"), Status: "queued", CreatedAt: fromNanos(now())}
	m.mu.Lock()
	_, err := m.db.ExecContext(x.ctx, `INSERT INTO messages VALUES (?,?,?,?,?)`, msg.ID, req.To, req.Subject, req.Body, msg.CreatedAt.UnixNano())
	m.mu.Unlock()
	if err != nil {
		internal(w, m.s.log, op, err)
		return
	}
	if x.is(CommitThenDrop) {
		x.drop()
		return
	}
	writeJSON(w, http.StatusAccepted, msg)
}

func (m *mail) effects(ctx context.Context) ([]Effect, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rows, err := m.db.QueryContext(ctx, `SELECT id, to_addr, subject, created_at FROM messages ORDER BY created_at, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Effect
	for rows.Next() {
		var (
			id, to, subject string
			created         int64
		)
		if err := rows.Scan(&id, &to, &subject, &created); err != nil {
			return nil, err
		}
		out = append(out, Effect{Provider: Mail, Kind: "email", ID: id, Status: "queued", Summary: to + ": " + subject, CreatedAt: fromNanos(created)})
	}
	return out, rows.Err()
}

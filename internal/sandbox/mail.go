package sandbox

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// mail is a mail relay with no idempotency key: every request that is
// processed sends a message, even one that repeats an earlier one. A sender
// may set a reference (as a mail server keeps a Message-ID) and search for
// it later; the relay never deduplicates by it.
type mail struct {
	s  *Sandbox
	db *sql.DB
	mu sync.Mutex
}

// Message is the relay's answer to a send, and an item of a search.
type Message struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"` // queued
	To        string    `json:"to,omitempty"`
	Subject   string    `json:"subject,omitempty"`
	Reference string    `json:"reference,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// MessageSearch is the answer of GET /v1/messages?reference=R: every message
// sent with the reference, oldest first (empty when there is none).
type MessageSearch struct {
	Messages []Message `json:"messages"`
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
		created_at INTEGER NOT NULL,
		reference  TEXT)`)
	if err == nil {
		err = addReference(ctx, db)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return m, nil
}

// addReference adds the reference column to a store made before it
// existed.
func addReference(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('messages') WHERE name = 'reference'`).Scan(&n); err != nil {
		return fmt.Errorf("sandbox: read the mail schema: %w", err)
	}
	if n > 0 {
		return nil
	}
	return migrate(ctx, db, Mail, `ALTER TABLE messages ADD COLUMN reference TEXT`)
}

func (m *mail) name() string { return Mail }
func (m *mail) close() error { return m.db.Close() }

func (m *mail) routes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("POST "+prefix+"/v1/messages", m.send)
	mux.HandleFunc("GET "+prefix+"/v1/messages", m.search)
}

// sendRequest is the body of POST /v1/messages.
type sendRequest struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
	// Reference is kept with the message for searches; the relay does not
	// deduplicate by it.
	Reference string `json:"reference"`
}

// maxReference is the longest reference the relay keeps, in bytes.
const maxReference = 512

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
	if len(req.Reference) > maxReference {
		writeError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("reference is %d bytes, the limit is %d", len(req.Reference), maxReference))
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
	msg := Message{ID: newID("msg_"), Status: "queued", To: req.To, Subject: req.Subject, Reference: req.Reference, CreatedAt: fromNanos(now())}
	m.mu.Lock()
	_, err := m.db.ExecContext(x.ctx, `INSERT INTO messages (id, to_addr, subject, body, created_at, reference) VALUES (?,?,?,?,?,?)`,
		msg.ID, req.To, req.Subject, req.Body, msg.CreatedAt.UnixNano(), nullable(req.Reference))
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

// search answers GET /v1/messages?reference=R with every message sent
// under the reference: a filter, so an empty list is its only "none".
func (m *mail) search(w http.ResponseWriter, r *http.Request) {
	const op = "mail.lookup"
	x, ok := m.s.begin(w, r, op)
	if !ok {
		return
	}
	ref := r.URL.Query().Get("reference")
	if ref == "" {
		writeError(w, http.StatusBadRequest, "invalid_request", "add ?reference=REF")
		return
	}
	x.pause()
	res := MessageSearch{Messages: []Message{}}
	if x.is(LookupLag) {
		writeJSON(w, http.StatusOK, res)
		return
	}
	m.mu.Lock()
	all, err := m.messages(x.ctx, ref)
	m.mu.Unlock()
	if err != nil {
		internal(w, m.s.log, op, err)
		return
	}
	for _, msg := range all {
		if !x.hidden(msg.CreatedAt) {
			res.Messages = append(res.Messages, msg)
		}
	}
	writeJSON(w, http.StatusOK, res)
}

// messages returns the messages sent under ref, or every message when ref
// is empty, oldest first.
func (m *mail) messages(ctx context.Context, ref string) ([]Message, error) {
	q := `SELECT id, to_addr, subject, COALESCE(reference,''), created_at FROM messages`
	var args []any
	if ref != "" {
		q += ` WHERE reference = ?`
		args = append(args, ref)
	}
	rows, err := m.db.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var (
			msg     = Message{Status: "queued"}
			created int64
		)
		if err := rows.Scan(&msg.ID, &msg.To, &msg.Subject, &msg.Reference, &created); err != nil {
			return nil, err
		}
		msg.CreatedAt = fromNanos(created)
		out = append(out, msg)
	}
	return out, rows.Err()
}

func (m *mail) effects(ctx context.Context) ([]Effect, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all, err := m.messages(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]Effect, 0, len(all))
	for _, msg := range all {
		out = append(out, Effect{Provider: Mail, Kind: "email", ID: msg.ID, Key: msg.Reference, Status: msg.Status,
			Summary: msg.To + ": " + msg.Subject, CreatedAt: msg.CreatedAt})
	}
	return out, nil
}

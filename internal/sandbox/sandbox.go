package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the pure Go SQLite driver, registered as "sqlite"

	"github.com/agentsaga/agentsaga/internal/loopback"
	"github.com/agentsaga/agentsaga/internal/privfile"
)

// The provider names, as used in URLs, effects and the admin API.
const (
	Orders     = "orders"
	Payments   = "payments"
	CRM        = "crm"
	Accounting = "accounting"
	Mail       = "mail"
)

// Providers lists the provider names in a stable order.
var Providers = []string{Orders, Payments, CRM, Accounting, Mail}

// Options configures a sandbox.
type Options struct {
	// Addr is the listen address; empty means 127.0.0.1 on a free port.
	Addr string
	// Dir keeps each provider's SQLite file (orders.db, payments.db, ...)
	// in this directory, created if needed. Empty keeps everything in
	// memory.
	Dir string
	// Logger receives one debug line per request (operation, status, fault;
	// never bodies). Nil discards.
	Logger *slog.Logger
	// IndexLag is the CRM search index lag applied to new tickets.
	IndexLag IndexLag
	// Hook, when set, is called by every request after its fault was taken
	// and, for writes, after the key was claimed and before the commit. Tests
	// use it to hold a request in flight; it must return for the request to
	// go on.
	Hook func(ctx context.Context, op string)
	// Token is the admin API's token; empty generates a random one (see
	// Sandbox.Token). The providers' own APIs need none.
	Token string
}

// IndexLag delays the CRM search index: a new ticket is not found by search
// for its first Searches searches and until Duration has passed.
type IndexLag struct {
	Searches int           `json:"searches,omitempty"`
	Duration time.Duration `json:"-"`
}

type indexLagJSON struct {
	Searches int    `json:"searches,omitempty"`
	Duration string `json:"duration,omitempty"`
}

// MarshalJSON writes Duration as a duration string.
func (l IndexLag) MarshalJSON() ([]byte, error) {
	j := indexLagJSON{Searches: l.Searches}
	if l.Duration > 0 {
		j.Duration = l.Duration.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads Duration as a duration string such as "2s".
func (l *IndexLag) UnmarshalJSON(b []byte) error {
	var j indexLagJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*l = IndexLag{Searches: j.Searches}
	if j.Duration != "" {
		d, err := time.ParseDuration(j.Duration)
		if err != nil {
			return fmt.Errorf("duration %q: write a Go duration such as 2s: %w", j.Duration, err)
		}
		l.Duration = d
	}
	return nil
}

// URLs are the base URLs of the providers and of the admin API.
type URLs struct {
	Orders     string `json:"orders"`
	Payments   string `json:"payments"`
	CRM        string `json:"crm"`
	Accounting string `json:"accounting"`
	Mail       string `json:"mail"`
	Admin      string `json:"admin"`
}

// Effect is one committed row in a provider's store. Reversals are effects
// of their own that name the effect they reverse.
type Effect struct {
	// Provider is the provider's name, such as "payments".
	Provider string `json:"provider"`
	// Kind is payment, refund, payment_reversal, refund_reversal, ticket,
	// ticket_closure, invoice, invoice_storno or email.
	Kind string `json:"kind"`
	// ID is the provider's id of the row.
	ID string `json:"id"`
	// Key is the key the row was committed under: Idempotency-Key,
	// external_ref, integration_key or close ref. Mail has none.
	Key string `json:"key,omitempty"`
	// Reverses is the id of the effect this row reverses or closes.
	Reverses string `json:"reverses,omitempty"`
	// OrderID is the order the effect belongs to, if any.
	OrderID string `json:"order_id,omitempty"`
	// AmountMinor is the signed amount in minor units (reversals negative).
	AmountMinor int64 `json:"amount_minor,omitempty"`
	// Currency is the ISO 4217 code of AmountMinor.
	Currency string `json:"currency,omitempty"`
	// Status is the row's state at the provider.
	Status string `json:"status,omitempty"`
	// Summary is a short description (subject, recipient).
	Summary string `json:"summary,omitempty"`
	// CreatedAt is when the row was committed.
	CreatedAt time.Time `json:"created_at"`
}

// provider is one downstream system.
type provider interface {
	name() string
	routes(mux *http.ServeMux, prefix string)
	effects(ctx context.Context) ([]Effect, error)
	close() error
}

// Sandbox is a running set of providers.
type Sandbox struct {
	opts      Options
	log       *slog.Logger
	ln        net.Listener
	srv       *http.Server
	base      string
	faults    *faults
	providers []provider
	crm       *crm
	closing   chan struct{}
	closeOnce sync.Once
	served    chan error
	token     string
}

// Start opens the providers' stores, seeds the orders and serves every
// provider and the admin API until Close. ctx bounds only the start-up.
func Start(ctx context.Context, opts Options) (*Sandbox, error) {
	s := &Sandbox{opts: opts, log: opts.Logger, faults: newFaults(), closing: make(chan struct{}), served: make(chan error, 1)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.token = opts.Token
	if s.token == "" {
		tok, err := NewToken()
		if err != nil {
			return nil, err
		}
		s.token = tok
	}
	if opts.Dir != "" {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("sandbox: create data directory %s: %w", opts.Dir, err)
		}
	}
	open := func(name string) (*sql.DB, error) { return openDB(ctx, opts.Dir, name) }
	var err error
	fail := func(e error) (*Sandbox, error) {
		for _, p := range s.providers {
			_ = p.close()
		}
		return nil, e
	}
	for _, mk := range []func() (provider, error){
		func() (provider, error) { return newOrders(ctx, s, open) },
		func() (provider, error) { return newPayments(ctx, s, open) },
		func() (provider, error) {
			c, err := newCRM(ctx, s, open)
			s.crm = c
			return c, err
		},
		func() (provider, error) { return newAccounting(ctx, s, open) },
		func() (provider, error) { return newMail(ctx, s, open) },
	} {
		p, e := mk()
		if e != nil {
			return fail(e)
		}
		s.providers = append(s.providers, p)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lc net.ListenConfig
	s.ln, err = lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fail(fmt.Errorf("sandbox: listen on %s: %w (pick another address or leave it empty for a free port)", addr, err))
	}
	s.base = "http://" + s.ln.Addr().String()
	mux := http.NewServeMux()
	for _, p := range s.providers {
		p.routes(mux, "/"+p.name())
	}
	s.adminRoutes(mux)
	registerToken(s.base, s.token)
	s.srv = &http.Server{Handler: loopback.Guard(s.guard(mux)), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	go func() { s.served <- s.srv.Serve(s.ln) }()
	s.log.Info("sandbox providers started", "url", s.base, "dir", opts.Dir)
	return s, nil
}

// BaseURL is the root of the listener, such as http://127.0.0.1:40123.
func (s *Sandbox) BaseURL() string { return s.base }

// URLs returns each provider's base URL and the admin API's.
func (s *Sandbox) URLs() URLs { return URLsFor(s.base) }

// URLsFor returns the provider URLs of a sandbox served at baseURL (for a
// sandbox running in another process).
func URLsFor(baseURL string) URLs {
	b := strings.TrimRight(baseURL, "/")
	return URLs{Orders: b + "/" + Orders, Payments: b + "/" + Payments, CRM: b + "/" + CRM,
		Accounting: b + "/" + Accounting, Mail: b + "/" + Mail, Admin: b + "/admin"}
}

// Client returns an admin client of this sandbox, with its token.
func (s *Sandbox) Client() *Client { return NewClient(s.base, nil).WithToken(s.token) }

// Token returns the admin API's token. Keep it out of logs.
func (s *Sandbox) Token() string { return s.token }

// Close stops serving, waking any delayed request, and closes the stores.
func (s *Sandbox) Close() error {
	var err error
	s.closeOnce.Do(func() {
		forgetToken(s.base)
		close(s.closing)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if e := s.srv.Shutdown(ctx); e != nil {
			err = errors.Join(err, fmt.Errorf("sandbox: shut down the HTTP server: %w", e))
			_ = s.srv.Close()
		}
		for _, p := range s.providers {
			if e := p.close(); e != nil {
				err = errors.Join(err, fmt.Errorf("sandbox: close the %s store: %w", p.name(), e))
			}
		}
	})
	return err
}

// Serve runs a sandbox in the foreground until ctx is cancelled, then closes
// it. ready, when not nil, is called once the providers accept requests (to
// print their addresses).
func Serve(ctx context.Context, opts Options, ready func(*Sandbox)) error {
	s, err := Start(ctx, opts)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(s)
	}
	select {
	case <-ctx.Done():
	case err := <-s.served:
		_ = s.Close()
		return fmt.Errorf("sandbox: server stopped: %w", err)
	}
	return s.Close()
}

// effects returns the effects of one provider, or all when name is "".
func (s *Sandbox) effects(ctx context.Context, name string) ([]Effect, error) {
	out := []Effect{}
	found := false
	for _, p := range s.providers {
		if name != "" && p.name() != name {
			continue
		}
		found = true
		e, err := p.effects(ctx)
		if err != nil {
			return nil, fmt.Errorf("read %s effects: %w", p.name(), err)
		}
		out = append(out, e...)
	}
	if !found {
		return nil, fmt.Errorf("unknown provider %q: use one of %s", name, strings.Join(Providers, ", "))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// ---- one request ----

// exchange is one request to one operation with the fault it suffers.
type exchange struct {
	s     *Sandbox
	w     http.ResponseWriter
	r     *http.Request
	op    string
	fault FaultSpec
	has   bool
	// ctx is the request's context without its cancellation: work goes on
	// when the caller hangs up, as it does at a real provider.
	ctx context.Context
	// received is when the request arrived (SlowCommit counts from it).
	received time.Time
}

// begin counts the request, takes its fault and answers the faults that
// need no processing (503, 429, lookup_unavailable). ok is false when the
// request has been answered.
func (s *Sandbox) begin(w http.ResponseWriter, r *http.Request, op string) (x *exchange, ok bool) {
	f, has := s.faults.enter(op)
	x = &exchange{s: s, w: w, r: r, op: op, fault: f, has: has, ctx: context.WithoutCancel(r.Context()), received: time.Now()}
	if has {
		s.log.Debug("sandbox fault", "op", op, "fault", f.Fault)
	}
	switch {
	case x.is(HTTP503):
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the provider is unavailable (injected fault): retry later")
		return x, false
	case x.is(LookupUnavailable):
		writeError(w, http.StatusServiceUnavailable, "lookup_unavailable", "lookup is unavailable (injected fault): retry later")
		return x, false
	case x.is(HTTP429):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limited", "too many requests (injected fault): retry after 1s")
		return x, false
	}
	return x, true
}

func (x *exchange) is(k FaultKind) bool { return x.has && x.fault.Fault == k }

// pause applies a delay or slow commit fault and calls the test hook.
func (x *exchange) pause() {
	var d time.Duration
	switch {
	case x.is(Delay):
		d = x.fault.Delay
	case x.is(SlowCommit):
		d = time.Until(x.received.Add(x.fault.Delay))
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-x.s.closing:
			t.Stop()
		}
	}
	if x.s.opts.Hook != nil {
		x.s.opts.Hook(x.ctx, x.op)
	}
}

// hidden reports whether a VisibilityLag fault hides an effect committed at
// committed from this lookup.
func (x *exchange) hidden(committed time.Time) bool {
	return x.is(VisibilityLag) && time.Since(committed) < x.fault.Delay
}

// drop closes the connection without an answer.
func (x *exchange) drop() {
	x.s.log.Debug("sandbox dropped the response", "op", x.op, "fault", x.fault.Fault)
	if hj, ok := x.w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// rejection returns the status and body of a Reject fault.
func (x *exchange) rejection() (int, []byte) {
	return x.fault.Status, errorBody(x.fault.Code, x.fault.Message)
}

// ---- HTTP helpers ----

type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, message: fmt.Sprintf(format, args...)}
}

func errorBody(code, message string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
	return b
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeRaw(w, status, errorBody(code, message))
}

func writeAPIError(w http.ResponseWriter, e *apiError) { writeError(w, e.status, e.code, e.message) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "encode the answer: "+err.Error())
		return
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func internal(w http.ResponseWriter, log *slog.Logger, op string, err error) {
	log.Error("sandbox internal error", "op", op, "err", err)
	writeError(w, http.StatusInternalServerError, "internal", err.Error())
}

// readJSON reads a JSON object body into v and returns its canonical form
// (keys sorted, numbers exact) for request hashing.
func readJSON(r *http.Request, v any) ([]byte, *apiError) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<16))
	if err != nil {
		return nil, badRequest("unreadable_body", "read the request body: %v", err)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var generic map[string]any
	if err := d.Decode(&generic); err != nil || generic == nil {
		return nil, badRequest("invalid_json", "the body must be one JSON object")
	}
	canon, _ := json.Marshal(generic)
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return nil, badRequest("invalid_request", "the body does not match this endpoint: %v (amounts are integers of minor units)", err)
	}
	return canon, nil
}

func requestHash(r *http.Request, canon []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", r.Method, r.URL.Path)
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil))
}

func validCurrency(c string) bool {
	if len(c) != 3 {
		return false
	}
	for _, r := range c {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return true
}

func checkMoney(amount int64, currency string) *apiError {
	if amount <= 0 {
		return badRequest("invalid_amount", "amount_minor must be a positive integer of minor units, got %d", amount)
	}
	if !validCurrency(currency) {
		return badRequest("invalid_currency", "currency must be an ISO 4217 code such as EUR, got %q", currency)
	}
	return nil
}

func newID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func now() int64 { return time.Now().UTC().UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// ---- stores ----

// openDB opens one provider's store: a file in dir, or memory when dir is
// empty. One connection serialises access, which SQLite does anyway.
func openDB(ctx context.Context, dir, name string) (*sql.DB, error) {
	dsn := "file::memory:?_pragma=foreign_keys(1)"
	if dir != "" {
		path := filepath.Join(dir, name+".db")
		if err := privfile.Ensure(path); err != nil {
			return nil, fmt.Errorf("sandbox: the %s store: %w", name, err)
		}
		dsn = "file:" + path + "?_pragma=foreign_keys(1)&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sandbox: open the %s store: %w", name, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sandbox: open the %s store: %w", name, err)
	}
	return db, nil
}

// migrate runs a provider's schema statements.
func migrate(ctx context.Context, db *sql.DB, name string, stmts ...string) error {
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sandbox: create the %s schema: %w", name, err)
		}
	}
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// writeRejection answers the Reject fault.
func (x *exchange) writeRejection() {
	status, body := x.rejection()
	writeRaw(x.w, status, body)
}

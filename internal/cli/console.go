package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/consoleui"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// `starter console`: the operator's inbox in a browser on the operator's own
// machine. Security model (README, "Deciding from the console"):
//
//   - it listens on a loopback address only (--listen is refused otherwise);
//   - each start makes a fresh random token, printed as the URL to open, in
//     its fragment (#token=...), which the browser never sends anywhere; the
//     page posts it once to /api/session and gets the session secret, which
//     it keeps in the console origin's localStorage and sends in the
//     X-Agentsaga-Session header of every API call; the token is then spent;
//   - no cookie at all: cookies are not scoped by port, so a cookie would
//     reach any other server on the same loopback name (issue 35). Web
//     storage is scoped by origin, port included: a page or process on
//     another local port never gets the secret, and a request from a page
//     cannot carry a custom header to another origin without a CORS
//     preflight, which the console refuses;
//   - every request must name the console's own Host (DNS rebinding) and,
//     when it has an Origin, the console's own origin; the page shell and its
//     static files hold nothing secret; every /api/ call needs the session;
//   - POSTs also need the console's origin and JSON;
//   - the page is the embedded consoleui assets only, under a strict
//     Content-Security-Policy (no inline script or style, nothing from
//     elsewhere, no framing);
//   - decisions are signed here, with the --key the console was started
//     with, through the same code as starter approve/resolve
//     (approveShown, resolveShown); the key never reaches the browser.

// Limits of the console's input; each error names the field and its limit.
const (
	// maxConsoleBody bounds a POST body (as a decision payload).
	maxConsoleBody = workflows.MaxDecisionBytes
	// maxConsoleWorkflowID bounds a decision's workflow_id.
	maxConsoleWorkflowID = 512
	// maxDecided bounds the decided questions the console keeps showing,
	// and maxSeen the questions it remembers having shown.
	maxDecided = 200
	maxSeen    = 1000
	// defaultConsoleAddr is where the console listens by default.
	defaultConsoleAddr = "127.0.0.1:8235"
	// sessionHeader carries the page's session secret on every API call.
	sessionHeader = "X-Agentsaga-Session"
)

// consoleCSP is the page's Content-Security-Policy: its own script, style
// and API only; no inline script or style, no plugin, no frame, no form
// posted anywhere, no base URL.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func cmdConsole(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("console", flag.ContinueOnError)
	var c conn
	c.register(fs)
	var d decider
	d.register(fs)
	var l ledgerFlags
	l.register(fs)
	claimFor := fs.Duration("claim-for", defaultClaimFor, fmt.Sprintf("how long a claim on a question lasts unless claimed again (at most %s; claims need the ledger)", ledger.MaxClaimFor))
	listen := fs.String("listen", defaultConsoleAddr, "where the page is served: a loopback address only (127.0.0.1, [::1] or localhost; port 0 picks a free one)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("console: takes no arguments (see starter console --help)")
	}
	if *claimFor <= 0 || *claimFor > ledger.MaxClaimFor {
		return usageErr("console: --claim-for %s is out of range: give more than 0 and at most %s", *claimFor, ledger.MaxClaimFor)
	}
	addr, err := loopbackListen(*listen)
	if err != nil {
		return err
	}
	// The decided history comes from the ledger's audit trail when the
	// console can read it (durable, across restarts); else from what this
	// console saw decided.
	var store ledger.Store
	if dsn, _ := config.LedgerDSN(l.dsn); dsn != "" {
		if store, err = l.open(ctx); err != nil {
			return err
		}
		defer store.Close()
	}
	key, sc, closeFn, err := d.connect(ctx, &c, "console")
	if err != nil {
		return err
	}
	defer closeFn()
	if key == nil {
		if err := refuseUnsigned(ctx, sc); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w (give another --listen, such as 127.0.0.1:0)", addr, err)
	}
	var may []string
	if key != nil {
		may = key.May
	}
	srv, err := newConsole(sc, deciderName(key, d.by), key != nil, may, d.timeout, c.link, ln.Addr().String())
	if err != nil {
		_ = ln.Close()
		return err
	}
	srv.ledger, srv.claimFor = store, *claimFor
	srv.prime() // list while the operator opens the link
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	url := srv.origin + "/#token=" + srv.token
	if c.json {
		_ = printJSONCompact(out, map[string]any{"url": url, "operator": srv.operator, "verified": srv.verified})
	} else {
		how := "signs with the operator key " + d.key
		if key == nil {
			how = "sends the typed name, recorded as unverified"
		}
		fmt.Fprintf(out, "console for %s (%s)\nopen %s\n(the link works once, in one browser; Ctrl-C stops the console)\n", safe(srv.operator), safe(how), url)
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return nil
}

// refuseUnsigned refuses a --by console (no key) when the workers require
// signed decisions, as a waiting plan says (its published questions or its
// status); with no plan waiting nothing is known yet, and the first
// decision is refused by the worker instead.
func refuseUnsigned(ctx context.Context, sc *sagaclient.Client) error {
	lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	list, err := sc.Waiting(lctx)
	if err != nil {
		return nil // the page says what it cannot list
	}
	for _, e := range list {
		if e.SignedDecisions {
			return usageErr("console: the workers accept only signed decisions (they have an operators file): start the console with --key FILE (starter operator keygen), not --by")
		}
		if e.StatusError == "" {
			return nil
		}
	}
	return nil
}

// loopbackListen checks a --listen address: host and port, the host a
// loopback IP or localhost (served on 127.0.0.1).
func loopbackListen(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || len(listen) > 300 {
		return "", usageErr("console: --listen %q is not HOST:PORT (such as %s; at most 300 bytes)", clipText(listen, 80), defaultConsoleAddr)
	}
	if strings.EqualFold(host, "localhost") {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", usageErr("console: --listen %q is not a loopback address: the console serves this machine only (127.0.0.1, [::1] or localhost)", clipText(listen, 80))
	}
	return net.JoinHostPort(ip.String(), port), nil
}

func clipText(s string, n int) string {
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}

// console is the console's HTTP handler and what it remembers.
type console struct {
	sc       *sagaclient.Client
	operator string
	verified bool
	may      map[string]bool // the rights the operator's key was made for
	ledger   ledger.Store    // the audit trail, for the decided history, and the claims; nil: what this console saw, no claims
	claimFor time.Duration   // how long a claim lasts
	timeout  time.Duration
	link     func(string) string
	origin   string          // http://host:port, as served
	hosts    map[string]bool // Host headers that name the console
	static   http.Handler

	// The latest listing of the open questions (see listing).
	listMu    sync.Mutex
	listed    *waitingList  // nil until the first listing ends
	listing   chan struct{} // closed when the listing under way ends; nil when none is
	listStale bool          // a decision here since the latest listing

	mu      sync.Mutex
	token   string                  // the one-time token of the printed URL; "" once spent
	session string                  // the page's session secret, set when the token is spent
	seen    map[string]seenQuestion // questions shown, by workflow and question id
	order   []string                // seen keys, oldest first
	decided []consoleItem           // newest first
}

// seenQuestion is a question the console showed, with its card as shown.
type seenQuestion struct {
	item consoleItem
	done bool
	// asked counts the polls that read its plan's status after it left the
	// listing and found no decision (see maxSettleReads).
	asked int
}

// maxSettleReads bounds the polls that look for the decision of a question
// that left the listing: a plan terminated, or an index that is gone, has
// none, and is not asked about for ever.
const maxSettleReads = 3

func newConsole(sc *sagaclient.Client, operator string, verified bool, may []string, timeout time.Duration, link func(string) string, addr string) (*console, error) {
	tok, err := randomToken()
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("console: address %s: %w", addr, err)
	}
	hosts := map[string]bool{addr: true}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		hosts["localhost:"+port] = true
	}
	return &console{
		sc: sc, operator: operator, verified: verified, may: rightsOf(may), timeout: timeout, link: link,
		claimFor: defaultClaimFor, origin: "http://" + addr, hosts: hosts, token: tok, seen: map[string]seenQuestion{},
		static: http.StripPrefix("/static/", http.FileServerFS(consoleui.Static())),
	}, nil
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("console: make a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ServeHTTP checks every request (Host, Origin, session) before it routes it.
func (c *console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if err := c.checkOrigin(r); err != nil {
		consoleError(w, http.StatusForbidden, err.Error())
		return
	}
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch {
	case get && (r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, "/q/")):
		// The page shell: nothing secret in it; its script asks for the
		// session (and a deep link /q/{workflow}/{question} is read by it).
		c.page(w)
	case r.URL.Path == "/favicon.ico":
		w.WriteHeader(http.StatusNoContent) // no icon: nothing to fetch from anywhere
	case get && strings.HasPrefix(r.URL.Path, "/static/"):
		c.static.ServeHTTP(w, r)
	case r.URL.Path == "/api/session" && r.Method == http.MethodPost:
		c.exchange(w, r)
	case !c.hasSession(r):
		consoleError(w, http.StatusForbidden, "no console session: open the link `starter console` printed (it works once; start the console again for a new one)")
	case r.URL.Path == "/api/questions" && r.Method == http.MethodGet:
		c.questions(w, r)
	case r.URL.Path == "/api/decide" && r.Method == http.MethodPost:
		c.decide(w, r)
	case r.URL.Path == "/api/claim" && r.Method == http.MethodPost:
		c.claimOrRelease(w, r, true)
	case r.URL.Path == "/api/release" && r.Method == http.MethodPost:
		c.claimOrRelease(w, r, false)
	default:
		consoleError(w, http.StatusNotFound, "no such page")
	}
}

// checkOrigin refuses a request that does not name the console: a Host
// other than the address it serves (a page whose name was rebound to
// 127.0.0.1 sends its own name), an Origin other than the console's, a
// cross-site fetch; and, for a POST, one without Origin, without JSON or
// without the CSRF header (checked with the session in decide).
func (c *console) checkOrigin(r *http.Request) error {
	if !c.hosts[r.Host] {
		return fmt.Errorf("refused: the Host header %q is not this console's address %s; open the link the console printed", clipText(r.Host, 100), strings.TrimPrefix(c.origin, "http://"))
	}
	origin := r.Header.Get("Origin")
	if origin != "" && origin != "http://"+r.Host {
		return fmt.Errorf("refused: a request from origin %q; the console answers only its own page", clipText(origin, 100))
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("refused: a %s request; the console answers only its own page", clipText(site, 40))
	}
	if r.Method == http.MethodPost {
		if origin == "" {
			return errors.New("refused: a POST without Origin; decide from the console's page")
		}
		if mt := strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0]); !strings.EqualFold(mt, "application/json") {
			return errors.New("refused: a POST that is not application/json")
		}
	} else if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return fmt.Errorf("refused: method %s", clipText(r.Method, 20))
	}
	return nil
}

// maxSessionBody bounds the body of POST /api/session.
const maxSessionBody = 1 << 10

// exchange spends the one-time token (POST /api/session, {"token": ...})
// for the page's session secret, answered in the body: the page keeps it
// in its origin's storage, never in a cookie.
func (c *console) exchange(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Token string `json:"token"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSessionBody))
	if err != nil || json.Unmarshal(raw, &body) != nil {
		consoleJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("the session request is not {\"token\": ...} within %d bytes", maxSessionBody), "field": "token"})
		return
	}
	got := body.Token
	c.mu.Lock()
	ok := c.token != "" && len(got) == len(c.token) && subtle.ConstantTimeCompare([]byte(got), []byte(c.token)) == 1
	if ok {
		c.token = ""
	}
	c.mu.Unlock()
	if !ok {
		consoleError(w, http.StatusForbidden, "this console link was used already or is not this console's: start `starter console` again for a new one")
		return
	}
	session, err := randomToken()
	if err != nil {
		consoleError(w, http.StatusInternalServerError, err.Error())
		return
	}
	c.mu.Lock()
	c.session = session
	c.mu.Unlock()
	consoleJSON(w, http.StatusOK, map[string]any{"session": session, "operator": c.operator, "verified": c.verified})
}

// hasSession reports whether r carries the page's session secret in
// sessionHeader. Cookies are never read.
func (c *console) hasSession(r *http.Request) bool {
	got := r.Header.Get(sessionHeader)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session != "" && len(got) == len(c.session) && subtle.ConstantTimeCompare([]byte(got), []byte(c.session)) == 1
}

func (c *console) page(w http.ResponseWriter) {
	c.mu.Lock()
	data := consoleui.PageData{Operator: c.operator, Verified: c.verified}
	c.mu.Unlock()
	var buf bytes.Buffer
	if err := consoleui.Page.Execute(&buf, data); err != nil {
		consoleError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

func consoleError(w http.ResponseWriter, code int, msg string) {
	consoleJSON(w, code, map[string]string{"error": msg})
}

func consoleJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"could not encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// consoleItem is one question as the page shows it.
type consoleItem struct {
	WorkflowID string    `json:"workflow_id"`
	QuestionID string    `json:"question_id"`
	Kind       string    `json:"kind"`
	Step       int       `json:"step"`
	Tool       string    `json:"tool"`
	System     string    `json:"system,omitempty"`
	Amount     string    `json:"amount,omitempty"`
	State      string    `json:"state"`
	OpenedAt   time.Time `json:"opened_at"`
	Age        string    `json:"age"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	Expires    string    `json:"expires,omitempty"`
	Answers    []string  `json:"answers"`
	Clash      bool      `json:"clash"`
	Key        string    `json:"key"`
	Object     string    `json:"object,omitempty"`
	Requester  string    `json:"requester,omitempty"`
	// AmountMinor and Currency are the card's raw amount (search, sort).
	AmountMinor int64  `json:"amount_minor,omitempty"`
	Currency    string `json:"currency,omitempty"`
	// Needs is the right deciding it takes (approve or resolve); MayDecide
	// whether this console's operator holds it. The page shows buttons
	// only when they do.
	Needs     string `json:"needs"`
	MayDecide bool   `json:"may_decide"`
	// Unconfirmed says why the question is shown without buttons although
	// the operator holds the right: its plan's status could not be read,
	// so only the plan's index vouches for it.
	Unconfirmed string           `json:"unconfirmed,omitempty"`
	Lines       []cardLine       `json:"lines"`
	CardDigest  string           `json:"card_digest"`
	UI          string           `json:"ui"`
	Decision    *consoleDecision `json:"decision,omitempty"`
	// Claim is who works the question (a live claim), if anyone.
	Claim *consoleClaim `json:"claim,omitempty"`
}

// consoleDecision is the decision of a decided question.
type consoleDecision struct {
	By       string `json:"by"`
	Verified bool   `json:"verified"`
	At       string `json:"at"`
	Verdict  string `json:"verdict"`
	Note     string `json:"note,omitempty"`
	CardSeen string `json:"card_seen"`
}

// questions answers the page's poll: the open questions, oldest first, and
// the questions decided since the console started, newest first.
func (c *console) questions(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	at := now()
	wl, err := c.waiting(ctx)
	list := wl.list
	if err == nil {
		err = wl.err
	}
	resp := struct {
		Now string `json:"now"`
		// Open is one page of the open questions that match the search;
		// Total how many match, All how many are open, Page/Pages/Size
		// the paging.
		Open     []consoleItem       `json:"open"`
		Total    int                 `json:"total"`
		All      int                 `json:"all"`
		Page     int                 `json:"page"`
		Pages    int                 `json:"pages"`
		Size     int                 `json:"size"`
		Facets   map[string][]string `json:"facets"`
		Operator string              `json:"operator"`
		May      []string            `json:"may"`
		Decided  []consoleItem       `json:"decided"`
		// DecidedFrom says where Decided comes from: ledger (the audit
		// trail, durable) or console (what this console saw decided).
		DecidedFrom string `json:"decided_from"`
		// ListedAt is when the open questions were listed (see
		// listFresh); the page's own questions are read as it is served.
		ListedAt string `json:"listed_at,omitempty"`
		Error    string `json:"error,omitempty"`
	}{Now: at.UTC().Format(time.RFC3339), Open: []consoleItem{}}
	if !wl.at.IsZero() {
		resp.ListedAt = wl.at.UTC().Format(time.RFC3339)
	}
	if err != nil {
		resp.Error = "could not list the plans waiting for a person: " + err.Error()
	}
	open := map[string]bool{}
	var problems []string
	for _, wt := range list {
		if wt.StatusError != "" {
			problems = append(problems, fmt.Sprintf("%s: %s", wt.WorkflowID, wt.StatusError))
		}
		for _, q := range wt.Questions {
			it := c.item(wt, q, at)
			resp.Open = append(resp.Open, it)
			open[it.WorkflowID+"\x00"+it.QuestionID] = true
		}
	}
	sort.SliceStable(resp.Open, func(i, j int) bool { return resp.Open[i].OpenedAt.Before(resp.Open[j].OpenedAt) })
	all := resp.Open
	f, ferr := parseFind(r.URL.Query())
	if ferr != nil {
		consoleJSON(w, http.StatusBadRequest, map[string]string{"error": ferr.Error(), "field": ferr.(*fieldError).field})
		return
	}
	var gone []string
	resp.Open, resp.Total, resp.Page, gone = c.pageOf(ctx, all, f)
	problems = append(problems, gone...)
	if claims, err := c.claims(ctx); err != nil {
		problems = append(problems, "claims: "+err.Error())
	} else if claims != nil {
		for i, it := range resp.Open {
			resp.Open[i].Claim = c.shownClaim(claims[it.WorkflowID+"\x00"+it.QuestionID])
		}
	}
	resp.Size, resp.Pages = f.size, max(1, (resp.Total+f.size-1)/f.size)
	resp.All, resp.Facets = len(all), facetsOf(all)
	resp.Operator, resp.May = c.operator, c.rights()
	if len(problems) > 0 && resp.Error == "" {
		resp.Error = "status unavailable for " + strings.Join(problems, "; ")
	}
	c.remember(resp.Open) // the page shown: what an operator may see decided in place
	c.settle(ctx, open)
	if c.ledger != nil {
		dq, err := parseDecidedQuery(r.URL.Query(), at)
		if err != nil {
			consoleJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "field": err.(*fieldError).field})
			return
		}
		recs, err := c.ledger.DecisionLog(ctx, dq)
		if err != nil {
			resp.Error = "could not read the decided questions from the ledger: " + err.Error()
		}
		resp.Decided, resp.DecidedFrom = decidedItems(recs, c.link), "ledger"
	} else {
		c.mu.Lock()
		resp.Decided, resp.DecidedFrom = append([]consoleItem{}, c.decided...), "console"
		c.mu.Unlock()
	}
	consoleJSON(w, http.StatusOK, resp)
}

// listFresh is how long a listing of the open questions answers the
// page's polls and searches alone. An older one still answers (visibility
// lags the plans anyway) while the next is made in the background; only
// the first request waits for one. Listing 10,000 questions takes the
// server about two seconds: this keeps a search from paying it.
const listFresh = 2 * time.Second

// waitingList is one listing of the plans waiting for a person.
type waitingList struct {
	list []sagaclient.Waiting
	err  error
	at   time.Time // when it was asked for
}

// waiting returns the latest listing of the open questions, starting a new
// one when it is older than listFresh or a decision was made here since;
// it waits only when there is none yet.
func (c *console) waiting(ctx context.Context) (waitingList, error) {
	c.listMu.Lock()
	last, done := c.listed, c.listing
	if done == nil && (last == nil || c.listStale || now().Sub(last.at) > listFresh) {
		done = make(chan struct{})
		c.listing, c.listStale = done, false
		go c.list(done)
	}
	c.listMu.Unlock()
	if last != nil {
		return *last, nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return waitingList{}, fmt.Errorf("the first listing of the open questions is not done: %w", ctx.Err())
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	return *c.listed, nil
}

// list makes a listing and closes done when it is kept.
func (c *console) list(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	at := now()
	l, err := c.sc.Waiting(ctx)
	c.listMu.Lock()
	if err != nil && c.listed != nil {
		l = c.listed.list // a failed listing says so, and keeps what the last one found
	}
	c.listed, c.listing = &waitingList{list: l, err: err, at: at}, nil
	c.listMu.Unlock()
	close(done)
}

// prime starts the first listing, so the page's first poll finds it done
// or under way.
func (c *console) prime() {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	if c.listed == nil && c.listing == nil {
		c.listing = make(chan struct{})
		go c.list(c.listing)
	}
}

// relist marks the listing stale: the next poll starts a new one.
func (c *console) relist() {
	c.listMu.Lock()
	c.listStale = true
	c.listMu.Unlock()
}

// item words question q of the waiting plan wt for the page, from its
// index entry: the card's short fields (complete adds the whole card for
// the page shown).
func (c *console) item(wt sagaclient.Waiting, q workflows.QuestionIndex, at time.Time) consoleItem {
	// The index is a memo any client starting a workflow can set: its
	// text is masked and bounded as a card's is before it is shown.
	shown := func(s string) string { return clipText(redact.String(s), workflows.MaxCardLineLen) }
	q.Key, q.Tool, q.System, q.Object, q.Amount = shown(q.Key), shown(q.Tool), shown(q.System), shown(q.Object), shown(q.Amount)
	q.RequestedBy, q.Reason, q.Currency, q.Kind = shown(q.RequestedBy), shown(q.Reason), shown(q.Currency), shown(q.Kind)
	q.ID = clipText(q.ID, workflows.MaxQuestionIDLen)
	if len(q.Answers) > maxIndexAnswers {
		q.Answers = q.Answers[:maxIndexAnswers]
	}
	q.Answers = slices.Clone(q.Answers)
	for i, a := range q.Answers {
		q.Answers[i] = shown(a)
	}
	it := consoleItem{
		WorkflowID: wt.WorkflowID, QuestionID: q.ID, Kind: q.Kind, Step: q.Step, Tool: q.Tool, System: q.System,
		Amount: q.Amount, State: string(wt.State), OpenedAt: q.OpenedAt, Age: age(q.OpenedAt, at), ExpiresAt: q.ExpiresAt,
		Answers: q.Answers, Clash: q.Clash, CardDigest: q.CardDigest, UI: c.link(wt.WorkflowID),
		Key: q.Key, Object: q.Object, Requester: q.RequestedBy, AmountMinor: q.AmountMinor, Currency: q.Currency,
		Needs: operators.ActionResolve,
	}
	for _, l := range [][2]string{{"object", q.Object}, {"amount", q.Amount}, {"reason", q.Reason}, {"requested by", q.RequestedBy}, {"key", q.Key}} {
		if l[1] != "" {
			it.Lines = append(it.Lines, cardLine{l[0], l[1]})
		}
	}
	if q.Kind == workflows.QuestionApproval {
		it.Needs = operators.ActionApprove
	}
	it.MayDecide = c.may[it.Needs]
	if it.Answers == nil {
		it.Answers = []string{}
	}
	if !q.ExpiresAt.IsZero() {
		if left := q.ExpiresAt.Sub(at).Round(time.Second); left > 0 {
			it.Expires = fmt.Sprintf("expires in %s (then rejected and compensated)", left)
		} else {
			it.Expires = "expired"
		}
	}
	return it
}

// maxIndexAnswers bounds the answers an index entry shows (a question has
// at most a handful; the index is a memo any client could set).
const maxIndexAnswers = 8

// maxFillPages bounds how many pages' worth of further matches pageOf reads
// to fill a page whose questions their plans' status does not hold.
const maxFillPages = 3

// pageOf is find's page of items, completed: each question read whole from
// its plan's status. A listed question the status does not hold (closed
// since the listing, or an index entry no plan wrote) is left out, and so,
// in the "questions I may decide" view, is one whose status cannot be read;
// the page is filled from the next matches, reading at most maxFillPages
// more pages' worth, so such entries cannot push real questions off it.
func (c *console) pageOf(ctx context.Context, items []consoleItem, f findFilter) (page []consoleItem, total, n int, problems []string) {
	hits := sorted(items, f)
	first, lo := pageIn(hits, f)
	total, n = len(hits), lo/f.size+1
	if len(first) == 0 {
		return first, total, n, nil
	}
	next := lo + len(first)
	read := func(batch []consoleItem) {
		done, why := c.complete(ctx, batch)
		problems = append(problems, why...)
		for _, it := range done {
			// "Questions I may decide" holds what can be decided now:
			// not a question only its plan's index vouches for.
			if !f.mine || it.Unconfirmed == "" {
				page = append(page, it)
			}
		}
	}
	read(first)
	for extra := 0; len(page) < len(first) && next < len(hits) && extra < maxFillPages; extra++ {
		batch := hits[next:min(next+f.size, len(hits))]
		next += len(batch)
		read(batch)
	}
	if page == nil {
		page = []consoleItem{}
	}
	if len(page) > f.size {
		page = page[:f.size]
	}
	return page, total, n, problems
}

// maxStatusReads bounds the status queries complete runs at once.
const maxStatusReads = 8

// complete gives the questions of the page shown their whole cards, from
// their plans' status (one query per plan on the page, at most
// maxStatusReads at once: a page holds at most maxPageSize questions). It
// leaves out a question its plan's status shows closed since the listing,
// and returns what it could not read (such a question keeps its index
// lines).
func (c *console) complete(ctx context.Context, page []consoleItem) ([]consoleItem, []string) {
	type read struct {
		st  workflows.Status
		err error
	}
	var ids []string
	reads := map[string]*read{}
	for _, it := range page {
		if _, ok := reads[it.WorkflowID]; !ok {
			reads[it.WorkflowID] = nil
			ids = append(ids, it.WorkflowID)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxStatusReads)
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			st, err := c.sc.Status(ctx, id)
			mu.Lock()
			reads[id] = &read{st, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	var problems []string
	said := map[string]bool{}
	out := page[:0:0]
	for _, it := range page {
		rd := reads[it.WorkflowID]
		if rd.err != nil {
			if !said[it.WorkflowID] {
				problems = append(problems, fmt.Sprintf("%s: %s", it.WorkflowID, rd.err))
				said[it.WorkflowID] = true
			}
			// Only the plan's index is known (a memo any client
			// starting a workflow could set): no buttons until its
			// status confirms the question.
			if it.MayDecide {
				it.MayDecide, it.Unconfirmed = false, "its plan's status could not be read, so this card is only the plan's index: no buttons until it can be"
			}
			out = append(out, it)
			continue
		}
		for _, q := range rd.st.Questions {
			if q.ID == it.QuestionID {
				it.Lines, it.CardDigest = cardLines(q.Card), q.CardDigest
				if it.CardDigest == "" { // opened before the workflow worked it out
					it.CardDigest = workflows.CardDigest(q.Card)
				}
				out = append(out, it)
			}
		}
	}
	return out, problems
}

// cardLine is one labelled line of a card, as the page shows it.
type cardLine struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// cardLines are the card's lines as every printer words them (Card.Lines).
func cardLines(c workflows.Card) []cardLine {
	var out []cardLine
	for _, l := range c.Lines() {
		out = append(out, cardLine{l.Label, l.Value})
	}
	return out
}

// remember keeps the questions shown, so a question that closes stays
// visible with its decision.
func (c *console) remember(items []consoleItem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range items {
		k := it.WorkflowID + "\x00" + it.QuestionID
		if _, ok := c.seen[k]; ok {
			continue
		}
		c.seen[k] = seenQuestion{item: it}
		c.order = append(c.order, k)
		if len(c.order) > maxSeen {
			delete(c.seen, c.order[0])
			c.order = c.order[1:]
		}
	}
}

// settle looks up the decisions of questions shown that are no longer open
// (one status query per plan), and keeps them as decided.
func (c *console) settle(ctx context.Context, open map[string]bool) {
	c.mu.Lock()
	byPlan := map[string][]string{}
	for _, k := range c.order {
		s := c.seen[k]
		if !s.done && !open[k] && s.asked < maxSettleReads {
			byPlan[s.item.WorkflowID] = append(byPlan[s.item.WorkflowID], k)
		}
	}
	c.mu.Unlock()
	for id, keys := range byPlan {
		st, err := c.sc.Status(ctx, id)
		c.mu.Lock()
		for _, k := range keys {
			s, ok := c.seen[k]
			if !ok {
				continue
			}
			s.asked++
			c.seen[k] = s
			if err != nil {
				continue // asked again on the next poll, up to maxSettleReads
			}
			if d, ok := decisionOf(st, s.item.QuestionID); ok {
				s.done = true
				s.item.Decision = describeDecision(d, s.item.CardDigest)
				c.seen[k] = s
				c.decided = append([]consoleItem{s.item}, c.decided...)
				if len(c.decided) > maxDecided {
					c.decided = c.decided[:maxDecided]
				}
			}
		}
		c.mu.Unlock()
	}
}

// decisionOf finds the decision that closed question qid in st.
func decisionOf(st workflows.Status, qid string) (workflows.Decision, bool) {
	for _, s := range st.Steps {
		for _, d := range s.Decisions {
			if d.QuestionID == qid && d.Refused == "" {
				return d, true
			}
		}
	}
	return workflows.Decision{}, false
}

func describeDecision(d workflows.Decision, shownDigest string) *consoleDecision {
	verdict := string(d.Outcome)
	switch {
	case d.Kind == "expire":
		verdict = "expired"
	case d.Kind == workflows.SignalApprove && d.Approved && d.Override:
		verdict = "approved with override"
	case d.Kind == workflows.SignalApprove && d.Approved:
		verdict = "approved"
	case d.Kind == workflows.SignalApprove:
		verdict = "rejected"
	default:
		verdict = "resolved " + verdict
	}
	if d.ExternalID != "" {
		verdict += " (external id " + d.ExternalID + ")"
	}
	seen := "card digest " + d.CardDigest + " recorded with the decision"
	switch {
	case d.Kind == "expire":
		seen = "nobody decided: the question expired"
	case d.CardDigest == "":
		seen = "no card digest recorded (decided by a client that sends none)"
	case d.CardDigest == shownDigest:
		seen = "card digest " + d.CardDigest + " recorded with the decision: the card shown here"
	}
	return &consoleDecision{By: d.By, Verified: d.Verified, At: d.At.UTC().Format(time.RFC3339), Verdict: verdict, Note: d.Note, CardSeen: seen}
}

// decideRequest is the body of POST /api/decide.
type decideRequest struct {
	WorkflowID string `json:"workflow_id"`
	QuestionID string `json:"question_id"`
	// Action is approve, reject or override (approval questions), or
	// succeeded, failed or retry (outcome and reversal questions).
	Action     string `json:"action"`
	Reason     string `json:"reason"`
	ExternalID string `json:"external_id,omitempty"`
	// CardDigest is the digest of the card the page showed.
	CardDigest string `json:"card_digest"`
}

// fieldError is an input error naming its field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.msg }

func badField(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

// parseDecideRequest reads a decide body as strictly as a decision: at most
// maxConsoleBody bytes of plain JSON (UTF-8, no key twice, no unknown
// field), every field within its limit and named when it is not. The
// decision's own checks (workflows.CheckApprove/CheckResolve) run again on
// the decision built from it.
func parseDecideRequest(body []byte) (decideRequest, error) {
	var d decideRequest
	if len(body) > maxConsoleBody {
		return d, badField("body", "the request is %d bytes, the limit is %d", len(body), maxConsoleBody)
	}
	if err := plan.CheckJSON(body, maxConsoleBody); err != nil {
		return d, badField("body", "the request is not plain JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, badField("body", "the request does not fit: %s", clipText(err.Error(), 200))
	}
	if dec.More() {
		return d, badField("body", "the request holds more than one JSON value")
	}
	for _, f := range []struct {
		name, v  string
		limit    int
		required bool
	}{
		{"workflow_id", d.WorkflowID, maxConsoleWorkflowID, true},
		{"question_id", d.QuestionID, workflows.MaxQuestionIDLen, true},
		{"reason", d.Reason, workflows.MaxNoteLen, true},
		{"external_id", d.ExternalID, workflows.MaxExternalIDLen, false},
		{"card_digest", d.CardDigest, workflows.MaxCardDigestLen, true},
	} {
		switch {
		case f.required && strings.TrimSpace(f.v) == "":
			what := map[string]string{"reason": "say why you decide"}[f.name]
			if what == "" {
				what = "reload the page"
			}
			return d, badField(f.name, "%s is required (at most %d bytes): %s", f.name, f.limit, what)
		case len(f.v) > f.limit:
			return d, badField(f.name, "%s is %d bytes, the limit is %d", f.name, len(f.v), f.limit)
		}
	}
	if err := workflows.CheckCardDigest(d.CardDigest); err != nil {
		return d, badField("card_digest", "%v", err)
	}
	switch d.Action {
	case "approve", "reject", "override", string(workflows.OutcomeSucceeded), string(workflows.OutcomeFailed), string(workflows.OutcomeRetry):
	default:
		return d, badField("action", "action %q is not one of approve, reject, override, succeeded, failed, retry", clipText(d.Action, 40))
	}
	if d.ExternalID != "" && d.Action != string(workflows.OutcomeSucceeded) {
		return d, badField("external_id", "external_id goes only with succeeded")
	}
	return d, nil
}

// decide answers POST /api/decide: the question must still be open with the
// card the page showed; the decision goes through approveShown or
// resolveShown, as starter approve and resolve send it.
func (c *console) decide(w http.ResponseWriter, r *http.Request) {
	defer c.relist() // the next poll lists again, without the question decided
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxConsoleBody))
	if err != nil {
		consoleJSON(w, http.StatusRequestEntityTooLarge, map[string]string{"error": fmt.Sprintf("the request is over the limit of %d bytes", maxConsoleBody), "field": "body"})
		return
	}
	req, err := parseDecideRequest(body)
	if err != nil {
		field := ""
		var fe *fieldError
		if errors.As(err, &fe) {
			field = fe.field
		}
		consoleJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "field": field})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), c.timeout)
	defer cancel()
	st, q, ok, err := showQuestion(ctx, c.sc, nil, req.WorkflowID, 0, req.QuestionID)
	switch {
	case err != nil:
		consoleError(w, http.StatusBadGateway, err.Error())
		return
	case !ok:
		consoleError(w, http.StatusConflict, fmt.Sprintf("question %s of %s is not open any more (answered or expired): the list shows what happened", req.QuestionID, req.WorkflowID))
		return
	case workflows.CardDigest(q.Card) != req.CardDigest:
		consoleError(w, http.StatusConflict, fmt.Sprintf("the card of question %s changed since the page showed it: look at it again", q.ID))
		return
	}
	if needs := map[bool]string{true: operators.ActionApprove, false: operators.ActionResolve}[q.Kind == workflows.QuestionApproval]; !c.may[needs] {
		consoleError(w, http.StatusForbidden, fmt.Sprintf("refused: question %s needs the %s right and the key of %s was made for %s only; ask an operator who holds it", q.ID, needs, c.operator, strings.Join(c.rights(), ", ")))
		return
	}
	// A decision on a question another operator claims is made, and says
	// whose claim it overrides in its note (the audit trail keeps it).
	var held ledger.QuestionClaim
	if claims, err := c.claims(ctx); err != nil {
		consoleError(w, http.StatusBadGateway, "could not read the claims from the ledger: "+err.Error())
		return
	} else if claims != nil {
		held = claims[req.WorkflowID+"\x00"+req.QuestionID]
	}
	overrides := ""
	if n := overrideNote(held, c.operator); n != "" {
		if len(n)+1+len(req.Reason) > workflows.MaxNoteLen {
			consoleJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("reason is %d bytes and the note of the claim it overrides %d, the limit is %d together: shorten the reason", len(req.Reason), len(n)+1, workflows.MaxNoteLen), "field": "reason"})
			return
		}
		req.Reason, overrides = n+" "+req.Reason, held.By
	}
	// Signed with the key, By is the key's name (sagaclient sets it);
	// without one (the dev stack) the typed --by is sent, as approve sends
	// it.
	by := ""
	if !c.verified {
		by = c.operator
	}
	var res workflows.DecisionResult
	switch req.Action {
	case "approve", "reject", "override":
		if q.Kind != workflows.QuestionApproval {
			consoleJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("question %s asks for an outcome (%s), not an approval", q.ID, strings.Join(q.Answers, ", ")), "field": "action"})
			return
		}
		res, err = approveShown(ctx, c.sc, c.operator, req.WorkflowID, st, q, workflows.ApproveSignal{
			By: by, Approved: req.Action != "reject", Override: req.Action == "override", Reason: req.Reason})
	default:
		if q.Kind == workflows.QuestionApproval {
			consoleJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("question %s asks for approve or reject, not %s", q.ID, req.Action), "field": "action"})
			return
		}
		res, err = resolveShown(ctx, c.sc, c.operator, req.WorkflowID, st, q, workflows.ResolveSignal{
			By: by, Outcome: workflows.Outcome(req.Action), ExternalID: req.ExternalID, Note: req.Reason})
	}
	if err != nil {
		code := http.StatusBadGateway
		var ee *exitError
		if errors.As(err, &ee) {
			code = map[int]int{1: http.StatusConflict, 2: http.StatusBadRequest}[ee.code]
		}
		consoleError(w, code, err.Error())
		return
	}
	who := res.By + " (unverified: typed name)"
	if res.Verified {
		who = res.By + " (verified against the operators file)"
	}
	msg := fmt.Sprintf("%s: question %s decided by %s, card %s recorded", res.Message, res.QuestionID, who, req.CardDigest)
	if overrides != "" {
		msg += fmt.Sprintf("; it overrode the claim of %s (recorded)", overrides)
	}
	if !res.Applied {
		msg = "already applied, nothing happened twice: " + res.Message
	}
	if held.By != "" {
		// Answered: the claim has nothing left to hold (released only if
		// it is still the one read).
		if _, err := c.ledger.ReleaseQuestion(ctx, req.WorkflowID, req.QuestionID, held.By); err != nil {
			slog.WarnContext(ctx, "console: claim not released after the decision; it lapses", "question", req.QuestionID, "error", err)
		}
	}
	consoleJSON(w, http.StatusOK, map[string]any{"applied": res.Applied, "by": res.By, "verified": res.Verified, "message": msg, "card_digest": req.CardDigest, "overrode": overrides})
}

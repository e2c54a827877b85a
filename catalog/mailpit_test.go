package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// EnvTestMailpit names the HTTP root of a running Mailpit
// (github.com/axllent/mailpit) for TestMailpit*, such as
// http://127.0.0.1:58025; .ci/run starts one and sets it.
const envTestMailpit = "AGENTSAGA_TEST_MAILPIT_URL"

// mailpitURL returns the Mailpit to test against, or skips (fails under
// CI=true, where .ci/run must have started one).
func mailpitURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv(envTestMailpit)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set under CI=true: .ci/run starts Mailpit and sets it", envTestMailpit)
		}
		t.Skipf("%s is not set: start Mailpit (go install github.com/axllent/mailpit@v1.33.1; mailpit --max 0 --ignore-duplicate-ids) and set it to its HTTP root", envTestMailpit)
	}
	return strings.TrimRight(u, "/")
}

// mailpit reads Mailpit's own store through its API.
type mailpit struct {
	t    *testing.T
	root string
}

func (m mailpit) get(path string, q url.Values, out any) {
	m.t.Helper()
	u := m.root + path
	if q != nil {
		u += "?" + q.Encode()
	}
	resp, err := http.Get(u)
	if err != nil {
		m.t.Fatalf("ask Mailpit %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		m.t.Fatalf("Mailpit %s answered %d: %s", path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		m.t.Fatalf("Mailpit %s: %v", path, err)
	}
}

// total is the number of messages Mailpit holds (GET /api/v1/messages).
func (m mailpit) total() int {
	var v struct {
		Total int `json:"total"`
	}
	m.get("/api/v1/messages", url.Values{"limit": {"1"}}, &v)
	return v.Total
}

type mailpitMessage struct {
	ID        string
	MessageID string
	Subject   string
	To        []struct{ Address string }
}

// withMessageID lists the messages whose Message-ID is id exactly.
func (m mailpit) withMessageID(id string) []mailpitMessage {
	var v struct {
		Messages []mailpitMessage `json:"messages"`
	}
	m.get("/api/v1/search", url.Values{"query": {"message-id:" + id}}, &v)
	var out []mailpitMessage
	for _, msg := range v.Messages {
		if msg.MessageID == id {
			out = append(out, msg)
		}
	}
	return out
}

// ignoresDuplicates reports whether Mailpit runs with --ignore-duplicate-ids.
func (m mailpit) ignoresDuplicates() bool {
	var v struct{ DuplicatesIgnored bool }
	m.get("/api/v1/webui", nil, &v)
	return v.DuplicatesIgnored
}

// dropProxy forwards every request to Mailpit; when armed, it lets the next
// send reach Mailpit, reads Mailpit's answer and closes the connection
// without passing it on: a lost answer after Mailpit stored the message.
type dropProxy struct {
	target string

	mu      sync.Mutex
	armed   bool
	dropped []string // Mailpit's answers that were dropped
	sends   int
}

func (p *dropProxy) arm() { p.mu.Lock(); p.armed = true; p.mu.Unlock() }

func (p *dropProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	// Let the transport ask for and undo any compression, so the answer
	// read here is plain JSON.
	out.Header.Del("Accept-Encoding")
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	send := r.Method == http.MethodPost && r.URL.Path == "/api/v1/send"
	drop := send && p.armed
	if send {
		p.sends++
	}
	if drop {
		p.armed = false
		p.dropped = append(p.dropped, string(body))
	}
	p.mu.Unlock()
	if drop {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

func (p *dropProxy) state() (sends int, dropped []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sends, append([]string(nil), p.dropped...)
}

// mailpitEnv is the engine's ExecuteTool and ReconcileTool activities over
// a real SQLite ledger and the shipped catalogue examples/mailpit.yaml,
// whose system points at a dropProxy in front of Mailpit.
type mailpitEnv struct {
	t     *testing.T
	te    *testsuite.TestActivityEnvironment
	a     *activities.Activities
	store *ledgersqlite.Store
	reg   *tool.Registry
	proxy *dropProxy
	mp    mailpit
}

func newMailpitEnv(t *testing.T) *mailpitEnv {
	t.Helper()
	root := mailpitURL(t)
	proxy := &dropProxy{target: root}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	c, err := catalog.LoadWith(catalog.Options{Getenv: func(k string) (string, bool) {
		if k == "AGENTSAGA_MAILPIT_URL" {
			return srv.URL, true
		}
		return "", false
	}}, "examples/mailpit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	st, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := &activities.Activities{Tools: reg, Ledger: st}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	te := suite.NewTestActivityEnvironment()
	te.RegisterActivity(a)
	return &mailpitEnv{t: t, te: te, a: a, store: st, reg: reg, proxy: proxy, mp: mailpit{t: t, root: root}}
}

func (e *mailpitEnv) request(key string, args string) activities.Request {
	e.t.Helper()
	fp, err := plan.Fingerprint("send_email", json.RawMessage(args))
	if err != nil {
		e.t.Fatal(err)
	}
	return activities.Request{Key: key, Tool: "send_email", Args: json.RawMessage(args), Fingerprint: fp}
}

func (e *mailpitEnv) execute(req activities.Request) (activities.Output, error) {
	e.t.Helper()
	v, err := e.te.ExecuteActivity(e.a.ExecuteTool, req)
	if err != nil {
		return activities.Output{}, err
	}
	var out activities.Output
	if err := v.Get(&out); err != nil {
		e.t.Fatal(err)
	}
	return out, nil
}

// uniqueSession is a session id no earlier run used, so runs against the
// same Mailpit do not see each other's messages. The time is in base 36:
// in decimal its 19 digits are a Luhn-valid card number one time in ten,
// which a plan refuses.
func uniqueSession(prefix string) string {
	return prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func messageIDOf(key string) string { return "agentsaga+" + key + "@agentsaga.invalid" }

// Through the shipped catalogue and the engine's activities: Mailpit stores
// the email and its answer is lost; the call is UNKNOWN, the next attempt
// asks Mailpit's search for the Message-ID made from the key, finds the
// email and settles the call as succeeded without sending again, and a
// later send of the same key is a replay. Mailpit holds exactly one email.
func TestMailpitLostAnswerSettledByLookup(t *testing.T) {
	e := newMailpitEnv(t)
	before := e.mp.total()
	key := plan.Key(uniqueSession("mailpit"), 1, 1, "send_email")
	req := e.request(key, `{"to":"ana@example.com","subject":"Your refund","body":"We refunded 129.00 EUR."}`)

	e.proxy.arm()
	_, err := e.execute(req)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != activities.ErrUnknown {
		t.Fatalf("lost answer: %v; want an %s failure", err, activities.ErrUnknown)
	}
	sends, dropped := e.proxy.state()
	if sends != 1 || len(dropped) != 1 {
		t.Fatalf("the proxy saw %d sends and dropped %d answers, want 1 and 1", sends, len(dropped))
	}
	var lost struct{ ID string }
	if err := json.Unmarshal([]byte(dropped[0]), &lost); err != nil || lost.ID == "" {
		t.Fatalf("Mailpit's dropped answer %q holds no message id", dropped[0])
	}
	if op, err := e.store.Get(context.Background(), key); err != nil || op.Status != ledger.Unknown {
		t.Fatalf("ledger row after the lost answer: %+v, %v; want unknown", op, err)
	}

	out, err := e.execute(req)
	if err != nil {
		t.Fatalf("the attempt after the lost answer: %v; want it settled by lookup", err)
	}
	if !out.Reconciled || out.ExternalID != lost.ID {
		t.Fatalf("second attempt %+v: want reconciled with Mailpit's id %s", out, lost.ID)
	}
	if op, err := e.store.Get(context.Background(), key); err != nil || op.Status != ledger.Succeeded || op.ExternalID != lost.ID {
		t.Fatalf("ledger row: %+v, %v; want succeeded with %s", op, err, lost.ID)
	}

	again, err := e.execute(req)
	if err != nil || !again.Replayed || again.ExternalID != lost.ID {
		t.Fatalf("a later send of the same key: %+v, %v; want a replay of %s", again, err, lost.ID)
	}
	if sends, _ := e.proxy.state(); sends != 1 {
		t.Errorf("%d sends reached Mailpit, want 1", sends)
	}

	// Counted in Mailpit's own store.
	if n := e.mp.total() - before; n != 1 {
		t.Errorf("Mailpit holds %d new messages, want 1", n)
	}
	msgs := e.mp.withMessageID(messageIDOf(key))
	if len(msgs) != 1 || msgs[0].ID != lost.ID || msgs[0].Subject != "Your refund" || len(msgs[0].To) != 1 || msgs[0].To[0].Address != "ana@example.com" {
		t.Errorf("messages with the key's Message-ID: %+v; want the one email %s to ana@example.com", msgs, lost.ID)
	}
}

// The lookup tells an email that was never sent (an authoritative absent,
// so the engine may send) from one sent under another key, and a found
// email made with other arguments is a mismatch, never adopted.
func TestMailpitLookupAbsentAndMismatch(t *testing.T) {
	e := newMailpitEnv(t)
	session := uniqueSession("mailpit-lookup")
	sent := plan.Key(session, 1, 1, "send_email")
	if _, err := e.execute(e.request(sent, `{"to":"ana@example.com","subject":"Hello","body":"One."}`)); err != nil {
		t.Fatal(err)
	}
	// A key that differs only by what follows it in another key.
	for _, key := range []string{plan.Key(session, 1, 11, "send_email"), plan.Key(session, 1, 1, "send_emai"), tool.CompensationKey(sent)} {
		look, err := e.reg.Reconcile(context.Background(), "send_email", key)
		if err != nil || look.Status != tool.Absent || !look.Authoritative {
			t.Errorf("lookup of %s, never sent: %+v, %v; want an authoritative absent", key, look, err)
		}
	}
	// The same key with another subject: Mailpit holds an email under it
	// that is not this call's.
	other := e.request(sent, `{"to":"ana@example.com","subject":"Something else","body":"One."}`)
	v, err := e.te.ExecuteActivity(e.a.LookupTool, other)
	if err != nil {
		t.Fatal(err)
	}
	var look tool.Lookup
	if err := v.Get(&look); err != nil {
		t.Fatal(err)
	}
	if look.Status != tool.Mismatch {
		t.Errorf("lookup with another subject: %+v; want a mismatch", look)
	}
}

// With --ignore-duplicate-ids Mailpit itself honours the key: the tool sent
// twice under one key (no ledger in between) stores one email; the second
// answer carries no id, which is UNKNOWN, and the lookup finds the first.
func TestMailpitHonoursTheKeyWithIgnoreDuplicateIDs(t *testing.T) {
	e := newMailpitEnv(t)
	if !e.mp.ignoresDuplicates() {
		t.Skip("Mailpit runs without --ignore-duplicate-ids: it stores every send (.ci/run starts it with the flag)")
	}
	before := e.mp.total()
	key := plan.Key(uniqueSession("mailpit-dup"), 1, 1, "send_email")
	args := json.RawMessage(`{"to":"ana@example.com","subject":"Twice","body":"Sent twice."}`)
	tl, _ := e.reg.Tool("send_email")
	first, err := tl.Execute(context.Background(), tool.Call{Key: key, Args: args, Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = tl.Execute(context.Background(), tool.Call{Key: key, Args: args, Attempt: 2})
	if k := tool.KindOf(err); k != tool.KindUnknown {
		t.Fatalf("second send of the key: %v (kind %s); want unknown", err, k)
	}
	look, err := e.reg.Reconcile(context.Background(), "send_email", key)
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != first.ExternalID {
		t.Fatalf("lookup: %+v, %v; want found %s", look, err, first.ExternalID)
	}
	if n := e.mp.total() - before; n != 1 {
		t.Errorf("Mailpit holds %d new messages, want 1", n)
	}
}

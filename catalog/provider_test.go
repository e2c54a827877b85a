package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
)

// provider is a payment API that honours PayPal-Request-Id: one charge per
// key, whatever is resent; a reused key answers the charge made first.
type provider struct {
	t  *testing.T
	mu sync.Mutex
	// charges and refunds by key: the provider's own store.
	charges map[string]map[string]any
	refunds map[string]map[string]any
	// keys lists the key header of every write request, in order.
	keys []string
	// next is what the next write does: "", "drop" (commit, then close the
	// connection without an answer), "throttle", "decline", "reuse".
	next string
}

func newProvider(t *testing.T) (*provider, *httptest.Server) {
	p := &provider{t: t, charges: map[string]map[string]any{}, refunds: map[string]map[string]any{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

func (p *provider) fail(w http.ResponseWriter, status int, typ string) {
	w.Header().Set("Content-Type", "application/json")
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "7")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"err":{"type":%q}}`, typ)
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer s3cr3t-token" || r.Header.Get("X-Client") != "agentsaga" {
		p.fail(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	key := r.Header.Get("PayPal-Request-Id")
	if r.Method == http.MethodPost {
		p.keys = append(p.keys, key)
		if r.Header.Get("Idempotency-Key") != "" {
			p.t.Errorf("the key went out as Idempotency-Key too")
		}
	}
	mode := p.next
	if r.Method == http.MethodPost {
		p.next = ""
	}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/charges"):
		switch mode {
		case "throttle":
			p.fail(w, http.StatusTooManyRequests, "slow_down")
			return
		case "decline":
			p.fail(w, http.StatusPaymentRequired, "card_declined")
			return
		case "reuse":
			p.fail(w, http.StatusUnprocessableEntity, "request_id_reused")
			return
		}
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || r.Header.Get("Content-Type") != "application/json" {
			p.fail(w, http.StatusBadRequest, "bad_json")
			return
		}
		c, ok := p.charges[key]
		if !ok {
			customer := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/customers/"), "/charges")
			c = map[string]any{"id": fmt.Sprintf("ch_%d", len(p.charges)+1), "customer": customer, "amount": body["amount"], "currency": body["currency"], "secret_internal": "dropped"}
			p.charges[key] = c
		}
		if mode == "drop" {
			p.drop(w)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"charge": c})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/charges":
		list := []any{}
		if c, ok := p.charges[r.URL.Query().Get("request_id")]; ok {
			list = append(list, map[string]any{"charge": c})
		}
		json.NewEncoder(w).Encode(map[string]any{"charges": list})
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/refunds"):
		if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			p.fail(w, http.StatusUnsupportedMediaType, "want_form")
			return
		}
		if err := r.ParseForm(); err != nil || r.PostForm.Get("amount") == "" || !strings.HasPrefix(r.PostForm.Get("why"), "saga compensation of ") {
			p.fail(w, http.StatusBadRequest, "bad_form")
			return
		}
		charge := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/charges/"), "/refunds")
		rf, ok := p.refunds[key]
		if !ok {
			rf = map[string]any{"id": fmt.Sprintf("re_%d", len(p.refunds)+1), "charge": charge, "amount": r.PostForm.Get("amount")}
			p.refunds[key] = rf
		}
		json.NewEncoder(w).Encode(rf)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/refunds/"):
		rf, ok := p.refunds[strings.TrimPrefix(r.URL.Path, "/v1/refunds/")]
		if !ok {
			p.fail(w, http.StatusNotFound, "no_such_refund")
			return
		}
		json.NewEncoder(w).Encode(rf)
	default:
		p.fail(w, http.StatusNotFound, "no_route")
	}
}

// drop closes the connection without an answer, after the effect was
// stored.
func (p *provider) drop(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		p.t.Fatal(err)
	}
	conn.Close()
}

func (p *provider) state() (charges, refunds int, keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.charges), len(p.refunds), append([]string(nil), p.keys...)
}

func loadProvider(t *testing.T, url string) *tool.Registry {
	t.Helper()
	env := map[string]string{"PAY_URL": url, "PAY_TOKEN": "s3cr3t-token"}
	c, err := catalog.LoadWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, "testdata/provider.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

var chargeArgs = json.RawMessage(`{"customer":"cus_1","amount_minor":1200,"currency":"EUR","email":"ana@example.com","channel":"web"}`)

func call(t *testing.T, reg *tool.Registry, name, key string, args json.RawMessage, attempt int32) (tool.Result, error) {
	t.Helper()
	tl, ok := reg.Tool(name)
	if !ok {
		t.Fatalf("%s is not registered", name)
	}
	return tl.Execute(context.Background(), tool.Call{Key: key, Args: args, Attempt: attempt})
}

// A lost answer after commit is UNKNOWN, the lookup finds the effect, the
// same key reaches the provider on every attempt, and the retry makes no
// second charge. Only the kept fields come back.
func TestProviderLostAnswerSameKeyAndLookup(t *testing.T) {
	p, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	const key = "s1:1:1:charge"
	p.next = "drop"
	_, err := call(t, reg, "charge", key, chargeArgs, 1)
	if k := tool.KindOf(err); k != tool.KindUnknown {
		t.Fatalf("lost answer after commit: kind %s (%v), want unknown", k, err)
	}
	look, err := reg.Reconcile(context.Background(), "charge", key)
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != "ch_1" {
		t.Fatalf("lookup: %+v, %v; want found ch_1", look, err)
	}
	res, err := call(t, reg, "charge", key, chargeArgs, 2)
	if err != nil || res.ExternalID != "ch_1" {
		t.Fatalf("second attempt: %+v, %v", res, err)
	}
	if string(res.Data) != `{"amount":1200,"currency":"EUR","customer":"cus_1"}` {
		t.Errorf("kept result %s: want only the declared fields", res.Data)
	}
	charges, _, keys := p.state()
	if charges != 1 {
		t.Errorf("the provider holds %d charges, want 1", charges)
	}
	if len(keys) != 2 || keys[0] != key || keys[1] != key {
		t.Errorf("keys sent %q, want %q twice", keys, key)
	}
	absent, err := reg.Reconcile(context.Background(), "charge", "s1:1:9:charge")
	if err != nil || absent.Status != tool.Absent || !absent.Authoritative {
		t.Errorf("lookup of a key never used: %+v, %v; want an authoritative absent", absent, err)
	}
}

// A refused connection is "not sent".
func TestProviderRefusedConnectionIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	reg := loadProvider(t, url)
	_, err = call(t, reg, "charge", "s1:1:1:charge", chargeArgs, 1)
	if k := tool.KindOf(err); k != tool.KindNotSent {
		t.Fatalf("refused connection: kind %s (%v), want not_sent", k, err)
	}
}

// The catalogue's error rules: a business 4xx is a final rejection with the
// provider's code (read by the declared pointer), a key-reuse code is a
// conflict, a 429 is throttled with its Retry-After.
func TestProviderErrorMapping(t *testing.T) {
	p, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	for _, tc := range []struct {
		mode  string
		kind  tool.Kind
		code  string
		after time.Duration
	}{
		{"decline", tool.KindRejected, "card_declined", 0},
		{"reuse", tool.KindConflict, "request_id_reused", 0},
		{"throttle", tool.KindThrottled, "slow_down", 7 * time.Second},
	} {
		p.mu.Lock()
		p.next = tc.mode
		p.mu.Unlock()
		_, err := call(t, reg, "charge", "s1:2:1:charge", chargeArgs, 1)
		if tool.KindOf(err) != tc.kind || tool.CodeOf(err) != tc.code || tool.RetryAfterOf(err) != tc.after {
			t.Errorf("%s: kind %s code %q retry-after %s (%v); want %s %q %s", tc.mode, tool.KindOf(err), tool.CodeOf(err), tool.RetryAfterOf(err), err, tc.kind, tc.code, tc.after)
		}
		spec, _ := reg.Spec("charge")
		if retry := tool.Retryable(spec.Class, tool.KindOf(err)); retry != (tc.kind == tool.KindThrottled) {
			t.Errorf("%s: retryable %v", tc.mode, retry)
		}
	}
	if charges, _, _ := p.state(); charges != 0 {
		t.Errorf("the provider holds %d charges after refusals, want 0", charges)
	}
}

// A key reused with other args finds the first call's charge: Match tells
// it is not this call's effect.
func TestProviderReusedKeyWithOtherArgsIsAMismatch(t *testing.T) {
	_, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	if _, err := call(t, reg, "charge", "s1:3:1:charge", chargeArgs, 1); err != nil {
		t.Fatal(err)
	}
	other := json.RawMessage(`{"customer":"cus_1","amount_minor":9900,"currency":"EUR"}`)
	res, err := call(t, reg, "charge", "s1:3:1:charge", other, 1)
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := reg.Tool("charge")
	d := tool.Differences(tl, other, res)
	if len(d) != 1 || !strings.Contains(d[0], "amount_minor") {
		t.Errorf("differences %q, want one naming amount_minor", d)
	}
	if d := tool.Differences(tl, chargeArgs, res); len(d) != 0 {
		t.Errorf("the first call's args differ from its own effect: %q", d)
	}
}

// The reversal carries its own key (the compensation key), finds the
// original's id by lookup when it is not given, sends a form body built from
// the original's args, and is deduplicated by its key.
func TestProviderReversalOwnKey(t *testing.T) {
	p, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	const key = "s1:4:1:charge"
	res, err := call(t, reg, "charge", key, chargeArgs, 1)
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := json.Marshal(tool.Reversal{OriginalKey: key, OriginalTool: "charge", OriginalArgs: chargeArgs})
	ck := tool.CompensationKey(key)
	r1, err := call(t, reg, "refund_charge", ck, rev, 1)
	if err != nil {
		t.Fatal(err)
	}
	rev2, _ := json.Marshal(tool.Reversal{OriginalKey: key, OriginalTool: "charge", OriginalExternalID: res.ExternalID, OriginalArgs: chargeArgs})
	r2, err := call(t, reg, "refund_charge", ck, rev2, 2)
	if err != nil || r2.ExternalID != r1.ExternalID {
		t.Fatalf("second reversal: %+v, %v; want %s again", r2, err, r1.ExternalID)
	}
	tl, _ := reg.Tool("refund_charge")
	if d := tool.Differences(tl, rev2, r2); len(d) != 0 {
		t.Errorf("reversal does not match: %q", d)
	}
	look, err := reg.Reconcile(context.Background(), "refund_charge", ck)
	if err != nil || look.Status != tool.Found || look.Result.ExternalID != r1.ExternalID {
		t.Errorf("reversal lookup: %+v, %v", look, err)
	}
	_, refunds, keys := p.state()
	if refunds != 1 {
		t.Errorf("the provider holds %d refunds, want 1", refunds)
	}
	if len(keys) != 3 || keys[1] != ck || keys[2] != ck {
		t.Errorf("keys %q: want the reversal's own key %q on both attempts", keys, ck)
	}
	p.mu.Lock()
	amount := p.refunds[ck]["amount"]
	p.mu.Unlock()
	if amount != "1200" {
		t.Errorf("refund amount %v, want the original's 1200", amount)
	}
}

// An enum argument outside its values is rejected before anything is sent.
func TestProviderEnumRejectedBeforeSending(t *testing.T) {
	p, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	_, err := call(t, reg, "charge", "s1:5:1:charge", json.RawMessage(`{"customer":"cus_1","amount_minor":1,"currency":"EUR","channel":"fax"}`), 1)
	if tool.KindOf(err) != tool.KindRejected {
		t.Fatalf("enum outside its values: %v", err)
	}
	if _, _, keys := p.state(); len(keys) != 0 {
		t.Errorf("%d requests sent, want none", len(keys))
	}
}

package tooltest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/tooltest"
)

// ---- a small charges provider that honours Idempotency-Key ----

type effect struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount_minor,omitempty"`
	Currency string `json:"currency,omitempty"`
	Customer string `json:"customer,omitempty"`
	Reverses string `json:"reverses,omitempty"`
	body     string
}

// provider keeps charges and refunds by Idempotency-Key, like Stripe: the
// same key and body replays, the same key with another body is 422.
type provider struct {
	mu      sync.Mutex
	n       int
	charges map[string]*effect
	refunds map[string]*effect
}

func startProvider(t testing.TB) (*provider, string) {
	p := &provider{charges: map[string]*effect{}, refunds: map[string]*effect{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", p.charge)
	mux.HandleFunc("GET /v1/charges", p.find(p.charges))
	mux.HandleFunc("POST /v1/charges/{id}/refund", p.refund)
	mux.HandleFunc("GET /v1/refunds", p.find(p.refunds))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func fail(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":"refused"}}`, code)
}

func answer(w http.ResponseWriter, status int, e *effect) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

func (p *provider) charge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	var in effect
	if key == "" || json.NewDecoder(r.Body).Decode(&in) != nil {
		fail(w, http.StatusBadRequest, "invalid_request")
		return
	}
	if in.Amount > 1_000_000 {
		fail(w, http.StatusPaymentRequired, "amount_too_large")
		return
	}
	in.body = fmt.Sprintf("%d %s %s", in.Amount, in.Currency, in.Customer)
	p.keyed(w, p.charges, key, &in, "ch")
}

func (p *provider) refund(w http.ResponseWriter, r *http.Request) {
	key, id := r.Header.Get("Idempotency-Key"), r.PathValue("id")
	p.mu.Lock()
	known := false
	for _, c := range p.charges {
		known = known || c.ID == id
	}
	p.mu.Unlock()
	if key == "" || !known {
		fail(w, http.StatusNotFound, "not_found")
		return
	}
	p.keyed(w, p.refunds, key, &effect{Reverses: id, body: id}, "rf")
}

func (p *provider) keyed(w http.ResponseWriter, store map[string]*effect, key string, in *effect, prefix string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := store[key]; ok {
		if e.body != in.body {
			fail(w, http.StatusUnprocessableEntity, httptool.CodeIdempotencyMismatch)
			return
		}
		answer(w, http.StatusOK, e)
		return
	}
	p.n++
	in.ID = fmt.Sprintf("%s_%d", prefix, p.n)
	store[key] = in
	answer(w, http.StatusCreated, in)
}

func (p *provider) find(store map[string]*effect) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		e, ok := store[r.URL.Query().Get("key")]
		p.mu.Unlock()
		if !ok {
			fail(w, http.StatusNotFound, "not_found")
			return
		}
		answer(w, http.StatusOK, e)
	}
}

// effects returns the ids committed under key, charges and refunds.
func (p *provider) effects(_ context.Context, key string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ids []string
	for _, s := range []map[string]*effect{p.charges, p.refunds} {
		if e, ok := s[key]; ok {
			ids = append(ids, e.ID)
		}
	}
	return ids, nil
}

// ---- a good Go tool and its reversal, and the ways to break them ----

// The broken variants: each breaks one promise.
const (
	freshKey          = "fresh-key"             // a new key per attempt
	timeoutAsRejected = "timeout-as-rejected"   // a lost answer reported as a rejection
	refusedAsUnknown  = "refused-as-unknown"    // a refused connection reported as unknown
	rejectedAsRetry   = "rejected-as-retry"     // a business 4xx reported as unavailable
	noMatch           = "no-match"              // no Spec.Match
	reversalOrigKey   = "reversal-original-key" // the reversal sent under the original's key
	reversalNoMatch   = "reversal-no-match"     // a reversal that cannot tell what it reversed
)

// broken maps each variant to the promise it must fail.
var broken = map[string]string{
	freshKey:          tooltest.SameKeyEveryAttempt,
	timeoutAsRejected: tooltest.LostAnswerIsUnknown,
	refusedAsUnknown:  tooltest.RefusedConnectionIsNotSent,
	rejectedAsRetry:   tooltest.BusinessRejectionIsFinal,
	noMatch:           tooltest.ReusedKeyIsConflict,
	reversalOrigKey:   tooltest.ReversalHasOwnKey,
	reversalNoMatch:   tooltest.ReversalHasOwnKey,
}

type charge struct {
	c      *httptool.Client
	broken string
}

func (t *charge) Spec() tool.Spec {
	s := tool.Spec{Name: "create_charge", Class: tool.IdempotentWrite, Timeout: 5 * time.Second, Compensator: "refund_charge",
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "amount_minor", Type: tool.Money, Required: true},
			{Name: "currency", Type: tool.Currency, Required: true},
			{Name: "customer", Type: tool.String, Required: true},
		}},
		Match: []tool.MatchField{{Arg: "amount_minor", Result: "amount_minor"}, {Arg: "currency", Result: "currency"}, {Arg: "customer", Result: "customer"}},
	}
	if t.broken == noMatch {
		s.Match = nil
	}
	return s
}

func (t *charge) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	key := call.Key
	if t.broken == freshKey {
		key = fmt.Sprintf("%s-%d", call.Key, call.Attempt)
	}
	raw, err := t.c.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: "/v1/charges", Key: key, Body: call.Args})
	if err != nil {
		return tool.Result{}, breakKind(t.broken, err)
	}
	return withID(raw)
}

func (t *charge) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return find(ctx, t.c, "/v1/charges?key="+url.QueryEscape(key))
}

type refundCharge struct {
	c      *httptool.Client
	broken string
}

func (t *refundCharge) Spec() tool.Spec {
	s := tool.Spec{Name: "refund_charge", Class: tool.IdempotentWrite, Timeout: 5 * time.Second, Reversal: true,
		Args:  tool.Schema{Fields: []tool.Field{{Name: "original_key", Type: tool.String, Required: true}, {Name: "original_external_id", Type: tool.String}}},
		Match: []tool.MatchField{{Arg: "original_external_id", Result: "reverses", IfSet: true}}}
	if t.broken == reversalNoMatch {
		s.Match = nil
	}
	return s
}

func (t *refundCharge) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var rev tool.Reversal
	if err := json.Unmarshal(call.Args, &rev); err != nil {
		return tool.Result{}, tool.Fail(tool.KindRejected, "invalid_args", err)
	}
	key := call.Key
	if t.broken == reversalOrigKey {
		key = rev.OriginalKey
	}
	raw, err := t.c.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: "/v1/charges/" + url.PathEscape(rev.OriginalExternalID) + "/refund", Key: key, Body: map[string]string{}})
	if err != nil {
		return tool.Result{}, err
	}
	return withID(raw)
}

func (t *refundCharge) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return find(ctx, t.c, "/v1/refunds?key="+url.QueryEscape(key))
}

func breakKind(variant string, err error) error {
	switch k := tool.KindOf(err); {
	case variant == timeoutAsRejected && k == tool.KindUnknown:
		return tool.Fail(tool.KindRejected, "timeout", err)
	case variant == refusedAsUnknown && k == tool.KindNotSent:
		return tool.Fail(tool.KindUnknown, "dial", err)
	case variant == rejectedAsRetry && k == tool.KindRejected:
		return tool.Fail(tool.KindUnavailable, "retry", err)
	}
	return err
}

func withID(raw json.RawMessage) (tool.Result, error) {
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
		return tool.Result{}, tool.Fail(tool.KindUnknown, "bad_response", fmt.Errorf("2xx without an id: reconcile"))
	}
	return tool.Result{ExternalID: e.ID, Data: raw}, nil
}

func find(ctx context.Context, c *httptool.Client, path string) (tool.Lookup, error) {
	raw, err := c.Raw(ctx, httptool.Request{Path: path})
	switch {
	case err == nil:
		res, err := withID(raw)
		if err != nil {
			return tool.Lookup{Status: tool.Unknown}, err
		}
		return tool.Lookup{Status: tool.Found, Result: res, Authoritative: true}, nil
	case httptool.StatusOf(err) == http.StatusNotFound:
		return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
	}
	return tool.Lookup{Status: tool.Unknown}, err
}

func harness(t testing.TB, variant string) tooltest.Harness {
	p, base := startProvider(t)
	return tooltest.Harness{
		Tool:     "create_charge",
		Provider: base,
		New: func(_ testing.TB, baseURL string) []tool.Tool {
			return []tool.Tool{&charge{c: httptool.New(baseURL, nil), broken: variant}, &refundCharge{c: httptool.New(baseURL, nil), broken: variant}}
		},
		Args:     json.RawMessage(`{"amount_minor":1200,"currency":"EUR","customer":"cus_ana"}`),
		Changed:  json.RawMessage(`{"amount_minor":9900,"currency":"EUR","customer":"cus_ana"}`),
		Rejected: json.RawMessage(`{"amount_minor":2000000,"currency":"EUR","customer":"cus_ana"}`),
		Effects:  p.effects,
	}
}

// A tool that keeps every promise passes every subtest.
func TestGoodToolPasses(t *testing.T) {
	tooltest.Run(t, harness(t, ""))
}

// Without Rejected args the kit's proxy answers the rejection itself.
func TestRejectionByTheProxy(t *testing.T) {
	h := harness(t, "")
	h.Rejected = nil
	tooltest.Run(t, h)
}

const childEnv = "TOOLTEST_BROKEN_CHILD"

// Each broken tool fails the subtest of the promise it breaks: the kit is
// run on them in a child process (a failing subtest fails its parent, so it
// cannot run in this one) and the child's -test.v output is read. The child
// is this test again, with childEnv set: it runs the kit on every broken
// variant, where it must fail.
func TestKitCatchesBrokenTools(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		for variant := range broken {
			t.Run(variant, func(t *testing.T) { tooltest.Run(t, harness(t, variant)) })
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKitCatchesBrokenTools$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the kit passed every broken tool:\n%s", out)
	}
	results := map[string]string{} // variant/subtest -> PASS, FAIL or SKIP
	for _, m := range regexp.MustCompile(`--- (PASS|FAIL|SKIP): TestKitCatchesBrokenTools/([^/\s]+)/(\w+)`).FindAllStringSubmatch(string(out), -1) {
		results[m[2]+"/"+m[3]] = m[1]
	}
	if len(results) == 0 {
		t.Fatalf("no subtest results in the child's output:\n%s", out)
	}
	for variant, promise := range broken {
		if got := results[variant+"/"+promise]; got != "FAIL" {
			t.Errorf("broken tool %q: subtest %s is %q, want FAIL", variant, promise, got)
		}
		var others []string
		for k, v := range results {
			if strings.HasPrefix(k, variant+"/") && v == "FAIL" && k != variant+"/"+promise {
				others = append(others, strings.TrimPrefix(k, variant+"/"))
			}
		}
		// A fresh key per attempt breaks every promise about the key; each
		// other variant breaks one promise only.
		if variant != freshKey && len(others) > 0 {
			t.Errorf("broken tool %q fails %v besides %s: the kit blames promises it kept", variant, others, promise)
		}
		t.Logf("%s fails %s (and also %v)", variant, promise, others)
	}
	if t.Failed() {
		t.Logf("child output:\n%s", out)
	}
}

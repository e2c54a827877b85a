package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/internal/sandbox"
)

// start runs a sandbox for one test.
func start(t *testing.T, opts sandbox.Options) (*sandbox.Sandbox, *sandbox.Client) {
	t.Helper()
	sb, err := sandbox.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Error(err)
		}
	})
	return sb, sb.Client()
}

type reply struct {
	status   int
	body     map[string]any
	raw      string
	replayed bool
	err      error // transport error: no answer
}

func (r reply) code() string {
	e, _ := r.body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func (r reply) id() string { s, _ := r.body["id"].(string); return s }

// send does one request on a fresh connection.
func send(t *testing.T, method, url, key string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw), replayed: resp.Header.Get("Idempotent-Replayed") == "true"}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func effects(t *testing.T, c *sandbox.Client, provider string) []sandbox.Effect {
	t.Helper()
	e, err := c.Effects(context.Background(), provider)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func fault(t *testing.T, c *sandbox.Client, f sandbox.FaultSpec) {
	t.Helper()
	if err := c.Fault(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

func calls(t *testing.T, c *sandbox.Client, op string) int {
	t.Helper()
	m, err := c.Calls(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	return m[op]
}

var refund = map[string]any{"order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR"}

func TestRefundReplayConflictAndLookup(t *testing.T) {
	sb, c := start(t, sandbox.Options{})
	u := sb.URLs().Payments
	first := send(t, "POST", u+"/v1/refunds", "k1", refund)
	if first.status != 201 || first.id() == "" || first.replayed {
		t.Fatalf("first refund: %d %s", first.status, first.raw)
	}
	again := send(t, "POST", u+"/v1/refunds", "k1", refund)
	if again.status != 201 || again.id() != first.id() || !again.replayed {
		t.Fatalf("replay: %d %s replayed=%v, want the first answer", again.status, again.raw, again.replayed)
	}
	changed := send(t, "POST", u+"/v1/refunds", "k1", map[string]any{"order_id": "ord_1001", "amount_minor": 12901, "currency": "EUR"})
	if changed.status != 422 || changed.code() != "idempotency_key_mismatch" {
		t.Fatalf("changed body: %d %s, want 422 idempotency_key_mismatch", changed.status, changed.raw)
	}
	if e := effects(t, c, sandbox.Payments); len(e) != 1 || e[0].Kind != "refund" || e[0].AmountMinor != 12900 || e[0].Key != "k1" {
		t.Fatalf("effects = %+v, want one refund of 12900 under k1", e)
	}
	found := send(t, "GET", u+"/v1/refunds?idempotency_key=k1", "", nil)
	if found.status != 200 || found.id() != first.id() {
		t.Fatalf("lookup: %d %s", found.status, found.raw)
	}
	if r := send(t, "GET", u+"/v1/refunds?idempotency_key=nope", "", nil); r.status != 404 {
		t.Fatalf("lookup of an unknown key: %d, want 404", r.status)
	}
	if r := send(t, "GET", u+"/v1/payments?idempotency_key=k1", "", nil); r.status != 404 {
		t.Fatalf("a refund key looked up as a payment: %d, want 404", r.status)
	}
	if r := send(t, "POST", u+"/v1/refunds", "", refund); r.status != 400 || r.code() != "idempotency_key_required" {
		t.Fatalf("no key: %d %s", r.status, r.raw)
	}
	if r := send(t, "POST", u+"/v1/refunds", "k2", map[string]any{"order_id": "o", "amount_minor": 129.5, "currency": "EUR"}); r.status != 400 {
		t.Fatalf("fractional amount: %d %s, want 400", r.status, r.raw)
	}
}

func TestInFlightIs409AndConcurrentRequestsMakeOneEffect(t *testing.T) {
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	sb, c := start(t, sandbox.Options{Hook: func(ctx context.Context, op string) {
		if op == "refunds.create" {
			entered <- struct{}{}
			<-release
		}
	}})
	u := sb.URLs().Payments
	firstDone := make(chan reply)
	go func() { firstDone <- send(t, "POST", u+"/v1/refunds", "k", refund) }()
	<-entered // the first request holds the key and has not committed

	const n = 8
	var wg sync.WaitGroup
	replies := make([]reply, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); replies[i] = send(t, "POST", u+"/v1/refunds", "k", refund) }()
	}
	wg.Wait()
	for i, r := range replies {
		if r.status != 409 || r.code() != "request_in_progress" {
			t.Fatalf("concurrent request %d: %d %s, want 409 request_in_progress", i, r.status, r.raw)
		}
	}
	if r := send(t, "GET", u+"/v1/refunds?idempotency_key=k", "", nil); r.status != 409 {
		t.Fatalf("lookup while in flight: %d, want 409", r.status)
	}
	close(release)
	first := <-firstDone
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.raw)
	}
	if e := effects(t, c, sandbox.Payments); len(e) != 1 {
		t.Fatalf("%d effects, want 1: %+v", len(e), e)
	}
	if got := calls(t, c, "refunds.create"); got != n+1 {
		t.Fatalf("calls = %d, want %d", got, n+1)
	}
}

func TestReversalIsANewKeyedEntry(t *testing.T) {
	sb, c := start(t, sandbox.Options{})
	u := sb.URLs().Payments
	pay := send(t, "POST", u+"/v1/payments", "p1", map[string]any{"customer_id": "cus_ana", "amount_minor": 5000, "currency": "EUR", "payment_method": "tok_visa"})
	if pay.status != 201 {
		t.Fatalf("payment: %d %s", pay.status, pay.raw)
	}
	rev := send(t, "POST", u+"/v1/payments/"+pay.id()+"/reverse", "p1:compensate", map[string]any{"reason": "x"})
	if rev.status != 201 || rev.body["reverses"] != pay.id() || rev.body["amount_minor"] != float64(-5000) {
		t.Fatalf("reversal: %d %s", rev.status, rev.raw)
	}
	again := send(t, "POST", u+"/v1/payments/"+pay.id()+"/reverse", "p1:compensate", map[string]any{"reason": "x"})
	if again.id() != rev.id() || !again.replayed {
		t.Fatalf("retried reversal: %s, want the replay of %s", again.raw, rev.id())
	}
	other := send(t, "POST", u+"/v1/payments/"+pay.id()+"/reverse", "other", map[string]any{})
	if other.status != 400 || other.code() != "already_reversed" {
		t.Fatalf("second reversal under another key: %d %s, want 400 already_reversed", other.status, other.raw)
	}
	if r := send(t, "GET", u+"/v1/reversals?idempotency_key=p1:compensate", "", nil); r.id() != rev.id() {
		t.Fatalf("reversal lookup: %s", r.raw)
	}
	if r := send(t, "POST", u+"/v1/refunds/"+pay.id()+"/reverse", "x", map[string]any{}); r.status != 404 {
		t.Fatalf("a payment reversed as a refund: %d, want 404", r.status)
	}
	e := effects(t, c, sandbox.Payments)
	if len(e) != 2 || e[0].Kind != "payment" || e[0].AmountMinor != 5000 || e[1].Kind != "payment_reversal" || e[1].AmountMinor != -5000 || e[1].Reverses != e[0].ID {
		t.Fatalf("effects = %+v, want the payment and its opposite reversal", e)
	}
	if r := send(t, "POST", u+"/v1/payments", "p2", map[string]any{"customer_id": "c", "amount_minor": 1, "currency": "EUR", "payment_method": "4242 4242 4242 4242"}); r.status != 400 || r.code() != "raw_card_number" {
		t.Fatalf("card number as payment method: %d %s", r.status, r.raw)
	}
}

func TestFaults(t *testing.T) {
	sb, c := start(t, sandbox.Options{})
	u := sb.URLs()
	ctx := context.Background()

	t.Run("commit_then_drop commits once and loses the answer", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop})
		if r := send(t, "POST", u.Payments+"/v1/refunds", "ctd", refund); r.err == nil {
			t.Fatalf("got an answer %d, want the connection dropped", r.status)
		}
		if r := send(t, "GET", u.Payments+"/v1/refunds?idempotency_key=ctd", "", nil); r.status != 200 {
			t.Fatalf("lookup after commit_then_drop: %d, want 200", r.status)
		}
		if r := send(t, "POST", u.Payments+"/v1/refunds", "ctd", refund); r.status != 201 || !r.replayed {
			t.Fatalf("retry: %d replayed=%v", r.status, r.replayed)
		}
	})
	t.Run("drop_before_commit commits nothing and frees the key", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.DropBeforeCommit})
		if r := send(t, "POST", u.Payments+"/v1/refunds", "dbc", refund); r.err == nil {
			t.Fatalf("got an answer %d, want the connection dropped", r.status)
		}
		if r := send(t, "GET", u.Payments+"/v1/refunds?idempotency_key=dbc", "", nil); r.status != 404 {
			t.Fatalf("lookup: %d, want 404", r.status)
		}
		if r := send(t, "POST", u.Payments+"/v1/refunds", "dbc", refund); r.status != 201 || r.replayed {
			t.Fatalf("retry: %d replayed=%v, want a fresh 201", r.status, r.replayed)
		}
	})
	t.Run("http_503 and http_429 for N calls", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.HTTP503, Count: 2})
		fault(t, c, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.HTTP429})
		body := map[string]any{"customer_id": "c", "amount_minor": 100, "currency": "EUR", "payment_method": "tok_visa"}
		want := []int{503, 503, 429, 201}
		for i, w := range want {
			if r := send(t, "POST", u.Payments+"/v1/payments", "f", body); r.status != w {
				t.Fatalf("call %d: %d %s, want %d", i+1, r.status, r.raw, w)
			}
		}
	})
	t.Run("reject is a remembered business answer", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.Reject, Status: 402, Code: "insufficient_funds"})
		r := send(t, "POST", u.Payments+"/v1/refunds", "rej", refund)
		if r.status != 402 || r.code() != "insufficient_funds" {
			t.Fatalf("reject: %d %s", r.status, r.raw)
		}
		if r := send(t, "POST", u.Payments+"/v1/refunds", "rej", refund); r.status != 402 || !r.replayed {
			t.Fatalf("retry of a rejected key: %d replayed=%v, want the stored 402", r.status, r.replayed)
		}
		if r := send(t, "GET", u.Payments+"/v1/refunds?idempotency_key=rej", "", nil); r.status != 404 {
			t.Fatalf("lookup of a rejected key: %d, want 404", r.status)
		}
	})
	t.Run("lookup faults", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "refunds.lookup", Fault: sandbox.LookupUnavailable})
		fault(t, c, sandbox.FaultSpec{Op: "refunds.lookup", Fault: sandbox.LookupLag})
		for i, w := range []int{503, 404, 200} {
			if r := send(t, "GET", u.Payments+"/v1/refunds?idempotency_key=ctd", "", nil); r.status != w {
				t.Fatalf("lookup %d: %d, want %d", i+1, r.status, w)
			}
		}
	})
	t.Run("delay still commits", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.Delay, Delay: time.Millisecond})
		if r := send(t, "POST", u.Mail+"/v1/messages", "", map[string]any{"to": "a@example.com", "subject": "s", "body": "b"}); r.status != 202 {
			t.Fatalf("delayed send: %d %s", r.status, r.raw)
		}
	})
	t.Run("faults on reads", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "orders.get", Fault: sandbox.HTTP503})
		fault(t, c, sandbox.FaultSpec{Op: "orders.get", Fault: sandbox.CommitThenDrop})
		if r := send(t, "GET", u.Orders+"/v1/orders/ord_1001", "", nil); r.status != 503 {
			t.Fatalf("read: %d, want 503", r.status)
		}
		if r := send(t, "GET", u.Orders+"/v1/orders/ord_1001", "", nil); r.err == nil {
			t.Fatalf("read: %d, want a dropped connection", r.status)
		}
		if r := send(t, "GET", u.Orders+"/v1/orders/ord_1001", "", nil); r.status != 200 {
			t.Fatalf("read: %d, want 200", r.status)
		}
	})
	t.Run("bad faults are refused with a hint", func(t *testing.T) {
		for _, f := range []sandbox.FaultSpec{
			{Op: "nope", Fault: sandbox.HTTP503},
			{Op: "refunds.create", Fault: "explode"},
			{Op: "refunds.create", Fault: sandbox.LookupLag},
			{Op: "refunds.lookup", Fault: sandbox.CommitThenDrop},
			{Op: "mail.send", Fault: sandbox.Delay},
			{Op: "mail.send", Fault: sandbox.Reject, Status: 429},
			{Op: "mail.send", Fault: sandbox.SlowCommit},
			{Op: "mail.lookup", Fault: sandbox.SlowCommit, Delay: time.Second},
			{Op: "orders.get", Fault: sandbox.SlowCommit, Delay: time.Second},
			{Op: "mail.send", Fault: sandbox.SlowCommit, Delay: time.Hour},
			{Op: "mail.lookup", Fault: sandbox.VisibilityLag},
			{Op: "mail.send", Fault: sandbox.VisibilityLag, Delay: time.Second},
		} {
			if err := f.Validate(); err == nil {
				t.Errorf("%+v accepted", f)
			}
		}
		r := adminSend(t, sb, "POST", "/admin/faults", map[string]any{"op": "nope", "fault": "http_503"})
		if r.status != 400 || !strings.Contains(r.raw, "use one of") {
			t.Fatalf("admin accepted a bad fault: %d %s", r.status, r.raw)
		}
	})
	t.Run("counts, listing and reset", func(t *testing.T) {
		fault(t, c, sandbox.FaultSpec{Op: "tickets.create", Fault: sandbox.HTTP503, Count: -1})
		fs, err := c.Faults(ctx)
		if err != nil || len(fs) != 1 || fs[0].Count != -1 {
			t.Fatalf("faults = %+v %v", fs, err)
		}
		if got := calls(t, c, "refunds.create"); got != 6 {
			t.Fatalf("refunds.create calls = %d, want 6 (two each: commit_then_drop, drop_before_commit, reject)", got)
		}
		if err := c.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if fs, _ := c.Faults(ctx); len(fs) != 0 {
			t.Fatalf("faults after reset: %+v", fs)
		}
		if got := calls(t, c, "refunds.create"); got != 0 {
			t.Fatalf("calls after reset = %d", got)
		}
	})
}

func TestFaultJSONShape(t *testing.T) {
	var f sandbox.FaultSpec
	if err := json.Unmarshal([]byte(`{"op":"mail.send","fault":"delay","count":3,"delay":"1.5s"}`), &f); err != nil {
		t.Fatal(err)
	}
	if f.Delay != 1500*time.Millisecond || f.Count != 3 || f.Fault != sandbox.Delay {
		t.Fatalf("decoded %+v", f)
	}
	b, _ := json.Marshal(f)
	if !strings.Contains(string(b), `"delay":"1.5s"`) {
		t.Fatalf("encoded %s", b)
	}
	if err := json.Unmarshal([]byte(`{"op":"mail.send","fault":"delay","delay":"soon"}`), &f); err == nil {
		t.Fatal("a bad duration was accepted")
	}
}

func TestTicketsUpsertSearchLagAndClose(t *testing.T) {
	sb, c := start(t, sandbox.Options{IndexLag: sandbox.IndexLag{Searches: 2}})
	u := sb.URLs().CRM
	body := map[string]any{"external_ref": "s:1:3:create_ticket", "subject": "Refund issue"}
	first := send(t, "POST", u+"/v1/tickets", "", body)
	if first.status != 201 {
		t.Fatalf("create: %d %s", first.status, first.raw)
	}
	if again := send(t, "POST", u+"/v1/tickets", "", body); again.status != 200 || again.id() != first.id() {
		t.Fatalf("upsert: %d %s, want 200 with %s", again.status, again.raw, first.id())
	}
	for i := range 2 {
		r := send(t, "GET", u+"/v1/tickets?external_ref=s:1:3:create_ticket", "", nil)
		if tk, _ := r.body["tickets"].([]any); len(tk) != 0 || r.body["index_caught_up"] != false {
			t.Fatalf("search %d while lagging: %s", i+1, r.raw)
		}
	}
	r := send(t, "GET", u+"/v1/tickets?external_ref=s:1:3:create_ticket", "", nil)
	if tk, _ := r.body["tickets"].([]any); len(tk) != 1 || r.body["index_caught_up"] != true {
		t.Fatalf("search after the lag: %s", r.raw)
	}
	closed := send(t, "POST", u+"/v1/tickets/"+first.id()+"/close", "", map[string]any{"ref": "s:1:3:create_ticket:compensate"})
	if closed.status != 201 {
		t.Fatalf("close: %d %s", closed.status, closed.raw)
	}
	if again := send(t, "POST", u+"/v1/tickets/"+first.id()+"/close", "", map[string]any{"ref": "s:1:3:create_ticket:compensate"}); again.status != 200 || again.id() != closed.id() {
		t.Fatalf("close again: %d %s", again.status, again.raw)
	}
	if r := send(t, "GET", u+"/v1/closures?ref=s:1:3:create_ticket:compensate", "", nil); r.id() != closed.id() {
		t.Fatalf("closure lookup: %s", r.raw)
	}
	e := effects(t, c, sandbox.CRM)
	if len(e) != 2 || e[0].Kind != "ticket" || e[0].Status != "closed" || e[1].Kind != "ticket_closure" || e[1].Reverses != first.id() {
		t.Fatalf("effects = %+v", e)
	}
	if err := c.SetIndexLag(context.Background(), sandbox.IndexLag{Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	send(t, "POST", u+"/v1/tickets", "", map[string]any{"external_ref": "late", "subject": "x"})
	if r := send(t, "GET", u+"/v1/tickets?external_ref=late", "", nil); r.body["index_caught_up"] != false {
		t.Fatalf("search with a duration lag: %s", r.raw)
	}
}

func TestInvoicesIntegrationKeyAndStorno(t *testing.T) {
	sb, c := start(t, sandbox.Options{})
	u := sb.URLs().Accounting
	inv := map[string]any{"integration_key": "s:1:1:create_invoice", "customer_id": "cus_ana", "amount_minor": 12900, "currency": "EUR"}
	first := send(t, "POST", u+"/v1/invoices", "", inv)
	if first.status != 201 {
		t.Fatalf("invoice: %d %s", first.status, first.raw)
	}
	if again := send(t, "POST", u+"/v1/invoices", "", inv); again.status != 200 || again.id() != first.id() {
		t.Fatalf("same key: %d %s", again.status, again.raw)
	}
	changed := map[string]any{"integration_key": "s:1:1:create_invoice", "customer_id": "cus_ana", "amount_minor": 1, "currency": "EUR"}
	if r := send(t, "POST", u+"/v1/invoices", "", changed); r.status != 422 || r.code() != "integration_key_conflict" {
		t.Fatalf("changed: %d %s", r.status, r.raw)
	}
	st := send(t, "POST", u+"/v1/invoices/"+first.id()+"/storno", "", map[string]any{"integration_key": "s:1:1:create_invoice:compensate"})
	if st.status != 201 || st.body["reverses"] != first.id() || st.body["amount_minor"] != float64(-12900) {
		t.Fatalf("storno: %d %s", st.status, st.raw)
	}
	if r := send(t, "POST", u+"/v1/invoices/"+first.id()+"/storno", "", map[string]any{"integration_key": "other"}); r.code() != "already_reversed" {
		t.Fatalf("second storno: %d %s", r.status, r.raw)
	}
	if r := send(t, "GET", u+"/v1/documents?integration_key=s:1:1:create_invoice:compensate", "", nil); r.id() != st.id() {
		t.Fatalf("lookup: %s", r.raw)
	}
	e := effects(t, c, sandbox.Accounting)
	if len(e) != 2 || e[1].Kind != "invoice_storno" || e[1].AmountMinor != -12900 {
		t.Fatalf("effects = %+v", e)
	}
}

func TestOrdersAndPolicy(t *testing.T) {
	sb, _ := start(t, sandbox.Options{})
	u := sb.URLs().Orders
	o := send(t, "GET", u+"/v1/orders/ord_1002", "", nil)
	if o.status != 200 || o.body["total_minor"] != float64(193800) {
		t.Fatalf("order: %s", o.raw)
	}
	for _, tc := range []struct {
		path, reason string
		ok           bool
	}{
		{"/v1/orders/ord_1001/refund-policy?amount_minor=12900", "", true},
		{"/v1/orders/ord_1001/refund-policy?amount_minor=12901", "amount_exceeds_order", false},
		{"/v1/orders/ord_1003/refund-policy", "refund_window_closed", false},
		{"/v1/orders/ord_1004/refund-policy", "order_not_delivered", false},
	} {
		r := send(t, "GET", u+tc.path, "", nil)
		if r.body["refundable"] != tc.ok || (tc.reason != "" && r.body["reason"] != tc.reason) {
			t.Errorf("%s: %s", tc.path, r.raw)
		}
	}
	if r := send(t, "GET", u+"/v1/orders/ord_9", "", nil); r.status != 404 || r.code() != "order_not_found" {
		t.Fatalf("unknown order: %d %s", r.status, r.raw)
	}
}

func TestFileStoresSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	sb, err := sandbox.Start(context.Background(), sandbox.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	first := send(t, "POST", sb.URLs().Payments+"/v1/refunds", "persist", refund)
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	sb2, c := start(t, sandbox.Options{Dir: dir})
	again := send(t, "POST", sb2.URLs().Payments+"/v1/refunds", "persist", refund)
	if again.id() != first.id() || !again.replayed {
		t.Fatalf("after restart: %s, want the replay of %s", again.raw, first.id())
	}
	if e := effects(t, c, ""); len(e) != 1 {
		t.Fatalf("effects after restart = %+v", e)
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *sandbox.Sandbox, 1)
	done := make(chan error, 1)
	go func() { done <- sandbox.Serve(ctx, sandbox.Options{}, func(s *sandbox.Sandbox) { ready <- s }) }()
	sb := <-ready
	if _, err := sb.Client().URLs(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := sandbox.NewClient(sb.BaseURL(), nil).Calls(context.Background()); err == nil {
		t.Fatal("the sandbox still answers after Serve returned")
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond) // polling the provider's store with a deadline
	}
}

// A slow commit lands after the client gave up, never before its delay, and
// a keyed provider holds the key in flight meanwhile.
func TestSlowCommitLandsAfterTheClientGaveUp(t *testing.T) {
	reached := make(chan string, 4)
	_, c := start(t, sandbox.Options{Hook: func(_ context.Context, op string) {
		if op == "mail.send" || op == "refunds.create" {
			reached <- op
		}
	}})
	ctx := context.Background()
	u, _ := c.URLs(ctx)
	const delay = 300 * time.Millisecond

	fault(t, c, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.SlowCommit, Delay: delay})
	sent := time.Now()
	b, _ := json.Marshal(map[string]any{"to": "a@example.com", "subject": "s", "body": "b", "reference": "slow-1"})
	rctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	req, _ := http.NewRequestWithContext(rctx, "POST", u.Mail+"/v1/messages", bytes.NewReader(b))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the slow commit answered %d within 20ms, want no answer before %s", resp.StatusCode, delay)
	}
	cancel()
	if n := len(effects(t, c, sandbox.Mail)); n != 0 {
		t.Fatalf("%d messages right after the client gave up, want 0 before the commit", n)
	}
	if op := <-reached; op != "mail.send" {
		t.Fatalf("hook reached %s", op)
	}
	var got []sandbox.Effect
	eventually(t, 5*time.Second, "the abandoned send commits", func() bool { got = effects(t, c, sandbox.Mail); return len(got) == 1 })
	if got[0].Key != "slow-1" || got[0].CreatedAt.Sub(sent) < delay {
		t.Fatalf("effect %+v committed %s after the send, want the reference slow-1 and at least %s", got[0], got[0].CreatedAt.Sub(sent), delay)
	}

	// Keyed: the key is in flight until the slow commit lands.
	fault(t, c, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.SlowCommit, Delay: delay})
	done := make(chan reply, 1)
	go func() {
		done <- send(t, "POST", u.Payments+"/v1/refunds", "slow-k", map[string]any{"order_id": "ord_1001", "amount_minor": 100, "currency": "EUR"})
	}()
	if op := <-reached; op != "refunds.create" {
		t.Fatalf("hook reached %s", op)
	}
	if r := <-done; r.status != 201 {
		t.Fatalf("slow refund: %d %s", r.status, r.raw)
	}
	if r := send(t, "GET", u.Payments+"/v1/refunds?idempotency_key=slow-k", "", nil); r.status != 200 {
		t.Fatalf("lookup after the slow commit: %d", r.status)
	}
}

// A visibility lag hides an effect from its lookup for the lag after its
// commit, on every lookup, then shows it.
func TestVisibilityLagHidesFreshEffects(t *testing.T) {
	_, c := start(t, sandbox.Options{})
	ctx := context.Background()
	u, _ := c.URLs(ctx)
	const lag = 400 * time.Millisecond
	for _, op := range []string{"refunds.lookup", "tickets.search", "invoices.lookup", "mail.lookup"} {
		fault(t, c, sandbox.FaultSpec{Op: op, Fault: sandbox.VisibilityLag, Delay: lag, Count: -1})
	}
	r := send(t, "POST", u.Payments+"/v1/refunds", "vis-r", map[string]any{"order_id": "ord_1001", "amount_minor": 100, "currency": "EUR"})
	tk := send(t, "POST", u.CRM+"/v1/tickets", "", map[string]any{"subject": "s", "external_ref": "vis-t"})
	inv := send(t, "POST", u.Accounting+"/v1/invoices", "", map[string]any{"integration_key": "vis-i", "customer_id": "cus_ana", "amount_minor": 100, "currency": "EUR"})
	m := send(t, "POST", u.Mail+"/v1/messages", "", map[string]any{"to": "a@example.com", "subject": "s", "body": "b", "reference": "vis-m"})
	committed := time.Now()
	for _, w := range []reply{r, tk, inv, m} {
		if w.status/100 != 2 {
			t.Fatalf("write: %d %s", w.status, w.raw)
		}
	}
	visible := func() (n int) {
		if send(t, "GET", u.Payments+"/v1/refunds?idempotency_key=vis-r", "", nil).status == 200 {
			n++
		}
		if s := send(t, "GET", u.CRM+"/v1/tickets?external_ref=vis-t", "", nil); len(s.body["tickets"].([]any)) == 1 {
			n++
		}
		if send(t, "GET", u.Accounting+"/v1/documents?integration_key=vis-i", "", nil).status == 200 {
			n++
		}
		if s := send(t, "GET", u.Mail+"/v1/messages?reference=vis-m", "", nil); len(s.body["messages"].([]any)) == 1 {
			n++
		}
		return n
	}
	if n := visible(); n != 0 && time.Since(committed) < lag {
		t.Fatalf("%d of 4 fresh effects visible within the lag", n)
	}
	eventually(t, 5*time.Second, "every effect visible after the lag", func() bool { return visible() == 4 })
	if time.Since(committed) < lag {
		t.Fatalf("effects visible %s after the commit, before the lag %s", time.Since(committed), lag)
	}
	if s := send(t, "GET", u.CRM+"/v1/tickets?external_ref=vis-t", "", nil); s.body["index_caught_up"] != true {
		t.Fatalf("the search says the index is behind after the lag: %s", s.raw)
	}
}

// The mail relay keeps a reference but never deduplicates by it.
func TestMailReferenceIsSearchableNotDeduplicated(t *testing.T) {
	_, c := start(t, sandbox.Options{})
	u, _ := c.URLs(context.Background())
	msg := map[string]any{"to": "a@example.com", "subject": "s", "body": "b", "reference": "twice"}
	a, b := send(t, "POST", u.Mail+"/v1/messages", "", msg), send(t, "POST", u.Mail+"/v1/messages", "", msg)
	if a.status != 202 || b.status != 202 || a.id() == b.id() {
		t.Fatalf("two sends: %d %s, %d %s; want two messages", a.status, a.raw, b.status, b.raw)
	}
	s := send(t, "GET", u.Mail+"/v1/messages?reference=twice", "", nil)
	if got := s.body["messages"].([]any); len(got) != 2 {
		t.Fatalf("search: %s, want both messages", s.raw)
	}
	if s := send(t, "GET", u.Mail+"/v1/messages?reference=never", "", nil); len(s.body["messages"].([]any)) != 0 {
		t.Fatalf("search for a reference never sent: %s", s.raw)
	}
	if s := send(t, "GET", u.Mail+"/v1/messages", "", nil); s.status != 400 {
		t.Fatalf("search without a reference: %d", s.status)
	}
	long := map[string]any{"to": "a@example.com", "subject": "s", "body": "b", "reference": strings.Repeat("r", 513)}
	if r := send(t, "POST", u.Mail+"/v1/messages", "", long); r.status != 400 || !strings.Contains(r.raw, "limit is 512") {
		t.Fatalf("an oversized reference: %d %s", r.status, r.raw)
	}
	for _, e := range effects(t, c, sandbox.Mail) {
		if e.Key != "twice" {
			t.Fatalf("effect %+v, want the reference as its key", e)
		}
	}
}

// FuzzFaultSpec: whatever the admin API is sent as a fault either is
// refused or names a known operation and kind, with a delay in bounds for
// the kinds that need one.
func FuzzFaultSpec(f *testing.F) {
	for _, s := range []string{
		`{"op":"mail.send","fault":"slow_commit","delay":"30s"}`,
		`{"op":"mail.lookup","fault":"visibility_lag","delay":"2s","count":-1}`,
		`{"op":"mail.send","fault":"slow_commit"}`,
		`{"op":"mail.send","fault":"slow_commit","delay":"-1s"}`,
		`{"op":"mail.send","fault":"slow_commit","delay":"9999999h"}`,
		`{"op":"refunds.lookup","fault":"visibility_lag","delay":"1ns"}`,
		`{"op":"refunds.create","fault":"visibility_lag","delay":"1s"}`,
		`{"op":"refunds.create","fault":"reject","status":429}`,
		`{"op":"","fault":""}`, `null`, `[]`, `{"delay":17}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var fs sandbox.FaultSpec
		if err := json.Unmarshal([]byte(s), &fs); err != nil {
			return
		}
		if fs.Validate() != nil {
			return
		}
		if _, ok := sandbox.Ops[fs.Op]; !ok {
			t.Fatalf("accepted %q with an unknown op", s)
		}
		switch fs.Fault {
		case sandbox.SlowCommit, sandbox.VisibilityLag, sandbox.Delay:
			if fs.Delay <= 0 || (fs.Fault != sandbox.Delay && fs.Delay > sandbox.MaxFaultDelay) {
				t.Fatalf("accepted %q with delay %s", s, fs.Delay)
			}
		}
	})
}

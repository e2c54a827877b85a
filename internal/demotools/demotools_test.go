package demotools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool"
)

type env struct {
	sb  *sandbox.Sandbox
	c   *sandbox.Client
	reg *tool.Registry
}

func setup(t *testing.T, opts sandbox.Options) env {
	t.Helper()
	sb, err := sandbox.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	reg, err := demotools.Registry(demotools.SandboxConfig(sb.BaseURL()))
	if err != nil {
		t.Fatal(err)
	}
	return env{sb: sb, c: sb.Client(), reg: reg}
}

func (e env) run(t *testing.T, name, key string, args any) (tool.Result, error) {
	t.Helper()
	tl, ok := e.reg.Tool(name)
	if !ok {
		t.Fatalf("tool %s not registered", name)
	}
	raw, _ := json.Marshal(args)
	if errs := tl.Spec().Args.Check("args", raw); len(errs) > 0 {
		t.Fatalf("%s args refused by its own schema: %v", name, errs)
	}
	return tl.Execute(context.Background(), tool.Call{Key: key, Args: raw, Attempt: 1})
}

func (e env) reconcile(t *testing.T, name, key string) (tool.Lookup, error) {
	t.Helper()
	return e.reg.Reconcile(context.Background(), name, key)
}

func (e env) fault(t *testing.T, f sandbox.FaultSpec) {
	t.Helper()
	if err := e.c.Fault(context.Background(), f); err != nil {
		t.Fatal(err)
	}
}

func (e env) effects(t *testing.T, provider string) []sandbox.Effect {
	t.Helper()
	ef, err := e.c.Effects(context.Background(), provider)
	if err != nil {
		t.Fatal(err)
	}
	return ef
}

func (e env) calls(t *testing.T, op string) int {
	t.Helper()
	m, err := e.c.Calls(context.Background(), op)
	if err != nil {
		t.Fatal(err)
	}
	return m[op]
}

func wantKind(t *testing.T, err error, k tool.Kind) {
	t.Helper()
	if tool.KindOf(err) != k || err == nil {
		t.Fatalf("kind = %s, want %s (err %v)", tool.KindOf(err), k, err)
	}
}

func TestSpecsWithoutSandbox(t *testing.T) {
	specs := demotools.Specs()
	want := map[string]tool.Class{
		"query_order": tool.Read, "check_refund_policy": tool.Read, "apply_refund": tool.NonIdempotentWrite,
		"create_payment": tool.IdempotentWrite, "create_ticket": tool.ConditionalWrite, "create_invoice": tool.ConditionalWrite,
		"send_email": tool.NonIdempotentWrite, "reverse_refund": tool.IdempotentWrite, "void_payment": tool.IdempotentWrite,
		"storno_invoice": tool.ConditionalWrite, "close_ticket": tool.ConditionalWrite,
	}
	if len(specs) != len(want) {
		t.Fatalf("%d specs, want %d", len(specs), len(want))
	}
	for name, class := range want {
		if specs[name].Class != class {
			t.Errorf("%s: class %s, want %s", name, specs[name].Class, class)
		}
	}
	r := specs["apply_refund"]
	if r.Compensator != "reverse_refund" || r.Guard == nil || r.Guard.Scope != "refund-per-order" || !r.Guard.Hold ||
		!r.Approval.Required(json.RawMessage(`{"amount_minor":50001}`)) || r.Approval.Required(json.RawMessage(`{"amount_minor":50000}`)) {
		t.Fatalf("apply_refund spec = %+v", r)
	}
	if !specs["send_email"].NoLookup || specs["send_email"].Compensable() {
		t.Fatal("send_email must be NoLookup and not compensable")
	}
	if _, err := tool.NewRegistry(demotools.All(demotools.Config{})...); err != nil {
		t.Fatalf("the registry refuses the demo tools: %v", err)
	}
}

// The demo specs bound what a plan may ask: approval of large payments,
// money ceilings per tool, e-mail addresses, multi-line bodies.
func TestSpecsBoundTheArgs(t *testing.T) {
	specs := demotools.Specs()
	pay := specs[demotools.CreatePayment]
	if !pay.Approval.Required(json.RawMessage(`{"amount_minor":500001}`)) || pay.Approval.Required(json.RawMessage(`{"amount_minor":500000}`)) {
		t.Fatalf("create_payment must wait for approval above 5,000.00: %+v", pay.Approval)
	}
	check := func(name, args string) []tool.FieldError {
		t.Helper()
		return specs[name].CheckArgs("args", json.RawMessage(args), tool.ArgLimits{})
	}
	for _, c := range []struct{ tool, args, want string }{
		{demotools.CreateInvoice, `{"customer_id":"cus_ana","amount_minor":9223372036854775807,"currency":"EUR"}`, "above this tool's ceiling of 10000000"},
		{demotools.CreatePayment, `{"customer_id":"cus_ana","amount_minor":10000001,"currency":"EUR","payment_method":"tok_visa"}`, "ceiling of 10000000"},
		{demotools.ApplyRefund, `{"order_id":"o","amount_minor":5000001,"currency":"EUR"}`, "ceiling of 5000000"},
		{demotools.SendEmail, `{"to":"Ana <ana@example.com>","subject":"s","body":"b"}`, "bare e-mail address"},
		{demotools.SendEmail, `{"to":"ana@example.com","subject":"two\nlines","body":"b"}`, "control character"},
		{demotools.CreateTicket, `{"subject":"s","body":"card 4111 1111 1111 1111 charged twice"}`, "holds a card number"},
		{demotools.CreateTicket, `{"subject":"s","body":"` + strings.Repeat("x", demotools.MaxBodyLen+1) + `"}`, "the limit is 10000 bytes"},
	} {
		errs := check(c.tool, c.args)
		if len(errs) != 1 || !strings.Contains(errs[0].Problem, c.want) {
			t.Errorf("%s %.80s: got %v, want one problem saying %q", c.tool, c.args, errs, c.want)
		}
	}
	for _, c := range []struct{ tool, args string }{
		{demotools.SendEmail, `{"to":"ana@example.com","subject":"Your refund","body":"Hello,\n\tWe refunded 129.00 EUR.\n"}`},
		{demotools.CreateInvoice, `{"customer_id":"cus_ana","amount_minor":10000000,"currency":"EUR","description":"line 1\nline 2"}`},
		{demotools.CreateTicket, `{"subject":"s","body":"` + strings.Repeat("x", demotools.MaxBodyLen) + `"}`},
	} {
		if errs := check(c.tool, c.args); len(errs) != 0 {
			t.Errorf("%s %.80s refused: %v", c.tool, c.args, errs)
		}
	}
}

// broken is a write that declares no class and cannot look itself up.
type broken struct{ name string }

func (b broken) Spec() tool.Spec { return tool.Spec{Name: b.name, Timeout: time.Second} }
func (b broken) Execute(context.Context, tool.Call) (tool.Result, error) {
	return tool.Result{}, nil
}

func TestRegistryNamesOffenders(t *testing.T) {
	_, err := demotools.Registry(demotools.Config{}, broken{"wire_money"}, broken{"apply_refund"})
	if err == nil {
		t.Fatal("a broken tool was accepted")
	}
	for _, want := range []string{"wire_money: declares no side-effect class", "apply_refund: registered twice"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestReads(t *testing.T) {
	e := setup(t, sandbox.Options{})
	res, err := e.run(t, "query_order", "s:1:0:query_order", map[string]any{"order_id": "ord_1001"})
	if err != nil || res.ExternalID != "ord_1001" || !strings.Contains(string(res.Data), `"total_minor":12900`) {
		t.Fatalf("query_order: %+v %v", res, err)
	}
	_, err = e.run(t, "query_order", "k", map[string]any{"order_id": "ord_404"})
	wantKind(t, err, tool.KindRejected)
	if tool.CodeOf(err) != "order_not_found" {
		t.Fatalf("code %q", tool.CodeOf(err))
	}
	if _, err := e.run(t, "check_refund_policy", "k", map[string]any{"order_id": "ord_1001", "amount_minor": 12900}); err != nil {
		t.Fatal(err)
	}
	_, err = e.run(t, "check_refund_policy", "k", map[string]any{"order_id": "ord_1003"})
	wantKind(t, err, tool.KindRejected)
	if tool.CodeOf(err) != "refund_window_closed" {
		t.Fatalf("code %q", tool.CodeOf(err))
	}
	e.fault(t, sandbox.FaultSpec{Op: "orders.get", Fault: sandbox.HTTP503})
	_, err = e.run(t, "query_order", "k", map[string]any{"order_id": "ord_1001"})
	wantKind(t, err, tool.KindUnavailable)
}

func TestApplyRefundLostResponseReconcilesToOneRefund(t *testing.T) {
	e := setup(t, sandbox.Options{})
	key := "sess:1:2:apply_refund"
	args := map[string]any{"order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR"}

	if l, err := e.reconcile(t, "apply_refund", key); err != nil || l.Status != tool.Absent || !l.Authoritative {
		t.Fatalf("before: %+v %v, want an authoritative absent", l, err)
	}
	e.fault(t, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop})
	_, err := e.run(t, "apply_refund", key, args)
	wantKind(t, err, tool.KindUnknown)

	l, err := e.reconcile(t, "apply_refund", key)
	if err != nil || l.Status != tool.Found || l.Result.ExternalID == "" {
		t.Fatalf("reconcile: %+v %v, want found", l, err)
	}
	res, err := e.run(t, "apply_refund", key, args)
	if err != nil || res.ExternalID != l.Result.ExternalID {
		t.Fatalf("retry with the same key: %+v %v, want the same refund %s", res, err, l.Result.ExternalID)
	}
	_, err = e.run(t, "apply_refund", key, map[string]any{"order_id": "ord_1001", "amount_minor": 12000, "currency": "EUR"})
	wantKind(t, err, tool.KindConflict)
	if ef := e.effects(t, sandbox.Payments); len(ef) != 1 || ef[0].AmountMinor != 12900 {
		t.Fatalf("effects = %+v, want exactly one refund", ef)
	}

	e.fault(t, sandbox.FaultSpec{Op: "refunds.lookup", Fault: sandbox.LookupUnavailable})
	if l, err := e.reconcile(t, "apply_refund", key); err == nil || l.Status != tool.Unknown {
		t.Fatalf("reconcile with the lookup down: %+v %v, want unknown with an error", l, err)
	}
}

func TestCreatePaymentRetriesAndRejections(t *testing.T) {
	e := setup(t, sandbox.Options{})
	args := map[string]any{"customer_id": "cus_ana", "amount_minor": 5000, "currency": "EUR", "payment_method": "tok_visa"}
	e.fault(t, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.HTTP429})
	_, err := e.run(t, "create_payment", "p:1:0:create_payment", args)
	wantKind(t, err, tool.KindThrottled)
	e.fault(t, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.DropBeforeCommit})
	_, err = e.run(t, "create_payment", "p:1:0:create_payment", args)
	wantKind(t, err, tool.KindUnknown)
	if l, _ := e.reconcile(t, "create_payment", "p:1:0:create_payment"); l.Status != tool.Absent || !l.Authoritative {
		t.Fatalf("after drop_before_commit: %+v, want authoritative absent", l)
	}
	res, err := e.run(t, "create_payment", "p:1:0:create_payment", args)
	if err != nil || !strings.HasPrefix(res.ExternalID, "pay_") {
		t.Fatalf("payment: %+v %v", res, err)
	}
	e.fault(t, sandbox.FaultSpec{Op: "payments.create", Fault: sandbox.Reject, Status: 402, Code: "card_declined"})
	_, err = e.run(t, "create_payment", "p:1:1:create_payment", args)
	wantKind(t, err, tool.KindRejected)
	if tool.CodeOf(err) != "card_declined" {
		t.Fatalf("code %q", tool.CodeOf(err))
	}
	if n := len(e.effects(t, sandbox.Payments)); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
	if got := e.calls(t, "payments.create"); got != 4 {
		t.Fatalf("payments.create calls = %d, want 4", got)
	}
}

func TestCreateTicketUpsertAndLaggingSearch(t *testing.T) {
	e := setup(t, sandbox.Options{IndexLag: sandbox.IndexLag{Searches: 1}})
	key := "s:1:3:create_ticket"
	e.fault(t, sandbox.FaultSpec{Op: "tickets.create", Fault: sandbox.CommitThenDrop})
	_, err := e.run(t, "create_ticket", key, map[string]any{"subject": "Refund", "order_id": "ord_1001"})
	wantKind(t, err, tool.KindUnknown)
	l, err := e.reconcile(t, "create_ticket", key)
	if err != nil || l.Status != tool.Absent || l.Authoritative {
		t.Fatalf("search while the index lags: %+v %v, want a non-authoritative absent", l, err)
	}
	l, err = e.reconcile(t, "create_ticket", key)
	if err != nil || l.Status != tool.Found {
		t.Fatalf("search after the lag: %+v %v, want found", l, err)
	}
	res, err := e.run(t, "create_ticket", key, map[string]any{"subject": "Refund", "order_id": "ord_1001"})
	if err != nil || res.ExternalID != l.Result.ExternalID {
		t.Fatalf("upsert again: %+v %v, want %s", res, err, l.Result.ExternalID)
	}
	if n := len(e.effects(t, sandbox.CRM)); n != 1 {
		t.Fatalf("%d tickets, want 1", n)
	}
	if l, _ := e.reconcile(t, "create_ticket", "never"); l.Status != tool.Absent || !l.Authoritative {
		t.Fatalf("search with the index caught up: %+v, want authoritative absent", l)
	}
	e.fault(t, sandbox.FaultSpec{Op: "tickets.search", Fault: sandbox.LookupLag})
	if l, _ := e.reconcile(t, "create_ticket", key); l.Status != tool.Absent || l.Authoritative {
		t.Fatalf("lookup_lag: %+v, want non-authoritative absent", l)
	}
}

func TestCreateInvoice(t *testing.T) {
	e := setup(t, sandbox.Options{})
	key := "s:1:1:create_invoice"
	args := map[string]any{"customer_id": "cus_ana", "amount_minor": 12900, "currency": "EUR"}
	res, err := e.run(t, "create_invoice", key, args)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.run(t, "create_invoice", key, args)
	if err != nil || again.ExternalID != res.ExternalID {
		t.Fatalf("same key: %+v %v", again, err)
	}
	_, err = e.run(t, "create_invoice", key, map[string]any{"customer_id": "cus_ana", "amount_minor": 1, "currency": "EUR"})
	wantKind(t, err, tool.KindConflict)
	if l, err := e.reconcile(t, "create_invoice", key); err != nil || l.Status != tool.Found || l.Result.ExternalID != res.ExternalID {
		t.Fatalf("reconcile: %+v %v", l, err)
	}
	if n := len(e.effects(t, sandbox.Accounting)); n != 1 {
		t.Fatalf("%d invoices, want 1", n)
	}
}

func TestSendEmailHasNoLookup(t *testing.T) {
	e := setup(t, sandbox.Options{})
	tl, _ := e.reg.Tool("send_email")
	if _, ok := tl.(tool.Reconciler); ok {
		t.Fatal("send_email must not claim a lookup the relay does not have")
	}
	e.fault(t, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop})
	_, err := e.run(t, "send_email", "s:1:4:send_email", map[string]any{"to": "ana@example.com", "subject": "Refund", "body": "Done."})
	wantKind(t, err, tool.KindUnknown)
	if l, err := e.reconcile(t, "send_email", "s:1:4:send_email"); err != nil || l.Status != tool.Unknown {
		t.Fatalf("reconcile: %+v %v, want unknown", l, err)
	}
	if n := len(e.effects(t, sandbox.Mail)); n != 1 {
		t.Fatalf("%d emails, want 1 (the lost answer was committed)", n)
	}
}

// TestFoundEffectsAreCheckedAgainstTheirArgs: every write that can look
// itself up, and every compensator, declares how a found effect is matched
// to the call, and the sandbox's lookup answers carry the fields it names:
// the call's own effect matches, the same key with other arguments does not.
func TestFoundEffectsAreCheckedAgainstTheirArgs(t *testing.T) {
	e := setup(t, sandbox.Options{})
	for _, tc := range []struct {
		tool  string
		args  map[string]any
		other map[string]any // the same key, other arguments
	}{
		{demotools.ApplyRefund, map[string]any{"order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR", "reason": "damaged"},
			map[string]any{"order_id": "ord_1001", "amount_minor": 15000, "currency": "EUR", "reason": "damaged"}},
		{demotools.CreatePayment, map[string]any{"customer_id": "cus_ana", "order_id": "ord_1001", "amount_minor": 5000, "currency": "EUR", "payment_method": "tok_visa", "description": "deposit"},
			map[string]any{"customer_id": "cus_ana", "order_id": "ord_1001", "amount_minor": 5000, "currency": "EUR", "payment_method": "tok_mastercard", "description": "deposit"}},
		{demotools.CreateTicket, map[string]any{"subject": "Refund", "body": "late parcel", "order_id": "ord_1001"},
			map[string]any{"subject": "Refund", "body": "late parcel", "order_id": "ord_1001", "priority": "urgent"}},
		{demotools.CreateInvoice, map[string]any{"customer_id": "cus_ana", "order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR", "description": "order"},
			map[string]any{"customer_id": "cus_bob", "order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR", "description": "order"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			tl, _ := e.reg.Tool(tc.tool)
			if len(tl.Spec().Match) == 0 {
				t.Fatalf("%s declares no Match", tc.tool)
			}
			key := "match:1:1:" + tc.tool
			res, err := e.run(t, tc.tool, key, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			look, err := e.reconcile(t, tc.tool, key)
			if err != nil || look.Status != tool.Found {
				t.Fatalf("reconcile: %+v %v", look, err)
			}
			own, _ := json.Marshal(tc.args)
			if d := tool.Differences(tl, own, look.Result); len(d) > 0 {
				t.Fatalf("the call's own effect does not match: %v (answer %s)", d, look.Result.Data)
			}
			other, _ := json.Marshal(tc.other)
			if d := tool.Differences(tl, other, look.Result); len(d) != 1 {
				t.Fatalf("other arguments under the same key: differences %v, want exactly one", d)
			}

			// Its compensator: the reversal found under the compensation key
			// must reverse the effect the call names.
			comp, _ := e.reg.Tool(tl.Spec().Compensator)
			rev := tool.Reversal{OriginalKey: key, OriginalTool: tc.tool, OriginalExternalID: res.ExternalID, OriginalArgs: own}
			revArgs, _ := json.Marshal(rev)
			if _, err := comp.Execute(context.Background(), tool.Call{Key: tool.CompensationKey(key), Args: revArgs, Attempt: 1}); err != nil {
				t.Fatal(err)
			}
			rl, err := e.reconcile(t, comp.Spec().Name, tool.CompensationKey(key))
			if err != nil || rl.Status != tool.Found {
				t.Fatalf("reconcile the reversal: %+v %v", rl, err)
			}
			if d := tool.Differences(comp, revArgs, rl.Result); len(d) > 0 {
				t.Fatalf("the reversal's own effect does not match: %v (answer %s)", d, rl.Result.Data)
			}
			rev.OriginalExternalID = "someone_else_1"
			otherRev, _ := json.Marshal(rev)
			if d := tool.Differences(comp, otherRev, rl.Result); len(d) != 1 {
				t.Fatalf("a reversal of another effect: differences %v, want one", d)
			}
			rev.OriginalExternalID = ""
			noID, _ := json.Marshal(rev)
			if d := tool.Differences(comp, noID, rl.Result); len(d) > 0 {
				t.Fatalf("a reversal that names no original is not compared: %v", d)
			}
		})
	}
}

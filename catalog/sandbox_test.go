package catalog_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool"
)

// sandboxCatalog loads examples/sandbox.yaml against a running sandbox.
func sandboxCatalog(t *testing.T) (*sandbox.Sandbox, *tool.Registry) {
	t.Helper()
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	env := map[string]string{"AGENTSAGA_SANDBOX_URL": sb.BaseURL()}
	c, err := catalog.LoadWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, "examples/sandbox.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	return sb, reg
}

// The catalogue's specs are demotools.Specs(), field by field, except
// System, which the Go tools leave empty.
func TestSandboxCatalogSpecsMatchDemoTools(t *testing.T) {
	_, reg := sandboxCatalog(t)
	want := demotools.Specs()
	got := reg.Specs()
	if len(got) != len(want) {
		t.Errorf("catalogue has %d tools, demotools %d", len(got), len(want))
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing from the catalogue", name)
			continue
		}
		if g.System == "" {
			t.Errorf("%s: no system", name)
		}
		g.System = ""
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.MarshalIndent(g, "", " ")
			wj, _ := json.MarshalIndent(w, "", " ")
			t.Errorf("%s: spec differs\ncatalogue: %s\ndemotools: %s", name, gj, wj)
		}
	}
}

func effects(t *testing.T, sb *sandbox.Sandbox, provider string) []sandbox.Effect {
	t.Helper()
	ef, err := sb.Client().Effects(context.Background(), provider)
	if err != nil {
		t.Fatal(err)
	}
	return ef
}

func exec(t *testing.T, reg *tool.Registry, name, key string, args any) (tool.Result, error) {
	t.Helper()
	tl, ok := reg.Tool(name)
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	raw, _ := json.Marshal(args)
	return tl.Execute(context.Background(), tool.Call{Key: key, Args: raw, Attempt: 1})
}

// Each keyed write of the catalogue, against the real sandbox: the answer is
// lost after commit (UNKNOWN), the lookup finds the effect, a second attempt
// with the same key makes no second effect, and the reversal (with and
// without the original's id) makes exactly one reversal entry under its own
// key. Effects are counted in the sandbox's stores.
func TestSandboxCatalogLostAnswerLookupAndReversal(t *testing.T) {
	sb, reg := sandboxCatalog(t)
	ctx := context.Background()
	for _, tc := range []struct {
		tool, op, reverseOp, provider, kind, reversalKind string
		args                                              map[string]any
	}{
		{"apply_refund", "refunds.create", "refunds.reverse", "payments", "refund", "refund_reversal",
			map[string]any{"order_id": "ord_1001", "amount_minor": 1000, "currency": "EUR", "reason": "damaged"}},
		{"create_payment", "payments.create", "payments.reverse", "payments", "payment", "payment_reversal",
			map[string]any{"customer_id": "cus_ana", "amount_minor": 2500, "currency": "EUR", "payment_method": "tok_visa"}},
		{"create_ticket", "tickets.create", "tickets.close", "crm", "ticket", "ticket_closure",
			map[string]any{"subject": "Refund issued", "order_id": "ord_1001"}},
		{"create_invoice", "invoices.create", "invoices.storno", "accounting", "invoice", "invoice_storno",
			map[string]any{"customer_id": "cus_ana", "amount_minor": 4200, "currency": "EUR"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			key := "s1:1:1:" + tc.tool
			if err := sb.Client().Fault(ctx, sandbox.FaultSpec{Op: tc.op, Fault: sandbox.CommitThenDrop}); err != nil {
				t.Fatal(err)
			}
			_, err := exec(t, reg, tc.tool, key, tc.args)
			if k := tool.KindOf(err); k != tool.KindUnknown {
				t.Fatalf("lost answer after commit: kind %s (%v), want unknown", k, err)
			}
			look, err := reg.Reconcile(ctx, tc.tool, key)
			if err != nil || look.Status != tool.Found || look.Result.ExternalID == "" {
				t.Fatalf("lookup after the lost answer: %+v, %v; want found with an id", look, err)
			}
			tl, _ := reg.Tool(tc.tool)
			raw, _ := json.Marshal(tc.args)
			if d := tool.Differences(tl, raw, look.Result); len(d) > 0 {
				t.Errorf("the found effect does not match its own args: %v", d)
			}
			res, err := exec(t, reg, tc.tool, key, tc.args)
			if err != nil || res.ExternalID != look.Result.ExternalID {
				t.Fatalf("retry with the same key: %+v, %v; want the same effect %s", res, err, look.Result.ExternalID)
			}
			spec, _ := reg.Spec(tc.tool)
			rev := tool.Reversal{OriginalKey: key, OriginalTool: tc.tool, OriginalArgs: raw}
			// Without the id: the reversal looks the original up first
			// (the CRM's lagging search may make that impossible: then it
			// asks to retry, and the id is passed).
			_, err = exec(t, reg, spec.Compensator, tool.CompensationKey(key), rev)
			if err != nil {
				if k := tool.KindOf(err); tc.tool != "create_ticket" || k != tool.KindUnavailable {
					t.Fatalf("reversal without the id: %v (%s)", err, k)
				}
				rev.OriginalExternalID = res.ExternalID
				if _, err := exec(t, reg, spec.Compensator, tool.CompensationKey(key), rev); err != nil {
					t.Fatalf("reversal with the id: %v", err)
				}
			}
			// Again, with the id, and its answer lost: UNKNOWN, and the
			// reversal's own key dedupes it at the provider.
			rev.OriginalExternalID = res.ExternalID
			if err := sb.Client().Fault(ctx, sandbox.FaultSpec{Op: tc.reverseOp, Fault: sandbox.CommitThenDrop}); err != nil {
				t.Fatal(err)
			}
			if _, err := exec(t, reg, spec.Compensator, tool.CompensationKey(key), rev); tool.KindOf(err) != tool.KindUnknown {
				t.Fatalf("second reversal, answer lost: %v, want unknown", err)
			}
			rl, err := reg.Reconcile(ctx, spec.Compensator, tool.CompensationKey(key))
			if err != nil || rl.Status != tool.Found {
				t.Fatalf("reversal lookup: %+v, %v", rl, err)
			}
			var n, nrev int
			for _, e := range effects(t, sb, tc.provider) {
				switch e.Kind {
				case tc.kind:
					if e.Key == key {
						n++
					}
				case tc.reversalKind:
					if e.Reverses == res.ExternalID {
						nrev++
						if e.Key != tool.CompensationKey(key) {
							t.Errorf("reversal committed under %q, want its own key %q", e.Key, tool.CompensationKey(key))
						}
					}
				}
			}
			if n != 1 || nrev != 1 {
				t.Errorf("the provider holds %d %s and %d %s for the intent, want 1 and 1", n, tc.kind, nrev, tc.reversalKind)
			}
		})
	}
}

// The reads and the e-mail, against the sandbox.
func TestSandboxCatalogReadsAndEmail(t *testing.T) {
	sb, reg := sandboxCatalog(t)
	res, err := exec(t, reg, "query_order", "s:1:1:query_order", map[string]any{"order_id": "ord_1001"})
	if err != nil || res.ExternalID != "ord_1001" {
		t.Fatalf("query_order: %+v, %v", res, err)
	}
	if _, err := exec(t, reg, "check_refund_policy", "s:1:2:check_refund_policy", map[string]any{"order_id": "ord_1001", "amount_minor": 1000}); err != nil {
		t.Fatalf("check_refund_policy within the policy: %v", err)
	}
	_, err = exec(t, reg, "check_refund_policy", "s:1:3:check_refund_policy", map[string]any{"order_id": "ord_1001", "amount_minor": 4_000_000})
	if tool.KindOf(err) != tool.KindRejected {
		t.Fatalf("check_refund_policy above the order: %v, want a rejection", err)
	}
	if _, err := exec(t, reg, "send_email", "s:1:4:send_email", map[string]any{"to": "ana@example.com", "subject": "Hi", "body": "Your refund."}); err != nil {
		t.Fatalf("send_email: %v", err)
	}
	if n := len(effects(t, sb, "mail")); n != 1 {
		t.Errorf("mail holds %d messages, want 1", n)
	}
}

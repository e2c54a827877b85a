package compensators_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/agentsaga/agentsaga/compensators"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool"
)

type env struct {
	c   *sandbox.Client
	reg *tool.Registry
}

func setup(t *testing.T) env {
	t.Helper()
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	reg, err := demotools.Registry(demotools.SandboxConfig(sb.BaseURL()))
	if err != nil {
		t.Fatal(err)
	}
	return env{c: sb.Client(), reg: reg}
}

func (e env) exec(t *testing.T, name, key string, args any) (tool.Result, error) {
	t.Helper()
	tl, ok := e.reg.Tool(name)
	if !ok {
		t.Fatalf("%s not registered", name)
	}
	raw, _ := json.Marshal(args)
	return tl.Execute(context.Background(), tool.Call{Key: key, Args: raw, Attempt: 1})
}

// compensate runs name's compensator as the saga does: key + ":compensate",
// a tool.Reversal as args.
func (e env) compensate(t *testing.T, name, key string, res tool.Result, args any, withID bool) (tool.Result, error) {
	t.Helper()
	spec, _ := e.reg.Spec(name)
	raw, _ := json.Marshal(args)
	rev := tool.Reversal{OriginalKey: key, OriginalTool: name, OriginalArgs: raw}
	if withID {
		rev.OriginalExternalID = res.ExternalID
	}
	return e.exec(t, spec.Compensator, tool.CompensationKey(key), rev)
}

func (e env) effects(t *testing.T, provider string) []sandbox.Effect {
	t.Helper()
	ef, err := e.c.Effects(context.Background(), provider)
	if err != nil {
		t.Fatal(err)
	}
	return ef
}

func TestSpecs(t *testing.T) {
	for _, tl := range compensators.New(compensators.Config{}) {
		s := tl.Spec()
		if !s.Reversal || !s.Class.IsWrite() || s.Timeout <= 0 {
			t.Errorf("%s: %+v, want a Reversal write with a timeout", s.Name, s)
		}
		if _, ok := tl.(tool.Reconciler); !ok {
			t.Errorf("%s cannot look itself up", s.Name)
		}
	}
}

func TestEachCompensatorReversesOnceWithANewEntry(t *testing.T) {
	for _, tc := range []struct {
		tool, provider, reversalKind string
		args                         map[string]any
		withID                       bool
	}{
		{"apply_refund", sandbox.Payments, "refund_reversal", map[string]any{"order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR"}, true},
		{"apply_refund", sandbox.Payments, "refund_reversal", map[string]any{"order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR"}, false},
		{"create_payment", sandbox.Payments, "payment_reversal", map[string]any{"customer_id": "cus_ana", "amount_minor": 5000, "currency": "EUR", "payment_method": "tok_visa"}, true},
		{"create_payment", sandbox.Payments, "payment_reversal", map[string]any{"customer_id": "cus_ana", "amount_minor": 5000, "currency": "EUR", "payment_method": "tok_visa"}, false},
		{"create_invoice", sandbox.Accounting, "invoice_storno", map[string]any{"customer_id": "cus_ana", "amount_minor": 12900, "currency": "EUR"}, true},
		{"create_invoice", sandbox.Accounting, "invoice_storno", map[string]any{"customer_id": "cus_ana", "amount_minor": 12900, "currency": "EUR"}, false},
		{"create_ticket", sandbox.CRM, "ticket_closure", map[string]any{"subject": "Refund"}, true},
	} {
		name := tc.tool
		if !tc.withID {
			name += " without external id"
		}
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			key := "s:1:0:" + tc.tool
			res, err := e.exec(t, tc.tool, key, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := e.reg.Spec(tc.tool)
			ckey := tool.CompensationKey(key)
			if l, err := e.reg.Reconcile(context.Background(), spec.Compensator, ckey); err != nil || l.Status != tool.Absent || !l.Authoritative {
				t.Fatalf("reconcile before: %+v %v", l, err)
			}
			// The first reversal's answer is lost after commit; the retry must
			// not reverse twice.
			op := map[string]string{"apply_refund": "refunds.reverse", "create_payment": "payments.reverse",
				"create_invoice": "invoices.storno", "create_ticket": "tickets.close"}[tc.tool]
			if err := e.c.Fault(context.Background(), sandbox.FaultSpec{Op: op, Fault: sandbox.CommitThenDrop}); err != nil {
				t.Fatal(err)
			}
			_, err = e.compensate(t, tc.tool, key, res, tc.args, tc.withID)
			if tool.KindOf(err) != tool.KindUnknown {
				t.Fatalf("lost reversal: %v, want unknown", err)
			}
			l, err := e.reg.Reconcile(context.Background(), spec.Compensator, ckey)
			if err != nil || l.Status != tool.Found {
				t.Fatalf("reconcile after: %+v %v", l, err)
			}
			rev, err := e.compensate(t, tc.tool, key, res, tc.args, tc.withID)
			if err != nil || rev.ExternalID != l.Result.ExternalID {
				t.Fatalf("retried reversal: %+v %v, want %s", rev, err, l.Result.ExternalID)
			}
			ef := e.effects(t, tc.provider)
			if len(ef) != 2 || ef[1].Kind != tc.reversalKind || ef[1].Reverses != res.ExternalID || ef[1].Key != ckey {
				t.Fatalf("effects = %+v, want the original and one %s under %s", ef, tc.reversalKind, ckey)
			}
			if ef[0].AmountMinor != -ef[1].AmountMinor {
				t.Fatalf("the reversal's amount %d does not oppose %d", ef[1].AmountMinor, ef[0].AmountMinor)
			}
		})
	}
}

func TestNothingToReverseIsRefused(t *testing.T) {
	e := setup(t)
	_, err := e.compensate(t, "apply_refund", "s:1:9:apply_refund", tool.Result{}, map[string]any{}, false)
	if tool.KindOf(err) != tool.KindRejected || tool.CodeOf(err) != "original_not_found" {
		t.Fatalf("err = %v, want rejected original_not_found", err)
	}
	_, err = e.compensate(t, "create_ticket", "s:1:9:create_ticket", tool.Result{}, map[string]any{}, false)
	if tool.KindOf(err) != tool.KindRejected || tool.CodeOf(err) != "original_unknown" {
		t.Fatalf("err = %v, want rejected original_unknown", err)
	}
	if n := len(e.effects(t, "")); n != 0 {
		t.Fatalf("%d effects, want none", n)
	}
}

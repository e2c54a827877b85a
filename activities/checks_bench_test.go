package activities

import (
	"encoding/json"
	"testing"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/tool"
)

// BenchmarkExecuteToolChecks is the work ExecuteTool does on a refund's args
// before and after the provider call, apart from the ledger and the call:
// the approval rule, the guard's scope, entity and normalised args for the
// claim, and the Match check of the provider's answer. Its allocations show
// in `go test -bench ExecuteToolChecks -benchmem ./activities/` (issue 22:
// the args were decoded once per check: 220 allocations for a refund; 160
// since the claim's guard fields come from one decoding).
func BenchmarkExecuteToolChecks(b *testing.B) {
	reg, err := demotools.Registry(demotools.SandboxConfig("http://127.0.0.1:9"))
	if err != nil {
		b.Fatal(err)
	}
	t, _ := reg.Tool(demotools.ApplyRefund)
	spec := t.Spec()
	args := json.RawMessage(`{"order_id":"ord_1001","amount_minor":12900,"currency":"EUR","reason":"arrived damaged"}`)
	answer := tool.Result{ExternalID: "re_1", Data: json.RawMessage(`{"id":"re_1","order_id":"ord_1001","amount_minor":12900,"currency":"EUR","reason":"arrived damaged","status":"succeeded"}`)}
	req := Request{Key: "s:1:1:apply_refund", Tool: demotools.ApplyRefund, Args: args, Fingerprint: "fp", Summary: "apply_refund order_id ord_1001 129.00 EUR"}
	a := &Activities{Tools: reg}
	var info activity.Info
	b.ReportAllocs()
	for b.Loop() {
		if spec.Approval.Required(args) {
			b.Fatal("129.00 EUR needs no approval")
		}
		cr := a.claimRequest(info, req, spec, "exec")
		if cr.GuardScope == "" {
			b.Fatal("no guard scope")
		}
		if d := answerDifferences(t, spec, args, answer); len(d) != 0 {
			b.Fatalf("differences: %v", d)
		}
	}
}

// The claim's guard fields are the guard's own: the scope key ScopeKey
// gives, and the entity Entity gives, however the args spell the order.
func TestClaimRequestGuardFieldsAreTheGuards(t *testing.T) {
	reg, err := demotools.Registry(demotools.SandboxConfig("http://127.0.0.1:9"))
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := reg.Tool(demotools.ApplyRefund)
	spec := tl.Spec()
	for _, args := range []string{`{"order_id":"ord_1001","amount_minor":100,"currency":"EUR"}`, `{"order_id":"ORD_1001 ","amount_minor":100,"currency":"EUR"}`} {
		req := Request{Key: "s:1:1:apply_refund", Tool: demotools.ApplyRefund, Args: json.RawMessage(args)}
		cr := (&Activities{Tools: reg}).claimRequest(activity.Info{}, req, spec, "exec")
		if want := spec.Guard.ScopeKey(req.Args); cr.GuardScope != want {
			t.Errorf("%s: scope %q, the guard's is %q", args, cr.GuardScope, want)
		}
		if want := spec.Guard.Entity(req.Args); cr.Entity != want {
			t.Errorf("%s: entity %q, the guard's is %q", args, cr.Entity, want)
		}
		want, _ := json.Marshal(spec.Guard.NormalizeArgs(req.Args))
		if cr.NormalizedArgs != string(want) {
			t.Errorf("%s: normalised args %s, the guard's are %s", args, cr.NormalizedArgs, want)
		}
	}
}

package catalog_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// An argument that fills a path segment ({customer} in
// /v1/customers/{customer}/charges) is refused at plan validation when it is
// "." or ".." or an encoding of one, naming the field; the tool refuses it
// too, before anything leaves, and an id that only looks close passes.
func TestPathArgumentDotSegmentRefused(t *testing.T) {
	p, srv := newProvider(t)
	reg := loadProvider(t, srv.URL)
	for _, bad := range []string{"..", ".", "%2e%2E", "%2E.", "．．"} {
		args := json.RawMessage(`{"customer":` + strconvQuote(bad) + `,"amount_minor":1200,"currency":"EUR"}`)
		pl := plan.Plan{SessionID: "s1", Turn: 1, Steps: []plan.Step{{Tool: "charge", Args: args}}}
		err := pl.Validate(reg)
		if err == nil || !strings.Contains(err.Error(), "steps[1].args.customer") || !strings.Contains(err.Error(), "path") {
			t.Errorf("customer %q: plan validation says %v; want a refusal naming steps[1].args.customer", bad, err)
		}
		if _, err := call(t, reg, "charge", "s1:1:1:charge", args, 1); tool.KindOf(err) != tool.KindRejected || tool.CodeOf(err) != "invalid_args" {
			t.Errorf("customer %q: the tool sent it: %v", bad, err)
		}
	}
	ok := json.RawMessage(`{"customer":"cus..1","amount_minor":1200,"currency":"EUR"}`)
	if err := (plan.Plan{SessionID: "s1", Turn: 1, Steps: []plan.Step{{Tool: "charge", Args: ok}}}).Validate(reg); err != nil {
		t.Fatalf("an id with dots inside: %v", err)
	}
	if charges, _, keys := p.state(); charges != 0 || len(keys) != 0 {
		t.Errorf("the provider got %d writes, want none", len(keys))
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

package demotools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/tooltest"
)

// kitCase is one demo tool under the tool kit: its valid, changed and
// rejected args and the sandbox provider whose store holds its effects ("" for
// a read, and for the mail relay, which keeps nothing by key).
type kitCase struct {
	tool, provider          string
	args, changed, rejected string
}

// kitCases are the seven demo tools; the four compensators run in their
// originals' ReversalHasOwnKey.
var kitCases = []kitCase{
	{tool: demotools.QueryOrder, args: `{"order_id":"ord_1001"}`, rejected: `{"order_id":"ord_nope"}`},
	{tool: demotools.CheckRefundPolicy, args: `{"order_id":"ord_1001","amount_minor":1000}`, rejected: `{"order_id":"ord_nope"}`},
	{tool: demotools.ApplyRefund, provider: sandbox.Payments,
		args:     `{"order_id":"ord_1001","amount_minor":1000,"currency":"EUR","reason":"damaged"}`,
		changed:  `{"order_id":"ord_1001","amount_minor":1500,"currency":"EUR","reason":"damaged"}`,
		rejected: `{"order_id":"ord_1001","amount_minor":20000000,"currency":"EUR"}`},
	{tool: demotools.CreatePayment, provider: sandbox.Payments,
		args:     `{"customer_id":"cus_ana","amount_minor":2500,"currency":"EUR","payment_method":"tok_visa"}`,
		changed:  `{"customer_id":"cus_ana","amount_minor":2600,"currency":"EUR","payment_method":"tok_visa"}`,
		rejected: `{"customer_id":"cus_ana","amount_minor":0,"currency":"EUR","payment_method":"tok_visa"}`},
	{tool: demotools.CreateTicket, provider: sandbox.CRM,
		args:     `{"subject":"Refund issued","order_id":"ord_1001"}`,
		changed:  `{"subject":"Refund refused","order_id":"ord_1001"}`,
		rejected: `{"subject":"Refund issued","priority":"whenever"}`},
	{tool: demotools.CreateInvoice, provider: sandbox.Accounting,
		args:     `{"customer_id":"cus_ana","amount_minor":4200,"currency":"EUR"}`,
		changed:  `{"customer_id":"cus_ana","amount_minor":4300,"currency":"EUR"}`,
		rejected: `{"customer_id":"cus_ana","amount_minor":0,"currency":"EUR"}`},
	{tool: demotools.SendEmail,
		args:     `{"to":"ana@example.com","subject":"Your refund","body":"It is on its way."}`,
		changed:  `{"to":"ben@example.com","subject":"Your refund","body":"It is on its way."}`,
		rejected: `{"to":"ana@example.com","subject":""}`},
}

// storeEffects returns a tooltest.Harness.Effects reading provider's store in
// the sandbox: the ids of the rows committed under a key.
func storeEffects(sb *sandbox.Sandbox, provider string) func(ctx context.Context, key string) ([]string, error) {
	if provider == "" {
		return nil
	}
	return func(ctx context.Context, key string) ([]string, error) {
		all, err := sb.Client().Effects(ctx, provider)
		if err != nil {
			return nil, fmt.Errorf("read the %s store: %w", provider, err)
		}
		var ids []string
		for _, e := range all {
			if e.Key == key {
				ids = append(ids, e.ID)
			}
		}
		return ids, nil
	}
}

// Every demo tool, and through them every compensator, keeps the tool kit's
// promises against a real sandbox, counted in its providers' stores.
func TestDemoToolsPassToolKit(t *testing.T) {
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	for _, tc := range kitCases {
		t.Run(tc.tool, func(t *testing.T) {
			h := tooltest.Harness{
				Tool:     tc.tool,
				Provider: sb.BaseURL(),
				New: func(_ testing.TB, baseURL string) []tool.Tool {
					return demotools.All(demotools.SandboxConfig(baseURL))
				},
				Args:     json.RawMessage(tc.args),
				Rejected: json.RawMessage(tc.rejected),
				Effects:  storeEffects(sb, tc.provider),
			}
			if tc.changed != "" {
				h.Changed = json.RawMessage(tc.changed)
			}
			tooltest.Run(t, h)
		})
	}
}

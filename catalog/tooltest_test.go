package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/tool/tooltest"
)

// Every tool of examples/sandbox.yaml, and through them its reversals, keeps
// the tool kit's promises against a real sandbox, counted in the providers'
// stores.
func TestSandboxCatalogPassesToolKit(t *testing.T) {
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	// Loaded once against the sandbox itself, to list every tool the file
	// declares: each original is run below, each reversal through its
	// original.
	all, err := loadSandboxCatalog(sb.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ provider, args, changed, rejected string }{
		"query_order":         {args: `{"order_id":"ord_1001"}`, rejected: `{"order_id":"ord_nope"}`},
		"check_refund_policy": {args: `{"order_id":"ord_1001","amount_minor":1000}`, rejected: `{"order_id":"ord_nope"}`},
		"apply_refund": {provider: sandbox.Payments,
			args:     `{"order_id":"ord_1001","amount_minor":1000,"currency":"EUR","reason":"damaged"}`,
			changed:  `{"order_id":"ord_1001","amount_minor":1500,"currency":"EUR","reason":"damaged"}`,
			rejected: `{"order_id":"ord_1001","amount_minor":20000000,"currency":"EUR"}`},
		"create_payment": {provider: sandbox.Payments,
			args:     `{"customer_id":"cus_ana","amount_minor":2500,"currency":"EUR","payment_method":"tok_visa"}`,
			changed:  `{"customer_id":"cus_ana","amount_minor":2600,"currency":"EUR","payment_method":"tok_visa"}`,
			rejected: `{"customer_id":"cus_ana","amount_minor":0,"currency":"EUR","payment_method":"tok_visa"}`},
		"create_ticket": {provider: sandbox.CRM,
			args:     `{"subject":"Refund issued","order_id":"ord_1001"}`,
			changed:  `{"subject":"Refund refused","order_id":"ord_1001"}`,
			rejected: `{"subject":"Refund issued","priority":"whenever"}`},
		"create_invoice": {provider: sandbox.Accounting,
			args:     `{"customer_id":"cus_ana","amount_minor":4200,"currency":"EUR"}`,
			changed:  `{"customer_id":"cus_ana","amount_minor":4300,"currency":"EUR"}`,
			rejected: `{"customer_id":"cus_ana","amount_minor":0,"currency":"EUR"}`},
		"send_email": {
			args:     `{"to":"ana@example.com","subject":"Your refund","body":"It is on its way."}`,
			rejected: `{"to":"ana@example.com","subject":""}`},
	}
	covered := map[string]bool{}
	for _, tl := range all.Tools() {
		s := tl.Spec()
		if s.Reversal {
			continue
		}
		covered[s.Name], covered[s.Compensator] = true, true
		tc, ok := cases[s.Name]
		if !ok {
			t.Errorf("%s: the catalogue declares a tool this test has no args for: add it to the cases", s.Name)
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			h := tooltest.Harness{
				Tool:     s.Name,
				Provider: sb.BaseURL(),
				New: func(t testing.TB, baseURL string) []tool.Tool {
					c, err := loadSandboxCatalog(baseURL)
					if err != nil {
						t.Fatal(err)
					}
					return c.Tools()
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
	for _, tl := range all.Tools() {
		if n := tl.Spec().Name; !covered[n] {
			t.Errorf("%s: a reversal no tool of the catalogue names, so the kit never ran it", n)
		}
	}
}

func loadSandboxCatalog(root string) (*catalog.Catalog, error) {
	env := map[string]string{"AGENTSAGA_SANDBOX_URL": root}
	return catalog.LoadWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}, "examples/sandbox.yaml")
}

// storeEffects reads provider's store in the sandbox: the ids of the rows
// committed under a key. Nil for a read and for the mail relay, which keeps
// nothing by key.
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

// A correct catalogue for a provider that ignores keys (the sandbox's mail
// relay: the key in a body field it keeps but never deduplicates by, a
// search by it) passes the kit as a NON_IDEMPOTENT_WRITE with a lookup:
// the kit follows the engine, which looks an unknown outcome up before it
// sends again.
func TestLookupOnlyCatalogPassesToolKit(t *testing.T) {
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	tooltest.Run(t, tooltest.Harness{
		Tool:     "send_note",
		Provider: sb.BaseURL(),
		New: func(t testing.TB, baseURL string) []tool.Tool {
			env := map[string]string{"SB": baseURL}
			c, err := catalog.ParseWith(catalog.Options{Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }},
				catalog.Source{Name: "notes.yaml", Data: []byte(lookupOnlyCatalog)})
			if err != nil {
				t.Fatal(err)
			}
			return c.Tools()
		},
		Args:    json.RawMessage(`{"to":"ana@example.com","subject":"Your refund","body":"It is on its way."}`),
		Changed: json.RawMessage(`{"to":"bob@example.com","subject":"Your refund","body":"It is on its way."}`),
		Effects: storeEffects(sb, sandbox.Mail),
	})
}

// lookupOnlyCatalog declares the sandbox's mail relay as a lookup-only
// provider.
const lookupOnlyCatalog = `version: 1
systems:
  - {name: mail, base_url: "${SB}/mail"}
tools:
  - name: send_note
    description: Send a note through the relay, the key as its reference.
    system: mail
    class: NON_IDEMPOTENT_WRITE
    timeout: 5s
    compensator: send_correction
    args:
      - {name: to, type: email, required: true}
      - {name: subject, type: string, required: true}
      - {name: body, type: string, required: true}
    match:
      - {arg: to, result: to}
      - {arg: subject, result: subject}
    request:
      method: POST
      path: /v1/messages
      key: {body_field: reference}
      body: {fields: {to: "{to}", subject: "{subject}", body: "{body}"}}
    response: {external_id: /id, keep: {to: /to, subject: /subject}}
    lookup:
      request: {path: /v1/messages, query: {reference: "{key}"}}
      found: {item: /messages/0, external_id: /id}
      absent: {authoritative: true}
  - name: send_correction
    description: Retract a note with a correction to the same recipient, naming the note.
    system: mail
    class: NON_IDEMPOTENT_WRITE
    timeout: 5s
    reverses: send_note
    match:
      - {arg: original_external_id, result: subject}
    request:
      method: POST
      path: /v1/messages
      key: {body_field: reference}
      body: {fields: {to: "{original.args.to}", subject: "{original.external_id}", body: "Please disregard the previous message."}}
    response: {external_id: /id, keep: {subject: /subject}}
    lookup:
      request: {path: /v1/messages, query: {reference: "{key}"}}
      found: {item: /messages/0, external_id: /id}
      absent: {authoritative: true}
`

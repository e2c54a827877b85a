// Package compensators holds the reversal tools that undo the demo tools'
// effects. A reversal never deletes or edits the original: it is a new entry
// (a storno) at the provider that names the effect it undoes.
//
// Each receives tool.Call{Key: "<original key>:compensate", Args: JSON of a
// tool.Reversal} and sends that key to the provider (Idempotency-Key, ref or
// integration_key), so a retried compensation never reverses twice, and can
// look itself up by it (tool.Reconciler).
//
//	compensator     undoes          provider call                                 class
//	reverse_refund  apply_refund    POST /payments/v1/refunds/{id}/reverse        IDEMPOTENT_WRITE
//	void_payment    create_payment  POST /payments/v1/payments/{id}/reverse       IDEMPOTENT_WRITE
//	storno_invoice  create_invoice  POST /accounting/v1/invoices/{id}/storno      CONDITIONAL_WRITE
//	close_ticket    create_ticket   POST /crm/v1/tickets/{id}/close               CONDITIONAL_WRITE
//
// A reversal found by its key must name the original_external_id the call
// names (Spec.Match): one that reverses another effect is tool.Mismatch.
//
// When the Reversal carries no original_external_id, the compensator looks
// the original up by original_key first; if the provider has no such effect
// the compensation is refused (KindRejected, original_not_found) for a human
// to judge, never reported as done.
package compensators

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/tool"
)

// The compensator names.
const (
	ReverseRefund = "reverse_refund"
	VoidPayment   = "void_payment"
	StornoInvoice = "storno_invoice"
	CloseTicket   = "close_ticket"
)

// Config says where the providers are (base URLs, as sandbox.URLs gives
// them).
type Config struct {
	Payments   string
	CRM        string
	Accounting string
	// HTTPClient is used for every call; nil means the default client.
	HTTPClient *http.Client
}

// New returns the compensators.
func New(cfg Config) []tool.Tool {
	pay := httptool.New(cfg.Payments, cfg.HTTPClient)
	return []tool.Tool{
		&reversal{name: ReverseRefund, undoes: "apply_refund", class: tool.IdempotentWrite, c: pay,
			path:     func(id string) string { return "/v1/refunds/" + url.PathEscape(id) + "/reverse" },
			body:     func(key string) any { return map[string]string{"reason": "saga compensation"} },
			find:     func(k string) string { return "/v1/reversals?idempotency_key=" + url.QueryEscape(k) },
			original: func(k string) string { return "/v1/refunds?idempotency_key=" + url.QueryEscape(k) }},
		&reversal{name: VoidPayment, undoes: "create_payment", class: tool.IdempotentWrite, c: pay,
			path:     func(id string) string { return "/v1/payments/" + url.PathEscape(id) + "/reverse" },
			body:     func(key string) any { return map[string]string{"reason": "saga compensation"} },
			find:     func(k string) string { return "/v1/reversals?idempotency_key=" + url.QueryEscape(k) },
			original: func(k string) string { return "/v1/payments?idempotency_key=" + url.QueryEscape(k) }},
		&reversal{name: StornoInvoice, undoes: "create_invoice", class: tool.ConditionalWrite, c: httptool.New(cfg.Accounting, cfg.HTTPClient),
			path: func(id string) string { return "/v1/invoices/" + url.PathEscape(id) + "/storno" },
			body: func(key string) any {
				return map[string]string{"integration_key": key, "reason": "saga compensation"}
			},
			find:     func(k string) string { return "/v1/documents?integration_key=" + url.QueryEscape(k) },
			original: func(k string) string { return "/v1/documents?integration_key=" + url.QueryEscape(k) }},
		&reversal{name: CloseTicket, undoes: "create_ticket", class: tool.ConditionalWrite, c: httptool.New(cfg.CRM, cfg.HTTPClient), names: "ticket_id",
			path:     func(id string) string { return "/v1/tickets/" + url.PathEscape(id) + "/close" },
			body:     func(key string) any { return map[string]string{"ref": key, "reason": "saga compensation"} },
			find:     func(k string) string { return "/v1/closures?ref=" + url.QueryEscape(k) },
			original: nil, // the CRM search lags: an unknown ticket id cannot be settled here
		},
	}
}

// reversal is one compensator: POST a storno of the original, keyed by the
// compensation key.
type reversal struct {
	name, undoes string
	names        string // the field of the provider's answer naming the effect reversed; empty means "reverses"
	class        tool.Class
	c            *httptool.Client
	path         func(id string) string
	body         func(key string) any
	find         func(key string) string // lookup of the reversal by its key
	original     func(key string) string // lookup of the original by its key, or nil
}

func (r *reversal) Spec() tool.Spec {
	return tool.Spec{Name: r.name, Description: "Reverse a succeeded " + r.undoes + " with a new opposite entry (storno).",
		Class: r.class, Reversal: true, Timeout: 10 * time.Second,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "original_key", Type: tool.String, Required: true, Description: "key of the call undone"},
			{Name: "original_tool", Type: tool.String, Description: "tool of the call undone"},
			{Name: "original_external_id", Type: tool.String, Description: "provider id of the effect undone"},
			// original_args (a JSON object) is passed too; tool.Schema has no
			// object type to declare it with, and no compensator reads it.
		}},
		// A reversal found under the compensation key must reverse the
		// effect this call names.
		Match: []tool.MatchField{{Arg: "original_external_id", Result: r.reversedField(), IfSet: true}},
	}
}

func (r *reversal) reversedField() string {
	if r.names != "" {
		return r.names
	}
	return "reverses"
}

// Execute posts the reversal with call.Key as its key.
func (r *reversal) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var rev tool.Reversal
	if err := json.Unmarshal(call.Args, &rev); err != nil {
		return tool.Result{}, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: args must be a tool.Reversal: %w", r.name, err))
	}
	id := rev.OriginalExternalID
	if id == "" {
		found, err := r.findOriginal(ctx, rev.OriginalKey)
		if err != nil {
			return tool.Result{}, err
		}
		id = found
	}
	raw, err := r.c.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: r.path(id), Key: call.Key, Body: r.body(call.Key)})
	if err != nil {
		return tool.Result{}, err
	}
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
		return tool.Result{}, tool.Fail(tool.KindUnknown, "bad_response",
			fmt.Errorf("%s of %s answered 2xx without an id: reconcile by key %s", r.name, id, call.Key))
	}
	return tool.Result{ExternalID: e.ID, Data: raw}, nil
}

func (r *reversal) findOriginal(ctx context.Context, key string) (string, error) {
	if r.original == nil || key == "" {
		return "", tool.Fail(tool.KindRejected, "original_unknown",
			fmt.Errorf("%s: the reversal names no original_external_id and it cannot be looked up: a human must reverse it", r.name))
	}
	l, err := lookup(ctx, r.c, r.original(key))
	switch {
	case err != nil || l.Status == tool.Unknown:
		return "", tool.Fail(tool.KindUnavailable, "original_lookup_failed",
			fmt.Errorf("%s: look up the original %s to reverse it: %v: retry later", r.name, key, err))
	case l.Status == tool.Absent:
		return "", tool.Fail(tool.KindRejected, "original_not_found",
			fmt.Errorf("%s: the provider has no effect under %s, so there is nothing this tool can reverse: a human must check", r.name, key))
	}
	return l.Result.ExternalID, nil
}

// Reconcile finds the reversal committed under key (the compensation key).
func (r *reversal) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return lookup(ctx, r.c, r.find(key))
}

// lookup asks path for the row committed under a key: 200 is Found, 404 an
// authoritative Absent, 409 and every failure Unknown.
func lookup(ctx context.Context, c *httptool.Client, path string) (tool.Lookup, error) {
	raw, err := c.Raw(ctx, httptool.Request{Path: path})
	switch {
	case err == nil:
		var e struct {
			ID string `json:"id"`
		}
		if jerr := json.Unmarshal(raw, &e); jerr != nil || e.ID == "" {
			return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("lookup %s: the provider's answer has no id", path)
		}
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: e.ID, Data: raw}}, nil
	case httptool.StatusOf(err) == http.StatusNotFound:
		return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
	case httptool.StatusOf(err) == http.StatusConflict:
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("lookup %s: %w", path, err)
}

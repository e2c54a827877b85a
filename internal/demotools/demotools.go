// Package demotools holds the demo's tools: real HTTP clients of the sandbox
// providers (package sandbox), or of any provider with the same API. Each
// implements tool.Tool, and every write that can look itself up by key
// implements tool.Reconciler.
//
//	tool                 class                 lookup                          undo (compensator)
//	query_order          READ                  -                               -
//	check_refund_policy  READ                  -                               -
//	apply_refund         NON_IDEMPOTENT_WRITE  refund by Idempotency-Key       reverse_refund
//	create_payment       IDEMPOTENT_WRITE      payment by Idempotency-Key      void_payment
//	create_ticket        CONDITIONAL_WRITE     search by external_ref (lags)   close_ticket
//	create_invoice       CONDITIONAL_WRITE     document by integration_key     storno_invoice
//	send_email           NON_IDEMPOTENT_WRITE  none (NoLookup: a human)        -
//
// apply_refund is declared NON_IDEMPOTENT_WRITE although the acquirer honours
// the key, as ARCHITECTURE.md's table says: a refund is retried only when the
// request provably never left, and otherwise reconciled first. It waits for
// approval above 500.00 and is guarded to one active refund per order;
// create_payment waits for approval above 5,000.00. Money is capped per tool
// (Spec.MaxAmountMinor): payments and invoices at 100,000.00, refunds at
// 50,000.00. Bodies and descriptions are multi-line text; bodies may hold
// 10,000 bytes, other strings the plan limit (1,000 by default).
//
// Every write that can look itself up declares Spec.Match: the fields of the
// provider's answer a found effect must share with the call's args before it
// is adopted (a key reused with other arguments, for example after a ledger
// purge, finds someone else's effect: tool.Mismatch, for a human).
//
// Specs works without any provider, for validating plans locally.
package demotools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/compensators"
	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/tool"
)

// The tool names.
const (
	QueryOrder        = "query_order"
	CheckRefundPolicy = "check_refund_policy"
	ApplyRefund       = "apply_refund"
	CreatePayment     = "create_payment"
	CreateTicket      = "create_ticket"
	CreateInvoice     = "create_invoice"
	SendEmail         = "send_email"
)

// RefundApprovalAboveMinor is the refund amount above which apply_refund
// waits for a human's approval (500.00).
const RefundApprovalAboveMinor = 50000

// PaymentApprovalAboveMinor is the payment amount above which
// create_payment waits for a human's approval (5,000.00).
const PaymentApprovalAboveMinor = 500000

// Money ceilings (tool.Spec.MaxAmountMinor): a plan asking for more is
// refused naming the field.
const (
	// MaxPaymentMinor bounds create_payment and create_invoice
	// (100,000.00).
	MaxPaymentMinor = 10_000_000
	// MaxRefundMinor bounds apply_refund and check_refund_policy
	// (50,000.00).
	MaxRefundMinor = 5_000_000
)

// MaxBodyLen is the longest e-mail or ticket body, in bytes.
const MaxBodyLen = 10_000

// Config says where the providers are. Each URL is a provider's base URL, as
// sandbox.URLs gives them (http://127.0.0.1:PORT/payments and so on).
type Config struct {
	Orders     string
	Payments   string
	CRM        string
	Accounting string
	Mail       string
	// HTTPClient is used for every call; nil means a client whose requests
	// are bounded by the call's context only.
	HTTPClient *http.Client
}

// SandboxConfig returns the Config of a sandbox served at baseURL (its root,
// such as http://127.0.0.1:40123).
func SandboxConfig(baseURL string) Config {
	b := strings.TrimRight(baseURL, "/")
	return Config{Orders: b + "/orders", Payments: b + "/payments", CRM: b + "/crm", Accounting: b + "/accounting", Mail: b + "/mail"}
}

// New returns the demo tools (without their compensators) calling the
// providers in cfg.
func New(cfg Config) []tool.Tool {
	hc := func(base string) *httptool.Client { return httptool.New(base, cfg.HTTPClient) }
	return []tool.Tool{
		&queryOrder{c: hc(cfg.Orders)},
		&checkRefundPolicy{c: hc(cfg.Orders)},
		&applyRefund{c: hc(cfg.Payments)},
		&createPayment{c: hc(cfg.Payments)},
		&createTicket{c: hc(cfg.CRM)},
		&createInvoice{c: hc(cfg.Accounting)},
		&sendEmail{c: hc(cfg.Mail)},
	}
}

// All returns the demo tools and their compensators.
func All(cfg Config) []tool.Tool {
	return append(New(cfg), compensators.New(compensators.Config{
		Payments: cfg.Payments, CRM: cfg.CRM, Accounting: cfg.Accounting, HTTPClient: cfg.HTTPClient,
	})...)
}

// Registry returns a registry of the demo tools, their compensators and
// extra, or the registry's error naming every offender.
func Registry(cfg Config, extra ...tool.Tool) (*tool.Registry, error) {
	r, err := tool.NewRegistry(append(All(cfg), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("demo tools: %w", err)
	}
	return r, nil
}

// Specs returns the specs of the demo tools and their compensators, without
// any provider running.
func Specs() tool.Specs {
	out := tool.Specs{}
	for _, t := range All(Config{}) {
		s := t.Spec()
		out[s.Name] = s
	}
	return out
}

// ---- args ----

func decode(call tool.Call, v any) error {
	if err := json.Unmarshal(call.Args, v); err != nil {
		return tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("args of %s do not match the tool's schema: %w", call.Key, err))
	}
	return nil
}

func result(id string, raw json.RawMessage) tool.Result {
	return tool.Result{ExternalID: id, Data: raw}
}

var (
	fOrderID = tool.Field{Name: "order_id", Type: tool.String, Required: true, Description: "the order, such as ord_1001"}
	// fOrderInPath is order_id where it fills a path segment.
	fOrderInPath = tool.Field{Name: "order_id", Type: tool.String, Required: true, Description: "the order, such as ord_1001", PathSegment: true}
	fAmount      = tool.Field{Name: "amount_minor", Type: tool.Money, Required: true, Description: "amount in minor units (12900 for 129.00)"}
	fCurrency    = tool.Field{Name: "currency", Type: tool.Currency, Required: true, Description: "ISO 4217 code, such as EUR"}
)

// ---- query_order ----

type queryOrder struct{ c *httptool.Client }

func (t *queryOrder) Spec() tool.Spec {
	return tool.Spec{Name: QueryOrder, Description: "Read an order with its lines and amounts.", Class: tool.Read,
		Args: tool.Schema{Fields: []tool.Field{fOrderInPath}}, Timeout: 5 * time.Second}
}

func (t *queryOrder) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		OrderID string `json:"order_id"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	raw, err := t.c.Raw(ctx, httptool.Request{Path: "/v1/orders/" + url.PathEscape(a.OrderID), Key: call.Key})
	if err != nil {
		return tool.Result{}, err
	}
	return result(a.OrderID, raw), nil
}

// ---- check_refund_policy ----

type checkRefundPolicy struct{ c *httptool.Client }

func (t *checkRefundPolicy) Spec() tool.Spec {
	amount := fAmount
	amount.Required, amount.Description = false, "the refund asked for, in minor units; checked against the order"
	return tool.Spec{Name: CheckRefundPolicy, Description: "Check that an order may be refunded (and this amount, if given); a refusal fails the step.",
		Class: tool.Read, Args: tool.Schema{Fields: []tool.Field{fOrderInPath, amount}}, Timeout: 5 * time.Second, MaxAmountMinor: MaxRefundMinor}
}

func (t *checkRefundPolicy) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		OrderID     string `json:"order_id"`
		AmountMinor int64  `json:"amount_minor"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	path := "/v1/orders/" + url.PathEscape(a.OrderID) + "/refund-policy"
	if a.AmountMinor > 0 {
		path += fmt.Sprintf("?amount_minor=%d", a.AmountMinor)
	}
	raw, err := t.c.Raw(ctx, httptool.Request{Path: path, Key: call.Key})
	if err != nil {
		return tool.Result{}, err
	}
	var p struct {
		Refundable     bool   `json:"refundable"`
		Reason         string `json:"reason"`
		MaxRefundMinor int64  `json:"max_refund_minor"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return tool.Result{}, tool.Fail(tool.KindUnavailable, "bad_response", fmt.Errorf("refund policy of %s: unreadable answer: %w", a.OrderID, err))
	}
	if !p.Refundable {
		return tool.Result{}, tool.Fail(tool.KindRejected, p.Reason,
			fmt.Errorf("order %s may not be refunded (%s, at most %d minor units)", a.OrderID, p.Reason, p.MaxRefundMinor))
	}
	return result(a.OrderID, raw), nil
}

// ---- keyed lookups ----

// lookup asks path for the effect committed under key: 200 is Found, 404
// an authoritative Absent (the provider's own store answers), 409 (still in
// flight) and every failure Unknown.
func lookup(ctx context.Context, c *httptool.Client, path string) (tool.Lookup, error) {
	var e struct {
		ID string `json:"id"`
	}
	raw, err := c.Raw(ctx, httptool.Request{Path: path})
	switch {
	case err == nil:
		if jerr := json.Unmarshal(raw, &e); jerr != nil || e.ID == "" {
			return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("lookup %s: the provider's answer has no id: %v", path, jerr)
		}
		return tool.Lookup{Status: tool.Found, Result: result(e.ID, raw), Authoritative: true}, nil
	case httptool.StatusOf(err) == http.StatusNotFound:
		return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
	case httptool.StatusOf(err) == http.StatusConflict:
		return tool.Lookup{Status: tool.Unknown}, nil
	default:
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("lookup %s: %w", path, err)
	}
}

// ---- apply_refund ----

type applyRefund struct{ c *httptool.Client }

func (t *applyRefund) Spec() tool.Spec {
	return tool.Spec{Name: ApplyRefund, Description: "Refund an amount of an order through the card acquirer.",
		Class: tool.NonIdempotentWrite,
		Args: tool.Schema{Fields: []tool.Field{fOrderID, fAmount, fCurrency,
			{Name: "reason", Type: tool.String, Description: "why, for the customer's statement"}}},
		Timeout:        10 * time.Second,
		MaxAmountMinor: MaxRefundMinor,
		Compensator:    compensators.ReverseRefund,
		Approval:       &tool.Approval{Field: "amount_minor", AboveMinor: RefundApprovalAboveMinor},
		Guard:          &tool.Guard{Scope: "refund-per-order", Fields: []string{"order_id"}, Hold: true},
		Match:          []tool.MatchField{{Arg: "order_id", Result: "order_id"}, {Arg: "amount_minor", Result: "amount_minor"}, {Arg: "currency", Result: "currency"}, {Arg: "reason", Result: "reason"}},
	}
}

func (t *applyRefund) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		OrderID     string `json:"order_id"`
		AmountMinor int64  `json:"amount_minor"`
		Currency    string `json:"currency"`
		Reason      string `json:"reason,omitempty"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	return keyedCreate(ctx, t.c, "/v1/refunds", call.Key, a)
}

// Reconcile finds the refund committed under key.
func (t *applyRefund) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return lookup(ctx, t.c, "/v1/refunds?idempotency_key="+url.QueryEscape(key))
}

func keyedCreate(ctx context.Context, c *httptool.Client, path, key string, body any) (tool.Result, error) {
	raw, err := c.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: path, Key: key, Body: body})
	if err != nil {
		return tool.Result{}, err
	}
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
		return tool.Result{}, tool.Fail(tool.KindUnknown, "bad_response",
			fmt.Errorf("POST %s answered 2xx without an id: reconcile by key to learn the result", path))
	}
	return result(e.ID, raw), nil
}

// ---- create_payment ----

type createPayment struct{ c *httptool.Client }

func (t *createPayment) Spec() tool.Spec {
	return tool.Spec{Name: CreatePayment, Description: "Charge a customer's stored payment method (a token, never a card number).",
		Class: tool.IdempotentWrite,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "customer_id", Type: tool.String, Required: true, Description: "the customer, such as cus_ana"},
			{Name: "order_id", Type: tool.String, Description: "the order paid for"},
			fAmount, fCurrency,
			{Name: "payment_method", Type: tool.String, Required: true, Description: "a payment method token, such as tok_visa"},
			{Name: "description", Type: tool.String, Description: "statement text", Multiline: true},
		}},
		Timeout:        10 * time.Second,
		Compensator:    compensators.VoidPayment,
		MaxAmountMinor: MaxPaymentMinor,
		Approval:       &tool.Approval{Field: "amount_minor", AboveMinor: PaymentApprovalAboveMinor},
		Match: []tool.MatchField{{Arg: "customer_id", Result: "customer_id"}, {Arg: "order_id", Result: "order_id"},
			{Arg: "amount_minor", Result: "amount_minor"}, {Arg: "currency", Result: "currency"},
			{Arg: "payment_method", Result: "payment_method"}, {Arg: "description", Result: "reason"}},
	}
}

func (t *createPayment) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		CustomerID    string `json:"customer_id"`
		OrderID       string `json:"order_id,omitempty"`
		AmountMinor   int64  `json:"amount_minor"`
		Currency      string `json:"currency"`
		PaymentMethod string `json:"payment_method"`
		Description   string `json:"description,omitempty"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	return keyedCreate(ctx, t.c, "/v1/payments", call.Key, a)
}

// Reconcile finds the payment committed under key.
func (t *createPayment) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return lookup(ctx, t.c, "/v1/payments?idempotency_key="+url.QueryEscape(key))
}

// ---- create_ticket ----

type createTicket struct{ c *httptool.Client }

func (t *createTicket) Spec() tool.Spec {
	return tool.Spec{Name: CreateTicket, Description: "Open a CRM ticket, upserted by external_ref = the operation key.",
		Class: tool.ConditionalWrite,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "subject", Type: tool.String, Required: true, Description: "one line"},
			{Name: "body", Type: tool.String, Description: "details", Multiline: true, MaxLen: MaxBodyLen},
			{Name: "order_id", Type: tool.String, Description: "the order concerned"},
			{Name: "priority", Type: tool.String, Description: "low, normal, high or urgent"},
		}},
		Timeout:     10 * time.Second,
		Compensator: compensators.CloseTicket,
		// The search index may lag: an absent answer settles nothing until
		// the index says it is caught up, so do not wait the full default.
		ReconcileWindow: 2 * time.Minute,
		// The CRM upserts by external_ref: a reused key answers with the
		// ticket made before, whatever this call asked.
		Match: []tool.MatchField{{Arg: "subject", Result: "subject"}, {Arg: "body", Result: "body"},
			{Arg: "order_id", Result: "order_id"}, {Arg: "priority", Result: "priority", Default: "normal"}},
	}
}

func (t *createTicket) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		ExternalRef string `json:"external_ref"`
		Subject     string `json:"subject"`
		Body        string `json:"body,omitempty"`
		OrderID     string `json:"order_id,omitempty"`
		Priority    string `json:"priority,omitempty"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	a.ExternalRef = call.Key
	return keyedCreate(ctx, t.c, "/v1/tickets", call.Key, a)
}

// Reconcile searches tickets by external_ref. The search index may lag, so
// an empty answer is authoritative only when the CRM says its index is
// caught up.
func (t *createTicket) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	raw, err := t.c.Raw(ctx, httptool.Request{Path: "/v1/tickets?external_ref=" + url.QueryEscape(key)})
	if err != nil {
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("search tickets by external_ref: %w", err)
	}
	var res struct {
		Tickets       []json.RawMessage `json:"tickets"`
		IndexCaughtUp bool              `json:"index_caught_up"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("search tickets by external_ref: unreadable answer: %w", err)
	}
	if len(res.Tickets) == 0 {
		return tool.Lookup{Status: tool.Absent, Authoritative: res.IndexCaughtUp}, nil
	}
	var tk struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.Tickets[0], &tk); err != nil || tk.ID == "" {
		return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("search tickets by external_ref: a ticket without id")
	}
	return tool.Lookup{Status: tool.Found, Result: result(tk.ID, res.Tickets[0]), Authoritative: true}, nil
}

// ---- create_invoice ----

type createInvoice struct{ c *httptool.Client }

func (t *createInvoice) Spec() tool.Spec {
	return tool.Spec{Name: CreateInvoice, Description: "Post an invoice in accounting under integration_key = the operation key.",
		Class: tool.ConditionalWrite,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "customer_id", Type: tool.String, Required: true, Description: "the customer, such as cus_ana"},
			{Name: "order_id", Type: tool.String, Description: "the order invoiced"},
			fAmount, fCurrency,
			{Name: "description", Type: tool.String, Description: "what is invoiced", Multiline: true},
		}},
		Timeout:        10 * time.Second,
		Compensator:    compensators.StornoInvoice,
		MaxAmountMinor: MaxPaymentMinor,
		Match: []tool.MatchField{{Arg: "customer_id", Result: "customer_id"}, {Arg: "order_id", Result: "order_id"},
			{Arg: "amount_minor", Result: "amount_minor"}, {Arg: "currency", Result: "currency"},
			{Arg: "description", Result: "description"}},
	}
}

func (t *createInvoice) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		IntegrationKey string `json:"integration_key"`
		CustomerID     string `json:"customer_id"`
		OrderID        string `json:"order_id,omitempty"`
		AmountMinor    int64  `json:"amount_minor"`
		Currency       string `json:"currency"`
		Description    string `json:"description,omitempty"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	a.IntegrationKey = call.Key
	return keyedCreate(ctx, t.c, "/v1/invoices", call.Key, a)
}

// Reconcile finds the document posted under key.
func (t *createInvoice) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return lookup(ctx, t.c, "/v1/documents?integration_key="+url.QueryEscape(key))
}

// ---- send_email ----

type sendEmail struct{ c *httptool.Client }

func (t *sendEmail) Spec() tool.Spec {
	return tool.Spec{Name: SendEmail, Description: "Send an email; the relay has no key and no lookup, so a lost answer goes to a human.",
		Class: tool.NonIdempotentWrite,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "to", Type: tool.Email, Required: true, Description: "one recipient address, such as ana@example.com"},
			{Name: "subject", Type: tool.String, Required: true, Description: "subject line"},
			{Name: "body", Type: tool.String, Required: true, Description: "plain text", Multiline: true, MaxLen: MaxBodyLen},
		}},
		Timeout:  10 * time.Second,
		NoLookup: true,
	}
}

func (t *sendEmail) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var a struct {
		To      string `json:"to"`
		Subject string `json:"subject"`
		Body    string `json:"body"`
	}
	if err := decode(call, &a); err != nil {
		return tool.Result{}, err
	}
	return keyedCreate(ctx, t.c, "/v1/messages", call.Key, a)
}

package main

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

// The tool names.
const (
	BookShipment   = "book_shipment"
	CancelShipment = "cancel_shipment"
)

// Tools returns the team's shipping tools calling the carrier API at
// baseURL: book_shipment and its reversal cancel_shipment. hc nil means a
// client bounded by each call's context.
func Tools(baseURL string, hc *http.Client) []tool.Tool {
	c := httptool.New(baseURL, hc)
	return []tool.Tool{&bookShipment{c: c}, &cancelShipment{c: c}}
}

// bookShipment books a parcel pickup. The carrier honours Idempotency-Key
// like Stripe: the same key and body answers the shipment booked before, the
// same key with another body is 422 idempotency_key_mismatch.
type bookShipment struct{ c *httptool.Client }

func (t *bookShipment) Spec() tool.Spec {
	return tool.Spec{
		Name:        BookShipment,
		Description: "Book a carrier pickup for an order.",
		System:      "carrier",
		Class:       tool.IdempotentWrite,
		Timeout:     10 * time.Second,
		Compensator: CancelShipment,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "order_id", Type: tool.String, Required: true, Description: "the order shipped, such as ord_1001"},
			{Name: "address", Type: tool.String, Required: true, Description: "the delivery address, one line"},
			{Name: "service", Type: tool.String, Required: true, Description: "standard or express"},
		}},
		// A shipment found under the key must be the one this call asked
		// for: a reused key with other args is someone else's booking.
		Match: []tool.MatchField{{Arg: "order_id", Result: "order_id"}, {Arg: "address", Result: "address"}, {Arg: "service", Result: "service"}},
	}
}

// Execute posts the booking with the operation key as Idempotency-Key;
// httptool turns what happened on the wire into the tool.Kind the saga needs.
func (t *bookShipment) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	raw, err := t.c.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: "/v1/shipments", Key: call.Key, Body: call.Args})
	if err != nil {
		return tool.Result{}, err
	}
	return withID(raw, "book_shipment")
}

// Reconcile finds the shipment booked under key.
func (t *bookShipment) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return lookup(ctx, t.c, "/v1/shipments?idempotency_key="+url.QueryEscape(key))
}

// cancelShipment undoes a booking with a cancellation of its own, keyed by
// the compensation key.
type cancelShipment struct{ c *httptool.Client }

func (t *cancelShipment) Spec() tool.Spec {
	return tool.Spec{
		Name:        CancelShipment,
		Description: "Cancel a booked pickup (the reversal of book_shipment).",
		System:      "carrier",
		Class:       tool.IdempotentWrite,
		Timeout:     10 * time.Second,
		Reversal:    true,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "original_key", Type: tool.String, Required: true, Description: "key of the booking undone"},
			{Name: "original_tool", Type: tool.String, Description: "tool of the booking undone"},
			{Name: "original_external_id", Type: tool.String, Description: "the shipment to cancel"},
		}},
		Match: []tool.MatchField{{Arg: "original_external_id", Result: "cancels", IfSet: true}},
	}
}

// Execute cancels the shipment the tool.Reversal names, under call.Key (the
// original's key plus ":compensate").
func (t *cancelShipment) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var rev tool.Reversal
	if err := json.Unmarshal(call.Args, &rev); err != nil || rev.OriginalExternalID == "" {
		return tool.Result{}, tool.Fail(tool.KindRejected, "invalid_args",
			fmt.Errorf("cancel_shipment needs a tool.Reversal naming the shipment (original_external_id): %v", err))
	}
	raw, err := t.c.Raw(ctx, httptool.Request{Method: http.MethodPost, Path: "/v1/shipments/" + url.PathEscape(rev.OriginalExternalID) + "/cancel",
		Key: call.Key, Body: map[string]string{"reason": "saga compensation"}})
	if err != nil {
		return tool.Result{}, err
	}
	return withID(raw, "cancel_shipment")
}

// Reconcile finds the cancellation made under key.
func (t *cancelShipment) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return lookup(ctx, t.c, "/v1/cancellations?idempotency_key="+url.QueryEscape(key))
}

// withID reads the carrier's 2xx answer; one without an id is UNKNOWN (the
// effect happened, only a lookup can say which).
func withID(raw json.RawMessage, what string) (tool.Result, error) {
	var e struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.ID == "" {
		return tool.Result{}, tool.Fail(tool.KindUnknown, "bad_response", fmt.Errorf("%s: the carrier answered 2xx without an id: reconcile by key", what))
	}
	return tool.Result{ExternalID: e.ID, Data: raw}, nil
}

// lookup asks the carrier for what it holds under a key: 200 is Found, 404
// an authoritative Absent (the carrier's own store answers), anything else
// Unknown.
func lookup(ctx context.Context, c *httptool.Client, path string) (tool.Lookup, error) {
	raw, err := c.Raw(ctx, httptool.Request{Path: path})
	switch {
	case err == nil:
		res, err := withID(raw, "lookup")
		if err != nil {
			return tool.Lookup{Status: tool.Unknown}, err
		}
		return tool.Lookup{Status: tool.Found, Result: res, Authoritative: true}, nil
	case httptool.StatusOf(err) == http.StatusNotFound:
		return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
	}
	return tool.Lookup{Status: tool.Unknown}, fmt.Errorf("lookup %s: %w", path, err)
}

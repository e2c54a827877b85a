package agentsaga_test

import (
	"context"
	"encoding/json"
	"net/url"
	"time"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// This file holds README.md's Go samples so that they compile: each region
// between "// readme:begin" and "// readme:end" is one ```go block of the
// README, in the README's order (TestREADMEGoBlocks checks that they are
// equal). The code around a region gives it what it uses.

// Example_sessionTurn is the sample of "Interactive sessions".
func Example_sessionTurn() {
	ctx := context.Background()
	var plans *sagaclient.Client
	var steps []plan.Step
	// readme:begin
	res, err := plans.Turn(ctx, "sess-42", workflows.TurnRequest{Turn: 3, Steps: steps}, sagaclient.SessionOptions{})
	// res.State: succeeded | failed | waiting (res.Question holds the open question and its card)
	// readme:end
	_, _ = res, err
}

// readme:begin
type createRefund struct{ c *httptool.Client }

func (t *createRefund) Spec() tool.Spec {
	return tool.Spec{
		Name:  "create_refund",
		Class: tool.NonIdempotentWrite,
		Args: tool.Schema{Fields: []tool.Field{
			{Name: "order_id", Type: tool.String, Required: true},
			{Name: "amount_minor", Type: tool.Money, Required: true},
		}},
		Timeout:     10 * time.Second,
		Compensator: "reverse_refund", // a tool with Reversal: true
		Approval:    &tool.Approval{Field: "amount_minor", AboveMinor: 50000},
		// An effect found under the key is adopted only if it was made with
		// these arguments (and never after the provider's key conflict
		// without them).
		Match: []tool.MatchField{{Arg: "order_id", Result: "order_id"}, {Arg: "amount_minor", Result: "amount_minor"}},
	}
}

// Execute sends the operation key as Idempotency-Key; httptool maps "sent, no
// answer" to tool.KindUnknown and 4xx business answers to tool.KindRejected.
func (t *createRefund) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	var out json.RawMessage // {"id": "re_1", "order_id": ..., "amount_minor": ...}
	err := t.c.Do(ctx, httptool.Request{Method: "POST", Path: "/v1/refunds", Key: call.Key, Body: call.Args}, &out)
	if err != nil {
		return tool.Result{}, err
	}
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(out, &id)
	return tool.Result{ExternalID: id.ID, Data: out}, nil // Data is checked against Match
}

// Reconcile looks the key up: found (with the provider's record, which Match
// checks), absent (authoritative) or unknown.
func (t *createRefund) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	var out struct {
		Refunds []json.RawMessage `json:"refunds"`
	}
	if err := t.c.Do(ctx, httptool.Request{Method: "GET", Path: "/v1/refunds?idempotency_key=" + url.QueryEscape(key)}, &out); err != nil {
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	if len(out.Refunds) == 0 {
		return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
	}
	var id struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(out.Refunds[0], &id)
	return tool.Lookup{Status: tool.Found, Result: tool.Result{ExternalID: id.ID, Data: out.Refunds[0]}}, nil
}

// readme:end

// Example_writingATool registers the sample of "Writing a tool" as the
// README says (with its reversal tool, which the sample leaves out).
func Example_writingATool() {
	_, _ = tool.NewRegistry(&createRefund{c: httptool.New("http://127.0.0.1:8090", nil)})
}

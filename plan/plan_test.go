package plan_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

var catalog = tool.Specs{
	"query_order": {Name: "query_order", Class: tool.Read, Timeout: time.Second,
		Args: tool.Schema{Fields: []tool.Field{{Name: "order_id", Type: tool.String, Required: true}}}},
	"apply_refund": {Name: "apply_refund", Class: tool.NonIdempotentWrite, Timeout: time.Second, Compensator: "reverse_refund",
		Args: tool.Schema{Fields: []tool.Field{{Name: "order_id", Type: tool.String, Required: true}, {Name: "amount_minor", Type: tool.Money, Required: true}}}},
	"send_email": {Name: "send_email", Class: tool.NonIdempotentWrite, Timeout: time.Second, NoLookup: true,
		Args: tool.Schema{Fields: []tool.Field{{Name: "to", Type: tool.String, Required: true}}}},
	"reverse_refund": {Name: "reverse_refund", Class: tool.IdempotentWrite, Reversal: true, Timeout: time.Second},
}

func parse(t *testing.T, s string) plan.Plan {
	t.Helper()
	p, err := plan.Parse(strings.NewReader(s))
	require.NoError(t, err)
	return p
}

func problems(t *testing.T, p plan.Plan) map[string]string {
	t.Helper()
	err := p.Validate(catalog)
	require.Error(t, err)
	require.True(t, plan.IsValidation(err))
	var v *plan.ValidationError
	require.ErrorAs(t, err, &v)
	out := map[string]string{}
	for _, e := range v.Problems {
		out[e.Path] = e.Problem
	}
	return out
}

func TestValidPlan(t *testing.T) {
	p := parse(t, `{"session_id":"sess-1","turn":2,"request_id":"r1","steps":[
		{"tool":"query_order","args":{"order_id":"o1"}},
		{"tool":"apply_refund","args":{"order_id":"o1","amount_minor":12900}},
		{"tool":"send_email","args":{"to":"a@example.com"}}]}`)
	require.NoError(t, p.Validate(catalog))
	require.Equal(t, "sess-1:2:2:apply_refund", p.Key(2))
	require.Equal(t, "agent-plan:sess-1:2", p.WorkflowID())
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	p := parse(t, `{"session_id":"","turn":0,"steps":[
		{"tool":"teleport","args":{}},
		{"tool":"apply_refund","args":{"order_id":"o1","amount_minor":129.00}},
		{"tool":"apply_refund","args":{"order_id":"o1","amount_minor":"12900"}},
		{"tool":"query_order","args":{"order_id":5}},
		{"tool":"reverse_refund","args":{}}]}`)
	got := problems(t, p)
	require.Equal(t, "is required", got["session_id"])
	require.Contains(t, got["turn"], "must be an integer >= 1")
	require.Contains(t, got["steps[1].tool"], `unknown tool "teleport"`)
	require.Contains(t, got["steps[2].args.amount_minor"], "must be an integer, got 129.00")
	require.Contains(t, got["steps[2].args.amount_minor"], "never rounded")
	require.Contains(t, got["steps[3].args.amount_minor"], `got the string "12900"`)
	require.Contains(t, got["steps[4].args.order_id"], "must be a string")
	require.Contains(t, got["steps[5].tool"], "reversal used only by compensation")
}

func TestNonCompensableWriteMustBeLast(t *testing.T) {
	p := parse(t, `{"session_id":"s","turn":1,"steps":[
		{"tool":"send_email","args":{"to":"a@example.com"}},
		{"tool":"query_order","args":{"order_id":"o1"}},
		{"tool":"apply_refund","args":{"order_id":"o1","amount_minor":100}}]}`)
	got := problems(t, p)
	require.Contains(t, got["steps[1].tool"], "send_email cannot be undone: it must be the last step of the plan (step 2, query_order, comes after it")
}

func TestIrreversibleWriteMustBeTheLastStepEvenBeforeARead(t *testing.T) {
	p := parse(t, `{"session_id":"s","turn":1,"steps":[
		{"tool":"apply_refund","args":{"order_id":"o1","amount_minor":100}},
		{"tool":"send_email","args":{"to":"a@example.com"}},
		{"tool":"query_order","args":{"order_id":"o1"}}]}`)
	got := problems(t, p)
	require.Len(t, got, 1, "%v", got)
	require.Contains(t, got["steps[2].tool"], "send_email cannot be undone: it must be the last step of the plan (step 3, query_order, comes after it")

	last := parse(t, `{"session_id":"s","turn":1,"steps":[
		{"tool":"query_order","args":{"order_id":"o1"}},
		{"tool":"apply_refund","args":{"order_id":"o1","amount_minor":100}},
		{"tool":"send_email","args":{"to":"a@example.com"}}]}`)
	require.NoError(t, last.Validate(catalog))
}

func TestParseRefusesBadShapes(t *testing.T) {
	_, err := plan.Parse(strings.NewReader(`{"session_id":"s","turn":1.5,"steps":[]}`))
	require.ErrorContains(t, err, "turn: must be an integer >= 1, got 1.5")
	_, err = plan.Parse(strings.NewReader(`{"session_id":"s","turn":1,"steps":[],"model_key":"x"}`))
	require.ErrorContains(t, err, "model_key")
	p := parse(t, `{"session_id":"a:b","turn":1,"steps":[]}`)
	got := problems(t, p)
	require.Contains(t, got["session_id"], "part of every operation key")
	require.Equal(t, "must list at least one tool call", got["steps"])
}

func TestFingerprintIsCanonical(t *testing.T) {
	a, err := plan.Fingerprint("apply_refund", json.RawMessage(`{"order_id":"o1","amount_minor":12900}`))
	require.NoError(t, err)
	b, err := plan.Fingerprint("apply_refund", json.RawMessage(`{ "amount_minor": 12900, "order_id": "o1" }`))
	require.NoError(t, err)
	require.Equal(t, a, b, "key order and spacing do not matter")
	c, err := plan.Fingerprint("apply_refund", json.RawMessage(`{"order_id":"o1","amount_minor":129}`))
	require.NoError(t, err)
	require.NotEqual(t, a, c, "a changed amount is a different request")
	d, err := plan.Fingerprint("send_email", json.RawMessage(`{"order_id":"o1","amount_minor":12900}`))
	require.NoError(t, err)
	require.NotEqual(t, a, d, "the tool is part of the fingerprint")
	require.Len(t, a, 64)
}

func TestPlanFingerprint(t *testing.T) {
	p1 := parse(t, `{"session_id":"s","turn":1,"steps":[{"tool":"query_order","args":{"order_id":"o1"}}]}`)
	p2 := parse(t, `{"turn":1,"session_id":"s","steps":[{"args":{"order_id":"o1"},"tool":"query_order"}]}`)
	p3 := parse(t, `{"session_id":"s","turn":1,"steps":[{"tool":"query_order","args":{"order_id":"o2"}}]}`)
	f1, _ := p1.Fingerprint()
	f2, _ := p2.Fingerprint()
	f3, _ := p3.Fingerprint()
	require.Equal(t, f1, f2)
	require.NotEqual(t, f1, f3)
}

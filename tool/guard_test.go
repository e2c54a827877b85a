package tool_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/tool"
)

func TestGuardEntityFolded(t *testing.T) {
	g := &tool.Guard{Scope: "refund-per-order", Fields: []string{"order_id"}}
	want := g.ScopeKey(json.RawMessage(`{"order_id":"o-16"}`))
	require.Equal(t, `refund-per-order:["o-16"]`, want)
	for _, in := range []string{`"o-16 "`, `"O-16"`, `" \tO-16\n"`} {
		require.Equal(t, want, g.ScopeKey(json.RawMessage(`{"order_id":`+in+`}`)), in)
	}
	require.NotEqual(t, want, g.ScopeKey(json.RawMessage(`{"order_id":"o-17"}`)))
	// NFC: "é" precomposed and decomposed are one entity; inner runs of space
	// collapse.
	require.Equal(t, g.Entity(json.RawMessage(`{"order_id":"caf\u00e9  order"}`)), g.Entity(json.RawMessage(`{"order_id":"CAFE\u0301 order"}`)))
	// Numbers keep their literal.
	require.Equal(t, `[16]`, g.Entity(json.RawMessage(`{"order_id":16}`)))
}

func TestGuardEntityForms(t *testing.T) {
	cased := &tool.Guard{Scope: "s", Fields: []string{"id"}, Form: tool.CasedEntity}
	require.Equal(t, cased.Entity(json.RawMessage(`{"id":"Ab "}`)), cased.Entity(json.RawMessage(`{"id":"Ab"}`)))
	require.NotEqual(t, cased.Entity(json.RawMessage(`{"id":"AB"}`)), cased.Entity(json.RawMessage(`{"id":"Ab"}`)))
	exact := &tool.Guard{Scope: "s", Fields: []string{"id"}, Form: tool.ExactEntity}
	require.NotEqual(t, exact.Entity(json.RawMessage(`{"id":"Ab "}`)), exact.Entity(json.RawMessage(`{"id":"Ab"}`)))
	norm := (&tool.Guard{Fields: []string{"id"}}).NormalizeArgs(json.RawMessage(`{"id":" X-1","amount":5}`))
	require.Equal(t, "x-1", norm["id"])
	require.Equal(t, json.Number("5"), norm["amount"])
}

func TestRegistryChecksGuardFormAndMatch(t *testing.T) {
	args := tool.Schema{Fields: []tool.Field{{Name: "order_id", Type: tool.String}}}
	_, err := tool.NewRegistry(lookupStub{stub{tool.Spec{Name: "w", Class: tool.IdempotentWrite, Timeout: time.Second, Args: args,
		Guard: &tool.Guard{Scope: "s", Fields: []string{"order_id"}, Form: "lower"},
		Match: []tool.MatchField{{Arg: "amount", Result: "amount"}, {Arg: "order_id"}}}}})
	require.Error(t, err)
	require.Contains(t, err.Error(), `guard form "lower" is unknown`)
	require.Contains(t, err.Error(), `match arg "amount" is not a declared argument`)
	require.Contains(t, err.Error(), `match field for arg "order_id" names no result field`)
}

func TestCompareFields(t *testing.T) {
	fields := []tool.MatchField{
		{Arg: "amount_minor", Result: "amount_minor"},
		{Arg: "order_id", Result: "order_id"},
		{Arg: "priority", Result: "priority", Default: "normal"},
		{Arg: "original_external_id", Result: "reverses", IfSet: true},
	}
	data := json.RawMessage(`{"id":"re_1","amount_minor":12900,"order_id":"o-1","priority":"normal","reverses":"pay_1"}`)
	require.Empty(t, tool.CompareFields(fields, json.RawMessage(`{"amount_minor":12900,"order_id":"o-1"}`), data))
	require.Empty(t, tool.CompareFields(fields, json.RawMessage(`{"amount_minor":12900,"order_id":"o-1","original_external_id":"pay_1"}`), data))
	diffs := tool.CompareFields(fields, json.RawMessage(`{"amount_minor":15000,"order_id":"o-1","priority":"high","original_external_id":"pay_2"}`), data)
	require.Len(t, diffs, 3, fmt.Sprint(diffs))
	require.Contains(t, diffs[0], `amount_minor: this call has "15000", the provider's effect has "12900"`)
	require.Contains(t, diffs[1], `priority`)
	require.Contains(t, diffs[2], `original_external_id`)
	// An absent field the call sets is a difference, not a match.
	require.Len(t, tool.CompareFields(fields, json.RawMessage(`{"amount_minor":12900,"order_id":"o-1"}`), json.RawMessage(`{"amount_minor":12900}`)), 2)
	require.NotEmpty(t, tool.CompareFields(fields, json.RawMessage(`{}`), json.RawMessage(`not json`)))
	require.Empty(t, tool.CompareFields(nil, json.RawMessage(`{}`), json.RawMessage(`not json`)), "nothing declared, nothing compared")
}

func TestEveryClassHasABoundedRetry(t *testing.T) {
	for _, c := range tool.Classes {
		p := tool.DefaultRetry(c)
		require.NoError(t, p.Validate(), c)
		require.GreaterOrEqual(t, p.MaxAttempts, int32(1), c)
		require.LessOrEqual(t, p.MaxAttempts, int32(5), "%s: attempts must be bounded (0 is unlimited in Temporal)", c)
		require.Positive(t, p.MaximumInterval, c)
		require.GreaterOrEqual(t, p.MaximumInterval, p.InitialInterval, c)
	}
	require.Error(t, tool.RetryPolicy{MaxAttempts: 2, InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Millisecond}.Validate())
}

func TestRetryAfterOf(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &tool.Error{Kind: tool.KindThrottled, Code: "http_429", RetryAfter: 3 * time.Second})
	require.Equal(t, 3*time.Second, tool.RetryAfterOf(err))
	require.Zero(t, tool.RetryAfterOf(errors.New("plain")))
}

// EntityAndArgs is Entity and NormalizeArgs from one decoding.
func TestEntityAndArgsIsEntityAndNormalizeArgs(t *testing.T) {
	g := &tool.Guard{Scope: "refund-per-order", Fields: []string{"order_id", "sku"}, Form: tool.FoldedEntity}
	for _, raw := range []string{`{"order_id":"ORD_1 ","sku":7,"x":"y"}`, `{"order_id":"o-1"}`, `[]`, ``, `{"order_id":null}`} {
		ent, norm := g.EntityAndArgs(json.RawMessage(raw))
		require.Equal(t, g.Entity(json.RawMessage(raw)), ent, raw)
		require.Equal(t, g.NormalizeArgs(json.RawMessage(raw)), norm, raw)
	}
}

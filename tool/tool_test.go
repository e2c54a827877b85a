package tool_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/tool"
)

type stub struct{ spec tool.Spec }

func (s stub) Spec() tool.Spec { return s.spec }
func (s stub) Execute(context.Context, tool.Call) (tool.Result, error) {
	return tool.Result{}, nil
}

type lookupStub struct{ stub }

func (lookupStub) Reconcile(context.Context, string) (tool.Lookup, error) {
	return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
}

func TestRegistryRefusesAndNamesEveryOffender(t *testing.T) {
	_, err := tool.NewRegistry(
		stub{tool.Spec{Name: "unclassified", Timeout: time.Second}},
		stub{tool.Spec{Name: "writes_blind", Class: tool.IdempotentWrite, Timeout: time.Second}},
		lookupStub{stub{tool.Spec{Name: "pays", Class: tool.IdempotentWrite, Timeout: time.Second, Compensator: "missing_reverse"}}},
		stub{tool.Spec{Name: "reads", Class: tool.Read, Timeout: time.Second}},
	)
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "unclassified: declares no side-effect class")
	require.Contains(t, msg, "writes_blind: is a write without a Reconcile")
	require.Contains(t, msg, `pays: compensator "missing_reverse" is not registered`)
	require.NotContains(t, msg, "reads:")
}

func TestRegistryAcceptsDeclaredTools(t *testing.T) {
	r, err := tool.NewRegistry(
		stub{tool.Spec{Name: "reads", Class: tool.Read, Timeout: time.Second}},
		stub{tool.Spec{Name: "mail", Class: tool.NonIdempotentWrite, Timeout: time.Second, NoLookup: true}},
		lookupStub{stub{tool.Spec{Name: "pay", Class: tool.IdempotentWrite, Timeout: time.Second, Compensator: "pay_reverse"}}},
		lookupStub{stub{tool.Spec{Name: "pay_reverse", Class: tool.IdempotentWrite, Timeout: time.Second, Reversal: true}}},
	)
	require.NoError(t, err)
	require.Equal(t, []string{"mail", "pay", "pay_reverse", "reads"}, r.Names())
	look, err := r.Reconcile(context.Background(), "mail", "k")
	require.NoError(t, err)
	require.Equal(t, tool.Unknown, look.Status, "a tool without lookup can only answer unknown")
}

func TestRetryableByClass(t *testing.T) {
	// DESIGN.md's table, row by row.
	want := map[tool.Class]map[tool.Kind]bool{
		tool.Read:               {tool.KindUnknown: true, tool.KindUnavailable: true, tool.KindThrottled: true, tool.KindNotSent: true, tool.KindInFlight: true},
		tool.IdempotentWrite:    {tool.KindUnavailable: true, tool.KindThrottled: true, tool.KindNotSent: true, tool.KindInFlight: true},
		tool.ConditionalWrite:   {tool.KindUnavailable: true, tool.KindThrottled: true, tool.KindNotSent: true, tool.KindInFlight: true},
		tool.NonIdempotentWrite: {tool.KindNotSent: true},
	}
	kinds := []tool.Kind{tool.KindNotSent, tool.KindUnavailable, tool.KindThrottled, tool.KindInFlight, tool.KindUnknown, tool.KindRejected, tool.KindConflict}
	for c, row := range want {
		for _, k := range kinds {
			require.Equal(t, row[k], tool.Retryable(c, k), "%s on %s", c, k)
		}
	}
	require.EqualValues(t, 3, tool.DefaultRetry(tool.Read).MaxAttempts)
	require.Equal(t, 200*time.Millisecond, tool.DefaultRetry(tool.Read).InitialInterval)
	require.EqualValues(t, 2, tool.DefaultRetry(tool.NonIdempotentWrite).MaxAttempts)
	require.Equal(t, 500*time.Millisecond, tool.DefaultRetry(tool.IdempotentWrite).InitialInterval)
}

func TestKindOfUnexplainedErrorIsUnknown(t *testing.T) {
	require.Equal(t, tool.KindUnknown, tool.KindOf(context.DeadlineExceeded))
	require.Equal(t, tool.KindRejected, tool.KindOf(tool.Fail(tool.KindRejected, "no", nil)))
}

func TestSchemaRefusesFloatMoney(t *testing.T) {
	s := tool.Schema{Fields: []tool.Field{{Name: "amount_minor", Type: tool.Money, Required: true}, {Name: "note", Type: tool.String}}}
	cases := map[string]string{
		`{"amount_minor": 129.00}`:   "must be an integer, got 129.00 of minor units",
		`{"amount_minor": "12900"}`:  `must be an integer, got the string "12900"`,
		`{"amount_minor": 1.29e4}`:   "must be an integer",
		`{"amount_minor": 0}`:        "must be a positive integer",
		`{}`:                         "is required",
		`{"amount_minor": 1, "x":1}`: "is not an argument of this tool",
		`{"amount_minor": 1, "note": "4111 1111 1111 1111"}`: "holds a card number; pass a vault token such as tok_visa",
	}
	for in, want := range cases {
		errs := s.Check("args", json.RawMessage(in))
		require.Len(t, errs, 1, in)
		require.Contains(t, errs[0].Problem, want, in)
	}
	require.Empty(t, s.Check("args", json.RawMessage(`{"amount_minor": 12900}`)))
}

func TestApprovalThreshold(t *testing.T) {
	a := &tool.Approval{Field: "amount_minor", AboveMinor: 50000}
	require.False(t, a.Required(json.RawMessage(`{"amount_minor": 50000}`)))
	require.True(t, a.Required(json.RawMessage(`{"amount_minor": 50001}`)))
	var none *tool.Approval
	require.False(t, none.Required(nil))
}

func TestStringArgumentsAreStrict(t *testing.T) {
	s := tool.Schema{Fields: []tool.Field{
		{Name: "subject", Type: tool.String},
		{Name: "body", Type: tool.String, Multiline: true, MaxLen: 50},
		{Name: "to", Type: tool.Email},
	}}
	cases := map[string]string{
		`{"subject": "card 4111 1111 1111 1111 declined"}`:  "holds a card number; pass a vault token such as tok_visa",
		`{"body": "refund to DE89 3704 0044 0532 0130 00"}`: "holds an IBAN",
		`{"subject": "use sk_live_51HxYzABCDEFGHIJKLMNOP"}`: "holds an API key; credentials must never enter a plan",
		`{"body": "Authorization: Bearer abc.DEF-123"}`:     "holds a bearer token",
		`{"subject": "api_key=zzzz1234"}`:                   "holds a credential",
		`{"subject": "a\u0000b"}`:                           "holds a control character (U+0000 at byte 1)",
		`{"subject": "\u001b[31mred"}`:                      "holds a control character (U+001B at byte 0)",
		`{"subject": "two\nlines"}`:                         "holds a control character (U+000A",
		`{"body": "a\rb"}`:                                  "other than line feed and tab (U+000D",
		`{"subject": "abc\u202edcba"}`:                      "(U+202E",
		`{"body": "` + strings.Repeat("x", 51) + `"}`:       "is 51 bytes long, the limit is 50 bytes",
		`{"subject": "` + strings.Repeat("x", 1001) + `"}`:  "is 1001 bytes long, the limit is 1000 bytes",
		`{"to": "Ana <ana@example.com>"}`:                   "must be a bare e-mail address",
		`{"to": "ana@example.com, bob@example.com"}`:        "must be one e-mail address",
		`{"to": "not an address"}`:                          "must be one e-mail address",
		`{"to": " ana@example.com"}`:                        "must be a bare e-mail address",
		`{"to": 5}`:                                         "must be a string",
		`{"subject": "x", "4111111111111111": 1}`:           "is not an argument",
	}
	for in, want := range cases {
		errs := s.Check("args", json.RawMessage(in))
		require.Len(t, errs, 1, in)
		require.Contains(t, errs[0].Problem, want, in)
		require.NotContains(t, errs[0].Error(), "4111111111111111", "a refusal never echoes a secret")
	}
	require.Empty(t, s.Check("args", json.RawMessage(`{"subject":"café ✓","body":"line one\n\tline two","to":"ana@example.com"}`)))
}

func TestMoneyCeiling(t *testing.T) {
	sp := tool.Spec{Name: "pay", Args: tool.Schema{Fields: []tool.Field{{Name: "amount_minor", Type: tool.Money, Required: true}}}, MaxAmountMinor: 10_000_000}
	require.Empty(t, sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 10000000}`), tool.ArgLimits{}))
	errs := sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 9223372036854775807}`), tool.ArgLimits{})
	require.Len(t, errs, 1)
	require.Equal(t, "a.amount_minor", errs[0].Path)
	require.Contains(t, errs[0].Problem, "is 9223372036854775807 minor units, above this tool's ceiling of 10000000 (100000.00)")
	errs = sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 92233720368547758070}`), tool.ArgLimits{})
	require.Contains(t, errs[0].Problem, "must be an integer")
	// Without a spec ceiling the limits' (or the default) applies.
	sp.MaxAmountMinor = 0
	require.NotEmpty(t, sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 100000001}`), tool.ArgLimits{}))
	require.Empty(t, sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 100000001}`), tool.ArgLimits{MaxAmountMinor: 200_000_000}))
}

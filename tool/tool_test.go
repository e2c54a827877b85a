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
	// ARCHITECTURE.md's table, row by row.
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
	// An amount too large for 64 bits is refused by the ceiling, which is
	// named, like any amount above it.
	errs = sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 92233720368547758070}`), tool.ArgLimits{})
	require.Contains(t, errs[0].Problem, "is 92233720368547758070 minor units, above this tool's ceiling of 10000000 (100000.00)")
	// Without a spec ceiling the limits' (or the default) applies.
	sp.MaxAmountMinor = 0
	require.NotEmpty(t, sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 100000001}`), tool.ArgLimits{}))
	require.Empty(t, sp.CheckArgs("a", json.RawMessage(`{"amount_minor": 100000001}`), tool.ArgLimits{MaxAmountMinor: 200_000_000}))
}

// An integer argument too large for 64 bits is refused with its limit.
func TestIntegerOutOfRangeNamesTheLimit(t *testing.T) {
	s := tool.Schema{Fields: []tool.Field{{Name: "count", Type: tool.Integer}}}
	errs := s.Check("args", json.RawMessage(`{"count": 99999999999999999999}`))
	require.Len(t, errs, 1)
	require.Equal(t, "args.count", errs[0].Path)
	require.Contains(t, errs[0].Problem, "the limit is -9223372036854775808 to 9223372036854775807")
}

// A currency is a current ISO 4217 code in upper case; anything else is
// refused naming the field.
func TestCurrencyIsISO4217(t *testing.T) {
	s := tool.Schema{Fields: []tool.Field{{Name: "amount_minor", Type: tool.Money, Required: true}, {Name: "currency", Type: tool.Currency, Required: true}}}
	for in, want := range map[string]string{
		`{"amount_minor": 1, "currency": "XYZ"}`:  `must be a current ISO 4217 currency code in upper case, such as EUR, USD or JPY; got "XYZ"`,
		`{"amount_minor": 1, "currency": "eur"}`:  "must be an ISO 4217 code in upper case: write EUR, not eur",
		`{"amount_minor": 1, "currency": "Eur"}`:  "write EUR, not Eur",
		`{"amount_minor": 1, "currency": "EURO"}`: "must be a current ISO 4217 currency code",
		`{"amount_minor": 1, "currency": "XXX"}`:  "must be a current ISO 4217 currency code",
		`{"amount_minor": 1, "currency": "BGN"}`:  "must be a current ISO 4217 currency code", // withdrawn: Bulgaria uses EUR
		`{"amount_minor": 1, "currency": 978}`:    "must be an ISO 4217 currency code as a string",
		`{"amount_minor": 1, "currency": ""}`:     "must be a current ISO 4217 currency code",
		`{"amount_minor": 1}`:                     "is required (currency)",
	} {
		errs := s.Check("args", json.RawMessage(in))
		require.Len(t, errs, 1, in)
		require.Equal(t, "args.currency", errs[0].Path, in)
		require.Contains(t, errs[0].Problem, want, in)
	}
	for _, c := range []string{"EUR", "USD", "JPY", "KWD", "CLF", "VES", "XCG", "ZWG"} {
		require.Empty(t, s.Check("args", json.RawMessage(`{"amount_minor": 1, "currency": "`+c+`"}`)), c)
	}
	for code, want := range map[string]int{"EUR": 2, "JPY": 0, "KWD": 3, "CLF": 4, "ISK": 0} {
		got, ok := tool.MinorDigits(code)
		require.True(t, ok, code)
		require.Equal(t, want, got, code)
	}
	_, ok := tool.MinorDigits("eur")
	require.False(t, ok, "codes are upper case")
}

// Card numbers in any shape, and passwords in URLs, are refused in any
// string argument.
func TestSecretsInOtherShapesAreRefused(t *testing.T) {
	s := tool.Schema{Fields: []tool.Field{{Name: "body", Type: tool.String, Multiline: true}}}
	for in, want := range map[string]string{
		`{"body": "4242.4242.4242.4242"}`:                     "holds a card number",
		`{"body": "4242/4242/4242/4242"}`:                     "holds a card number",
		`{"body": "4242\n4242\n4242\n4242"}`:                  "holds a card number",
		`{"body": "４２４２４２４２４２４２４２４２"}`:                        "holds a card number",
		`{"body": "see https://user:password@host.example/"}`: "holds a credential",
	} {
		errs := s.Check("args", json.RawMessage(in))
		require.Len(t, errs, 1, in)
		require.Equal(t, "args.body", errs[0].Path)
		require.Contains(t, errs[0].Problem, want, in)
		require.NotContains(t, errs[0].Error(), "password", in)
		require.NotContains(t, errs[0].Error(), "4242", in)
	}
}

func TestIsReversalKey(t *testing.T) {
	for k, want := range map[string]bool{
		"s:1:1:refund:compensate": true, "s:1:1:refund:compensate:2": true, "s:1:1:refund:compensate:12": true,
		"s:1:1:refund": false, "s:1:1:refund:compensate:": false, "s:1:1:refund:compensate:x": false, "s:1:1:refund:compensateX": false,
	} {
		require.Equal(t, want, tool.IsReversalKey(k), k)
	}
	require.True(t, tool.IsReversalKey(tool.ReversalRetryKey("s:1:1:refund", 3)))
}

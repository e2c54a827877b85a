package tool_test

import (
	"context"
	"encoding/json"
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
		`{"amount_minor": 1, "note": "4111 1111 1111 1111"}`: "looks like a card number",
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

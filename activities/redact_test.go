package activities_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/tool"
)

// secrets a provider's error text may carry.
var secrets = []string{"4111 1111 1111 1111", "4111111111111111", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
	"sk_live_51HxYzABCDEFGHIJKLMNOP", "DE89370400440532013000"}

// providerError is what a leaky provider answers: its code and its text
// hold a card number, a bearer token, a key and an IBAN, in a chain.
func providerError() error {
	return tool.Fail(tool.KindRejected, "card_4111111111111111", fmt.Errorf("POST /v1/payments: %w",
		errors.New("declined card 4111 1111 1111 1111 for Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl key sk_live_51HxYzABCDEFGHIJKLMNOP to DE89370400440532013000")))
}

func requireMasked(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range secrets {
		require.NotContains(t, text, s, "%s leaks a secret", what)
	}
}

// A provider's error with secrets leaves the tool masked everywhere the
// worker puts it: the activity error's message, every cause in the chain
// Temporal stores in history, the code in Detail, the SDK's and the
// activity's logs; the code the workflow shows equals the ledger's.
func TestProviderErrorsLeaveMasked(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(int, tool.Call) (tool.Result, error) { return tool.Result{}, providerError() }

	st, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	reg, err := tool.NewRegistry(ft)
	require.NoError(t, err)
	var logs bytes.Buffer // no redacting handler: what is logged must be masked already
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := &activities.Activities{Tools: reg, Ledger: st, Log: logger}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(logger))
	te := suite.NewTestActivityEnvironment()
	te.RegisterActivity(a)

	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	_, err = te.ExecuteActivity(a.ExecuteTool, req)
	ae := appErr(t, err)
	require.Equal(t, activities.ErrRejected, ae.Type())
	require.Contains(t, ae.Message(), "declined card [redacted card ending 1111] for Bearer [redacted] key sk_live_[redacted] to [redacted IBAN DE ending 3000]")
	for e := error(ae); e != nil; e = errors.Unwrap(e) {
		requireMasked(t, "cause chain", e.Error())
	}
	d := activities.DetailOf(err)
	require.Equal(t, "card_[redacted card ending 1111]", d.Code)
	op, gerr := st.Get(context.Background(), req.Key)
	require.NoError(t, gerr)
	require.Equal(t, "rejected:"+d.Code, op.ErrorCode, "status and ledger show the same masked code")
	requireMasked(t, "logs", logs.String())
	require.Contains(t, logs.String(), "[redacted card ending 1111]", "the failure was logged, masked")
}

func TestClassifyAndMaskedChain(t *testing.T) {
	err := activities.Classify(tool.Read, 1, providerError())
	for e := err; e != nil; e = errors.Unwrap(e) {
		requireMasked(t, "Classify chain", e.Error())
	}
	var ae *temporal.ApplicationError
	require.ErrorAs(t, errors.Unwrap(err), &ae)
	require.Equal(t, "Error", ae.Type(), "causes keep the Go type name Temporal would give them")
	require.Nil(t, activities.MaskedChain(nil))

	inner := temporal.NewNonRetryableApplicationError("card "+secrets[1], "Provider", nil)
	m := activities.MaskedChain(fmt.Errorf("wrapped: %w", inner))
	require.ErrorAs(t, errors.Unwrap(m), &ae)
	require.Equal(t, "Provider", ae.Type())
	require.True(t, ae.NonRetryable())
	requireMasked(t, "MaskedChain", m.Error())
}

// Lookups and results reach the workflow masked: the provider's answer and
// the differences found (which quote it); the external id is kept.
func TestLookupsAndResultsAreMasked(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.reconcile = func(int) (tool.Lookup, error) {
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: "pay_1",
			Data: json.RawMessage(`{"amount_minor":4111111111111111,"note":"card 4111 1111 1111 1111"}`)}}, nil
	}
	e := newEnv(t, nil, ft)
	l := e.lookup(request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`))
	require.Equal(t, tool.Mismatch, l.Status)
	require.Equal(t, "pay_1", l.Result.ExternalID)
	b, _ := json.Marshal(l)
	requireMasked(t, "lookup", string(b))
	require.NotEmpty(t, l.Differences)

	ft.execute = func(int, tool.Call) (tool.Result, error) {
		return tool.Result{ExternalID: "pay_2", Data: json.RawMessage(`{"amount_minor":100,"note":"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"}`)}, nil
	}
	ft.reconcile = nil
	out, err := e.execute(request(t, "s:1:2:pay", "pay", `{"order_id":"o-1","amount_minor":100}`))
	require.NoError(t, err)
	requireMasked(t, "output", string(out.Result))
	require.Equal(t, "pay_2", out.ExternalID)
}

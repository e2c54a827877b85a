package activities_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/tool"
)

// The ledger keeps no customer free text: a provider's answer that echoes
// the refund's reason and the customer's e-mail address is stored with ids,
// codes and amounts only, and the summary masks the address; the workflow
// still gets the whole answer. A replay answers from the ledger's copy.
func TestLedgerKeepsNoFreeText(t *testing.T) {
	const (
		reason = "customer says the parcel arrived damaged"
		email  = "ana.customer@example.com"
	)
	refund := writeTool("refund", tool.NonIdempotentWrite)
	refund.execute = func(n int, call tool.Call) (tool.Result, error) {
		return tool.Result{ExternalID: "re_1", Data: json.RawMessage(`{"id":"re_1","amount_minor":1200,"currency":"EUR","status":"succeeded",` +
			`"reason":"` + reason + `","contact":"` + email + `","lines":[{"sku":"sku_9","note":"left at the door"}]}`)}, nil
	}
	e := newEnv(t, nil, refund)
	req := request(t, "s:1:1:refund", "refund", `{"order_id":"o1","amount_minor":1200}`)
	req.Summary = "refund to " + email + " 12.00 EUR s:1:1:refund"
	out, err := e.execute(req)
	require.NoError(t, err)
	require.Contains(t, string(out.Result), reason, "the workflow gets the whole answer")

	row := e.row(req.Key)
	stored := string(row.Result)
	for _, free := range []string{reason, email, "left at the door"} {
		require.NotContains(t, stored, free)
		require.NotContains(t, row.Summary, free)
	}
	require.JSONEq(t, `{"id":"re_1","amount_minor":1200,"currency":"EUR","status":"succeeded","reason":"[not stored]","contact":"[not stored]","lines":[{"sku":"sku_9","note":"[not stored]"}]}`, stored)
	require.Equal(t, "refund to [e-mail] 12.00 EUR s:1:1:refund", row.Summary)

	again, err := e.execute(req)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.NotContains(t, string(again.Result), reason, "a replay answers from the ledger's copy")
}

package integration

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// The official Go MCP client, over streamable HTTP, calls the gateway on
// the real server: tools are listed with schemas and annotations;
// apply_refund twice without a key (the repeat held, no second turn) and
// twice with the same _meta key (the repeat answered from the first run);
// a refund above 500.00 returns its approval card, and repeating it after
// the approval returns the final result. Refunds are counted at the
// provider: one per intent.
func TestMCPGatewayOneRefundPerIntent(t *testing.T) {
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	ctx := testContext(t, 3*time.Minute)
	srv, err := mcpgw.New(st.Plans, st.Tools, mcpgw.Options{Calls: st.Ledger, Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}})
	require.NoError(t, err)
	hs := httptest.NewServer(mcpgw.Handler(srv))
	t.Cleanup(hs.Close)
	connect := func() *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it", Version: "1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	call := func(cs *mcp.ClientSession, args map[string]any, meta mcp.Meta) (*mcp.CallToolResult, mcpgw.Result) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: demotools.ApplyRefund, Arguments: args, Meta: meta})
		require.NoError(t, err)
		var out mcpgw.Result
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &out))
		return res, out
	}
	refund := func(order string, amount int) map[string]any {
		return map[string]any{"order_id": order, "amount_minor": amount, "currency": "EUR", "reason": "arrived damaged"}
	}
	refundsOf := func(order string) int {
		n := 0
		for _, e := range allEffects(ctx, t, sb) {
			if e.Kind == "refund" && e.OrderID == order {
				n++
			}
		}
		return n
	}
	cs := connect()

	tools := map[string]*mcp.Tool{}
	for tl, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		tools[tl.Name] = tl
	}
	require.NotContains(t, tools, "reverse_refund", "reversals are not offered")
	ar := tools[demotools.ApplyRefund]
	require.NotNil(t, ar)
	require.True(t, *ar.Annotations.DestructiveHint)
	require.False(t, ar.Annotations.IdempotentHint)
	require.True(t, tools[demotools.QueryOrder].Annotations.ReadOnlyHint)
	require.True(t, tools[demotools.CreatePayment].Annotations.IdempotentHint)
	require.False(t, *tools[demotools.CreatePayment].Annotations.DestructiveHint)
	schema := ar.InputSchema.(map[string]any)
	amount := schema["properties"].(map[string]any)["amount_minor"].(map[string]any)
	require.Equal(t, "integer", amount["type"])
	require.Contains(t, amount["description"], "minor units")
	require.ElementsMatch(t, []any{"order_id", "amount_minor", "currency"}, schema["required"])

	callsBefore := allCalls(ctx, t, sb)

	// Twice without a key: the repeat is held, no second turn, one refund.
	first, r1 := call(cs, refund("ord_it_mcp_1", 1500), nil)
	require.False(t, first.IsError, r1.Message)
	require.Equal(t, workflows.TurnSucceeded, r1.State, r1.Message)
	again, r2 := call(cs, refund("ord_it_mcp_1", 1500), nil)
	require.False(t, again.IsError, r2.Message)
	require.Equal(t, workflows.TurnWaiting, r2.State, "the repeat waits for a person: %s", r2.Message)
	require.Contains(t, r2.Message, "SUSPECTED DUPLICATE")
	require.Equal(t, r1.Key, r2.Held.Key)
	require.NotNil(t, r2.Question)
	require.Contains(t, r2.Question.Card.Rule, "suspected duplicate of "+r1.Key)
	require.Len(t, effectsUnder(ctx, t, sb, r1.Key), 1)
	require.Equal(t, 1, refundsOf("ord_it_mcp_1"), "one refund without a key")
	// A person rejects it: repeating the call returns that, still one refund.
	_, err = st.Plans.Approve(ctx, workflows.SessionWorkflowID(r1.Session), workflows.ApproveSignal{
		Step: r2.Question.Step, QuestionID: r2.Question.ID, Fingerprint: r2.Question.Fingerprint, By: "ops", Approved: false, Reason: "a retry, not a second refund"})
	require.NoError(t, err)
	var r3 mcpgw.Result
	require.Eventually(t, func() bool {
		_, r3 = call(cs, refund("ord_it_mcp_1", 1500), nil)
		return r3.State == workflows.TurnFailed
	}, 30*time.Second, 50*time.Millisecond, "the rejected duplicate reads as failed")
	require.Equal(t, 1, refundsOf("ord_it_mcp_1"), "still one refund")
	status, err := st.Plans.Status(ctx, workflows.SessionWorkflowID(r1.Session))
	require.NoError(t, err)
	require.Len(t, status.Steps, 2, "the suspected duplicate was a turn of its own, which never ran")

	// Twice with the same _meta key: the same turn and operation key.
	meta := mcp.Meta{mcpgw.MetaKey: "it-mcp-call-2"}
	k1res, k1 := call(cs, refund("ord_it_mcp_2", 1700), meta)
	k2res, k2 := call(cs, refund("ord_it_mcp_2", 1700), meta)
	require.False(t, k1res.IsError, k1.Message)
	require.False(t, k2res.IsError, k2.Message)
	require.Equal(t, workflows.TurnSucceeded, k2.State)
	require.Equal(t, mcpgw.KeyTurn("it-mcp-call-2"), k1.Turn)
	require.Equal(t, k1.Key, k2.Key)
	require.Equal(t, k1.ExternalID, k2.ExternalID)
	require.Len(t, effectsUnder(ctx, t, sb, k1.Key), 1)
	require.Equal(t, 1, refundsOf("ord_it_mcp_2"), "one refund with a key")

	// Above 500.00 in another MCP session: the card, then the final result.
	waiter := connect()
	wres, w := call(waiter, refund("ord_it_mcp_3", 60000), nil)
	require.False(t, wres.IsError, w.Message)
	require.Equal(t, workflows.TurnWaiting, w.State, w.Message)
	require.NotEqual(t, r1.Session, w.Session, "one AgentSession per MCP session")
	require.NotNil(t, w.Question)
	require.Equal(t, workflows.QuestionApproval, w.Question.Kind)
	require.Equal(t, "600.00 EUR", w.Question.Card.Amount)
	require.Contains(t, w.Message, "WAITING FOR A HUMAN")
	require.Contains(t, w.Message, "600.00 EUR")
	require.Equal(t, 0, refundsOf("ord_it_mcp_3"), "nothing refunded before the approval")
	q := w.Question
	_, err = st.Plans.Approve(ctx, workflows.SessionWorkflowID(w.Session), workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "alice", Approved: true})
	require.NoError(t, err)
	dres, done := call(waiter, refund("ord_it_mcp_3", 60000), nil)
	require.False(t, dres.IsError, done.Message)
	require.Equal(t, workflows.TurnSucceeded, done.State, done.Message)
	require.Equal(t, w.Key, done.Key)
	require.Equal(t, 1, refundsOf("ord_it_mcp_3"))

	delta := callsDelta(callsBefore, allCalls(ctx, t, sb))
	require.Equal(t, 3, delta["refunds.create"], "one refund request per intent; calls %v", delta)
}

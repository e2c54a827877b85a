package integration

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/workflows"
)

// An MCP session over streamable HTTP that closes (here its client ends
// it; an idle one expires the same way) ends the AgentSession the gateway
// made for it: no idle AgentSessions are left running.
func TestMCPClosedHTTPSessionEndsItsAgentSession(t *testing.T) {
	st := sharedStack(t)
	ctx := testContext(t, 2*time.Minute)
	srv, err := mcpgw.New(st.Plans, st.Tools, mcpgw.Options{Calls: st.Ledger})
	require.NoError(t, err)
	url := mcpTestServer(t, srv)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: demotools.QueryOrder, Arguments: map[string]any{"order_id": "ord_1001"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	session := res.Meta[mcpgw.MetaSession].(string)
	wf := workflows.SessionWorkflowID(session)
	d, err := st.Client.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.WorkflowExecutionInfo.Status)

	require.NoError(t, cs.Close()) // HTTP DELETE of the MCP session
	require.NoError(t, mcpgw.Settle(ctx, srv))
	d, err = st.Client.DescribeWorkflowExecution(ctx, wf, "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, d.WorkflowExecutionInfo.Status, "the AgentSession ended with its MCP session")
}

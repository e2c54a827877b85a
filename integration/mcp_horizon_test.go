package integration

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/mcptool/mcptest"
	"github.com/agentsaga/agentsaga/workflows"
)

// horizonCatalogue proxies server-memory's create_entities as a
// NON_IDEMPOTENT_WRITE with a short settle (the default for an MCP tool is
// four times its timeout, at least a minute: too long for a test).
const horizonCatalogue = `version: 1
mcp_servers:
  - name: memory
    command: "${NODE}"
    args: ["${MEM_SCRIPT}"]
    env:
      - {name: MEMORY_FILE_PATH, from_env: AGENTSAGA_MEMORY_FILE}
tools:
  - name: note_fact
    description: Record a fact about a named thing in the knowledge graph.
    class: NON_IDEMPOTENT_WRITE
    timeout: 2s
    settle: 6s
    reconcile_window: 2m
    args:
      - {name: name, type: string, required: true, max_len: 200, description: the thing}
      - {name: fact, type: string, required: true, max_len: 2000, description: one observation}
    mcp:
      server: memory
      tool: create_entities
      args:
        entities:
          - {name: "{name}", entityType: fact, observations: ["{fact}"]}
      external_id: /entities/0/name
      lookup:
        tool: open_nodes
        args: {names: ["{name}"]}
        found: {non_empty: /entities}
        absent: {empty: /entities}
        authoritative: true
        item: /entities/0
        external_id: /name
`

// An MCP server from npm (server-memory) acts after the call's timeout: the
// create reaches it only once the lookup has answered that nothing is there,
// as when a server ignores MCP's advisory cancellation and commits late. The
// engine counts the absent answer only past the in-flight horizon (last
// send + settle), looks again, finds the entity and never sends the create
// again: one create_entities reached the upstream, one entity in its file.
func TestMCPUpstreamActingAfterTheTimeoutIsCalledOnce(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	node, mem := mcptest.Upstream(t, mcptest.Memory)
	memFile := mcptest.Dir(t) + "/memory.jsonl"
	env := map[string]string{"NODE": node, "MEM_SCRIPT": mem, "AGENTSAGA_MEMORY_FILE": memFile}
	var hold mcptest.Holder
	_, plans, _, _ := catalogueStack(ctx, t, catalog.Options{
		Getenv:  func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		MCPWrap: func(_ string, c mcp.Connection) mcp.Connection { return hold.Wrap(c) },
	}, catalog.Source{Name: "horizon.yaml", Data: []byte(horizonCatalogue)}, "agentsaga-it-mcp-horizon")

	hold.Hold("create_entities", "open_nodes")
	p := newPlan("it-mcp-horizon", step(t, "note_fact", map[string]any{"name": "order-77", "fact": "refunded once"}))
	run, err := plans.Start(ctx, p)
	require.NoError(t, err)
	final, err := plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, "order-77", final.Steps[0].ExternalID)
	require.Equal(t, 1, hold.Calls("create_entities"), "one create_entities reached the upstream")
	require.GreaterOrEqual(t, hold.Calls("open_nodes"), 2, "the absent answer inside the horizon was asked again after it")
	raw, err := os.ReadFile(memFile)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(raw), `"name":"order-77"`), "one entity in the server's own file: %s", raw)
}

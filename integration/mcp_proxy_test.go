package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/mcptool/mcptest"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/workflows"
)

// An agent on the MCP gateway calls fs_move, a tool of the real
// @modelcontextprotocol/server-filesystem proxied through the catalogue
// (catalog/examples/mcp-filesystem.yaml), without a key. The move waits for
// a person, whose card shows the upstream tool and both paths; approved,
// the upstream moves the file and its answer is lost with the process
// (UNKNOWN), get_file_info finds the file at its destination and the call
// succeeds. The agent repeats the call without a key: it reads the first
// call's result and is not sent. On disk one move; at the upstream one
// move_file call.
func TestMCPProxyMoveFileOnceThroughTheEngine(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	src, env, dir := mcptest.Example(t)
	var drop mcptest.Dropper
	cat, err := catalog.ParseWith(catalog.Options{
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		MCPWrap: func(server string, c mcp.Connection) mcp.Connection {
			if server == "filesystem" {
				return drop.Wrap(c)
			}
			return c
		},
	}, catalog.Source{Name: "mcp-filesystem.yaml", Data: src})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cat.Close() })
	reg, err := cat.Registry()
	require.NoError(t, err)

	const tq = "agentsaga-it-mcp-proxy"
	st, err := devstack.Start(ctx, devstack.Options{NoWorker: true, UIPort: -1, TaskQueue: tq})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	w, err := sagaworker.New(st.Client, sagaworker.Options{TaskQueue: tq, Tools: reg, Ledger: st.Ledger})
	require.NoError(t, err)
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)
	plans := sagaclient.New(codec.DecodeMemos(st.Client, codec.New(st.Keyring)), sagaclient.Options{TaskQueue: tq, Catalog: reg})

	gw, err := mcpgw.New(plans, reg, mcpgw.Options{Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}})
	require.NoError(t, err)
	server, client := mcp.NewInMemoryTransports()
	ss, err := gw.Connect(ctx, server, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agentsaga-it-proxy", Version: "1"}, nil).Connect(ctx, client, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })

	offered := map[string]bool{}
	for tl, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		offered[tl.Name] = true
	}
	require.True(t, offered["fs_move"] && offered["remember"], "the declared upstream tools are offered: %v", offered)
	for _, undeclared := range []string{"move_file", "edit_file", "delete_entities", "fs_move_back"} {
		require.False(t, offered[undeclared], "%s is not offered", undeclared)
	}

	const session = "it-mcp-proxy-move"
	source, dest := filepath.Join(dir, "report.txt"), filepath.Join(dir, "archive-report.txt")
	require.NoError(t, os.WriteFile(source, []byte("quarterly"), 0o600))
	args := map[string]any{"source": source, "destination": dest}
	call := func() mcpgw.Result {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fs_move", Arguments: args, Meta: mcp.Meta{mcpgw.MetaSession: session}})
		require.NoError(t, err)
		var out mcpgw.Result
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &out))
		return out
	}
	wf := workflows.SessionWorkflowID(session)

	first := call()
	require.Equal(t, workflows.TurnWaiting, first.State, first.Message)
	require.NotNil(t, first.Question)
	require.Equal(t, workflows.QuestionApproval, first.Question.Kind)
	card := first.Question.Card
	require.Equal(t, "filesystem/move_file", card.System, "the card names the upstream server and tool")
	require.Contains(t, card.Object, source, "the card shows the source")
	require.Contains(t, card.Object, dest, "the card shows the destination")
	require.Zero(t, drop.Calls("move_file"), "nothing reached the upstream before the approval")

	drop.Arm("move_file", 1)
	_, err = plans.Approve(ctx, wf, workflows.ApproveSignal{Step: first.Question.Step, QuestionID: first.Question.ID,
		Fingerprint: first.Question.Fingerprint, By: "ops", Approved: true})
	require.NoError(t, err)
	done := waitTurn(ctx, t, st.Client, session, first.Turn)
	require.Equal(t, workflows.TurnSucceeded, done.State, "the lost answer is reconciled: %+v", done)
	require.Equal(t, 1, drop.Dropped(), "the upstream's answer was lost")

	again := call()
	require.Equal(t, workflows.TurnSucceeded, again.State, again.Message)
	require.Equal(t, first.Key, again.Key, "the repeat reads the first call, it is not sent again")
	require.Nil(t, again.Held)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"archive-report.txt"}, names, "one move on disk")
	b, err := os.ReadFile(dest)
	require.NoError(t, err)
	require.Equal(t, "quarterly", string(b))
	require.Equal(t, 1, drop.Calls("move_file"), "one move_file reached the upstream")
	require.GreaterOrEqual(t, drop.Calls("get_file_info"), 1, "the lost answer was reconciled with get_file_info")
}

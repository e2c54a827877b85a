package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/mcptool/mcptest"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/tool"
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
	var drop mcptest.Dropper
	p := startProxyStack(ctx, t, "filesystem", &drop)
	plans, reg, st, dir := p.plans, p.reg, p.st, p.dir
	gw, err := mcpgw.New(plans, reg, mcpgw.Options{Calls: sharedStack(t).Ledger, Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}})
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

// proxyStack is an embedded Temporal and a worker running the tools of
// catalog/examples/mcp-filesystem.yaml against the real npm servers.
type proxyStack struct {
	plans *sagaclient.Client
	reg   *tool.Registry
	st    *devstack.Stack
	dir   string // the filesystem server's allowed directory
	mem   string // the memory server's graph file
	cat   *catalog.Catalog
}

// startProxyStack starts a proxyStack whose connections to server go
// through drop.
func startProxyStack(ctx context.Context, t *testing.T, server string, drop *mcptest.Dropper) proxyStack {
	t.Helper()
	src, env, dir := mcptest.Example(t)
	st, plans, reg, cat := catalogueStack(ctx, t, catalog.Options{
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		MCPWrap: func(name string, c mcp.Connection) mcp.Connection {
			if name == server {
				return drop.Wrap(c)
			}
			return c
		},
	}, catalog.Source{Name: "mcp-filesystem.yaml", Data: src}, "agentsaga-it-mcp-proxy-"+server)
	return proxyStack{plans: plans, reg: reg, st: st, dir: dir, mem: env["AGENTSAGA_MEMORY_FILE"], cat: cat}
}

// A plan calls remember (server-memory's create_entities), its answer lost
// after the upstream stored the entity: the step is reconciled with
// open_nodes and succeeds with the entity's name as external id. The same
// plan started again is answered from the first run. The graph, read back
// through the upstream and from its file, holds the entity once.
func TestMCPProxyPlanRemembersOnce(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	var drop mcptest.Dropper
	p := startProxyStack(ctx, t, "memory", &drop)
	args := map[string]any{"name": "order-16", "kind": "order", "fact": "refunded once"}
	drop.Arm("create_entities", 1)
	pl := newPlan("it-mcp-proxy-remember", step(t, "remember", args))
	run, err := p.plans.Start(ctx, pl)
	require.NoError(t, err)
	final, err := p.plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, 1, drop.Dropped(), "the upstream's answer was lost")
	require.Equal(t, "order-16", final.Steps[0].ExternalID, "the external id comes from the lookup")

	// The same plan again (a repeated call): answered from the first run.
	again, err := p.plans.Start(ctx, pl)
	require.NoError(t, err)
	final, err = p.plans.Wait(ctx, again.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State)
	require.Equal(t, 1, drop.Calls("create_entities"), "one create_entities reached the upstream")

	// The graph, read back from the upstream.
	read, ok := p.reg.Tool("remember")
	require.True(t, ok)
	look, err := read.(tool.CallReconciler).ReconcileCall(ctx, tool.Call{Key: pl.Key(1), Args: pl.Steps[0].Args})
	require.NoError(t, err)
	require.Equal(t, tool.Found, look.Status)
	var entity struct {
		Name         string   `json:"name"`
		EntityType   string   `json:"entityType"`
		Observations []string `json:"observations"`
	}
	require.NoError(t, json.Unmarshal(look.Result.Data, &entity))
	require.Equal(t, "order", entity.EntityType)
	require.Equal(t, []string{"refunded once"}, entity.Observations, "one observation, stored once")
	// And the server's own store on disk: one entity line.
	raw, err := os.ReadFile(p.mem)
	require.NoError(t, err)
	entities := 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var item struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &item), "graph line %q", line)
		if item.Type == "entity" {
			require.Equal(t, "order-16", item.Name)
			entities++
		}
	}
	require.Equal(t, 1, entities, "the graph file holds one entity: %s", raw)
}

// Every tool of catalog/examples/mcp-filesystem.yaml on its fault-free path,
// against the real npm servers: remember (its answer read at the lookup's
// item, where Match reads name and entityType) succeeds with the entity's
// name as external id, counted once in the memory server's own graph file;
// fs_write writes, fs_read reads it back, fs_move (approved) moves it, on
// disk. Nothing is lost, nothing is reconciled, nobody is asked beyond the
// move's approval.
func TestMCPProxyExampleToolsWithoutFaults(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	var drop mcptest.Dropper // armed never: every answer arrives
	p := startProxyStack(ctx, t, "memory", &drop)
	runPlan := func(session string, s plan.Step) workflows.Status {
		t.Helper()
		run, err := p.plans.Start(ctx, newPlan(session, s))
		require.NoError(t, err)
		if s.Tool == "fs_move" {
			var q workflows.Question
			require.Eventually(t, func() bool {
				st, err := p.plans.Status(ctx, run.WorkflowID)
				if err != nil || len(st.Questions) == 0 {
					return false
				}
				q = st.Questions[0]
				return true
			}, time.Minute, 20*time.Millisecond, "the move waits for its approval")
			_, err = p.plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "ops", Approved: true})
			require.NoError(t, err)
		}
		final, err := p.plans.Wait(ctx, run.WorkflowID)
		require.NoError(t, err)
		require.Equal(t, workflows.SagaSucceeded, final.State, "%s: %s", s.Tool, final.Error)
		require.Equal(t, ledger.Succeeded, final.Steps[0].State, "%s: %s", s.Tool, final.Steps[0].LastError)
		return final
	}

	final := runPlan("it-mcp-proxy-nofault-remember", step(t, "remember", map[string]any{"name": "order-17", "kind": "order", "fact": "shipped"}))
	require.Equal(t, "order-17", final.Steps[0].ExternalID)
	require.Equal(t, 1, drop.Calls("create_entities"), "one create_entities reached the upstream")
	require.Zero(t, drop.Calls("open_nodes"), "nothing was looked up")
	raw, err := os.ReadFile(p.mem)
	require.NoError(t, err)
	entities := 0
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var item struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &item), "graph line %q", line)
		if item.Type == "entity" && item.Name == "order-17" {
			entities++
		}
	}
	require.Equal(t, 1, entities, "the graph file holds the entity once: %s", raw)

	src, dst := filepath.Join(p.dir, "nofault.txt"), filepath.Join(p.dir, "nofault-moved.txt")
	runPlan("it-mcp-proxy-nofault-write", step(t, "fs_write", map[string]any{"path": src, "content": "hello"}))
	read := runPlan("it-mcp-proxy-nofault-read", step(t, "fs_read", map[string]any{"path": src}))
	require.Contains(t, string(read.Steps[0].Result), "hello")
	runPlan("it-mcp-proxy-nofault-move", step(t, "fs_move", map[string]any{"source": src, "destination": dst}))
	b, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
	_, err = os.Stat(src)
	require.True(t, os.IsNotExist(err), "moved, not copied")
}

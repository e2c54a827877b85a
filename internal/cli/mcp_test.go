package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// mcpPlans answers every turn as succeeded and knows no session.
type mcpPlans struct {
	mu    sync.Mutex
	turns []workflows.TurnRequest
}

func (p *mcpPlans) Turn(_ context.Context, session string, t workflows.TurnRequest, _ sagaclient.SessionOptions) (workflows.TurnResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.turns = append(p.turns, t)
	key := plan.Key(session, t.Turn, 1, t.Steps[0].Tool)
	return workflows.TurnResult{Turn: t.Turn, State: workflows.TurnSucceeded,
		Steps: []workflows.StepStatus{{Step: 1, Turn: t.Turn, Key: key, Tool: t.Steps[0].Tool, State: "succeeded"}}}, nil
}

func (p *mcpPlans) Status(context.Context, string) (workflows.Status, error) {
	return workflows.Status{}, serviceerror.NewNotFound("no such session")
}

// mcpLedger is a fresh ledger for the gateway's memory of keyless calls.
func mcpLedger(t *testing.T) ledger.Store {
	t.Helper()
	l, err := ledgersqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func mcpDefaults() mcpFlags {
	return mcpFlags{window: mcpgw.DefaultDuplicateWindow, timeout: mcpgw.DefaultCallTimeout, personWait: mcpgw.DefaultPersonWait,
		idle: mcpgw.DefaultSessionIdle, maxSessions: mcpgw.DefaultMaxSessions}
}

// queryOrder lists the tools and calls query_order once over cs.
func queryOrder(t *testing.T, cs *mcp.ClientSession) mcpgw.Result {
	t.Helper()
	n := 0
	for tl, err := range cs.Tools(t.Context(), nil) {
		require.NoError(t, err)
		require.NotEqual(t, "reverse_refund", tl.Name)
		n++
	}
	require.Equal(t, 7, n, "the demo's seven tools, no reversal")
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "query_order", Arguments: map[string]any{"order_id": "ord_1001"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	out := res.StructuredContent.(map[string]any)
	return mcpgw.Result{State: out["state"].(string), Key: out["key"].(string)}
}

func TestMCPFlagsAreCheckedBeforeDialling(t *testing.T) {
	for _, args := range [][]string{
		{"mcp"},
		{"mcp", "--http", "127.0.0.1:0", "--stdio"},
		{"mcp", "--http", "0.0.0.0:8765"},
		{"mcp", "--http", "example.com:8765"},
		{"mcp", "--http", "8765"},
		{"mcp", "--stdio", "extra"},
		{"mcp", "--stdio", "--duplicate-window", "0s"},
		{"mcp", "--stdio", "--call-timeout", "-1s"},
		{"mcp", "--stdio", "--requested-by", "bad\x1bname"},
		{"mcp", "--stdio", "--person-wait", "0s"},
		{"mcp", "--http", "127.0.0.1:0", "--session-idle", "-1m"},
		{"mcp", "--http", "127.0.0.1:0", "--max-sessions", "0"},
	} {
		err := run(context.Background(), append(args, "--address", unreachable), strings.NewReader(""), &bytes.Buffer{})
		require.Equal(t, 2, code(err), "%q: %v", args, err)
	}
	m := mcpDefaults()
	m.http, m.allowRemote = "0.0.0.0:8765", true
	require.NoError(t, m.check(nil), "--allow-remote lets a non-loopback address through")
	m = mcpDefaults()
	m.http = "localhost:0"
	require.NoError(t, m.check(nil))
}

func TestMCPHelpListsFlagsTheREADMEDocuments(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"mcp", "--help"}, strings.NewReader(""), &out))
	readme, err := docsText()
	require.NoError(t, err)
	for _, f := range []string{"http", "stdio", "allow-remote", "duplicate-window", "call-timeout", "requested-by", "address"} {
		require.Contains(t, out.String(), "-"+f, "mcp --help lists --%s", f)
		require.True(t, strings.Contains(string(readme), "`--"+f+"`") || strings.Contains(string(readme), "`--"+f+" "), "README documents --%s", f)
	}
	for _, field := range []string{mcpgw.MetaSession, mcpgw.MetaTurn, mcpgw.MetaKey} {
		require.Contains(t, string(readme), "`"+field+"`", "README documents _meta %s", field)
	}
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"--help"}, strings.NewReader(""), &out))
	require.Contains(t, out.String(), "mcp (--http HOST:PORT | --stdio)")
}

func TestMCPServesOverStdio(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	m := mcpDefaults()
	m.stdio = true
	plans := &mcpPlans{}
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- serveMCP(t.Context(), plans, mcpLedger(t), demoRegistry(t), m, inR, outW, &logs)
		_ = outW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "starter-test", Version: "1"}, nil).
		Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	require.NoError(t, err, "standard output carries the protocol and nothing else")
	r := queryOrder(t, cs)
	require.Equal(t, workflows.TurnSucceeded, r.State)
	require.True(t, strings.HasPrefix(r.Key, "mcp-") && strings.HasSuffix(r.Key, ":1:1:query_order"), r.Key)
	require.NoError(t, cs.Close())
	require.NoError(t, <-done, "the server ends when the client closes its side")
	require.Len(t, plans.turns, 1)
}

func TestMCPServesOverStreamableHTTP(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	m := mcpDefaults()
	m.http = "127.0.0.1:0"
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- serveMCP(ctx, &mcpPlans{}, mcpLedger(t), demoRegistry(t), m, strings.NewReader(""), outW, io.Discard)
		_ = outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	var url string
	_, err = fmt.Sscanf(line, "MCP gateway on %s", &url)
	require.NoError(t, err, line)
	require.True(t, strings.HasSuffix(url, mcpPath), url)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "starter-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	r := queryOrder(t, cs)
	require.Equal(t, workflows.TurnSucceeded, r.State)
	require.NoError(t, cs.Close())
	cancel()
	require.NoError(t, <-done, "the server stops when its context ends")
}

// demoRegistry is the demo tools' registry, the gateway's default.
func demoRegistry(t *testing.T) *tool.Registry {
	t.Helper()
	reg, err := demotools.Registry(demotools.Config{})
	require.NoError(t, err)
	return reg
}

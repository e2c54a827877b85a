package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// envMCPStdio makes the test binary serve the MCP gateway over its stdin
// and stdout (see runMCPStdioProcess), for the TypeScript client to spawn.
const envMCPStdio = "AGENTSAGA_IT_MCP_STDIO"

// mcpTSStep installs the TypeScript MCP client and the conformance suite;
// .ci/run runs it before the Go tests.
const mcpTSStep = "(cd integration/mcp-ts && npm ci --no-audit --no-fund)"

// mcpTS returns node and the directory of integration/mcp-ts with its
// packages installed, installing them when npm is there. Without them the
// test fails under CI=true and is skipped, with the reason, otherwise.
func mcpTS(t *testing.T) (node, dir string) {
	t.Helper()
	return nodePackages(t, "mcp-ts", filepath.Join("@modelcontextprotocol", "sdk", "package.json"), mcpTSStep,
		"test with the official TypeScript MCP packages")
}

// lossyPlans loses the first answer of each turn whose order_id ends in
// "_lost", after the turn ran: the answer lost between the saga and the
// gateway.
type lossyPlans struct {
	mcpgw.Plans
	mu   sync.Mutex
	lost map[string]bool
}

func (l *lossyPlans) Turn(ctx context.Context, session string, t workflows.TurnRequest, o sagaclient.SessionOptions) (workflows.TurnResult, error) {
	res, err := l.Plans.Turn(ctx, session, t, o)
	if err != nil || len(t.Steps) != 1 {
		return res, err
	}
	var args struct {
		Order string `json:"order_id"`
	}
	if json.Unmarshal(t.Steps[0].Args, &args) != nil || !strings.HasSuffix(args.Order, "_lost") {
		return res, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	id := fmt.Sprintf("%s:%d", session, t.Turn)
	if l.lost[id] {
		return res, nil
	}
	l.lost[id] = true
	return workflows.TurnResult{}, fmt.Errorf("turn %d of session %s: the answer was lost on the way (test): %w", t.Turn, session, context.DeadlineExceeded)
}

// tsGatewayOptions are the gateway's options in the TypeScript client
// test: progress every 500 ms, so the client with a 1.5 s timeout is kept
// alive by it alone.
func tsGatewayOptions() mcpgw.Options {
	return mcpgw.Options{ProgressInterval: 500 * time.Millisecond, Session: sagaclient.SessionOptions{RequestedBy: "mcp-agent"}}
}

// runMCPStdioProcess serves the gateway over stdin and stdout, connected
// to the Temporal server and sandbox named in the environment, until stdin
// closes. Logs go to stderr.
func runMCPStdioProcess() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "agentsaga-it-mcp: "+format+"\n", args...)
		return 1
	}
	tools, err := demotools.Registry(demotools.SandboxConfig(os.Getenv(envSandbox)))
	if err != nil {
		return fail("tools: %v", err)
	}
	ring, _, err := codec.KeyringFromEnvironment()
	if err != nil || ring == nil {
		return fail("payload keys: %v (the test process sets %s)", err, codec.EnvKeys)
	}
	opts := client.Options{HostPort: os.Getenv(envTemporal), Namespace: os.Getenv(envNamespace),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))}
	codec.ClientOptions(&opts, ring)
	c, err := client.Dial(opts)
	if err != nil {
		return fail("connect to Temporal: %v", err)
	}
	defer c.Close()
	plans := sagaclient.New(codec.DecodeMemos(c, codec.New(ring)), sagaclient.Options{TaskQueue: os.Getenv(envTaskQueue), Catalog: tools})
	calls, err := ledgerdb.Open(context.Background(), os.Getenv(envLedger))
	if err != nil {
		return fail("ledger: %v (the test process sets %s)", err, envLedger)
	}
	defer calls.Close()
	o := tsGatewayOptions()
	o.Calls = calls
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := mcpgw.New(&lossyPlans{Plans: plans, lost: map[string]bool{}}, tools, o)
	if err != nil {
		return fail("gateway: %v", err)
	}
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		return fail("serve: %v", err)
	}
	return 0
}

// tsEvent is one line of integration/mcp-ts/client.mjs.
type tsEvent struct {
	Event     string        `json:"event"`
	Scenario  string        `json:"scenario"`
	Names     []string      `json:"names"`
	Message   string        `json:"message"`
	ElapsedMs int           `json:"elapsedMs"`
	IsError   bool          `json:"isError"`
	Result    *mcpgw.Result `json:"result"`
	Text      string        `json:"text"`
	Thrown    string        `json:"thrown"`
}

// The official TypeScript SDK client (integration/mcp-ts), over streamable
// HTTP and over stdio (spawning the gateway), against the real server:
// repeated calls under one key and without a key, an answer lost after
// the turn ran, and two calls that wait for a person, decided here while
// the client waits: one with the SDK's default options plus
// resetTimeoutOnProgress, one with a 1.5 s timeout decided after more than
// twice that, kept alive by progress notifications alone. Every refund is
// counted in the sandbox provider's store: one per intent.
func TestMCPTypeScriptClientOverBothTransports(t *testing.T) {
	node, dir := mcpTS(t)
	st := sharedStack(t)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			ctx := testContext(t, 3*time.Minute)
			run := "ts-" + transport + "-" + uuid.NewString()[:8]
			args := []string{filepath.Join(dir, "client.mjs"), transport}
			env := append(os.Environ(), "MCP_TS_RUN="+run)
			if transport == "http" {
				o := tsGatewayOptions()
				o.Calls = st.Ledger
				srv, err := mcpgw.New(&lossyPlans{Plans: st.Plans, lost: map[string]bool{}}, st.Tools, o)
				require.NoError(t, err)
				hs := mcpTestServer(t, srv)
				args = append(args, hs)
			} else {
				self, err := os.Executable()
				require.NoError(t, err)
				args = append(args, self)
				env = append(env, envMCPStdio+"=1", envTemporal+"="+st.Server.FrontendAddr(), envNamespace+"="+st.Server.Namespace(),
					envTaskQueue+"="+workflows.TaskQueue, envSandbox+"="+st.SandboxURL, envLedger+"="+st.LedgerDSN)
			}
			events := runTSClient(ctx, t, st.Plans, node, args, env)

			results := map[string][]tsEvent{}
			progress := map[string]int{}
			var tools []string
			for _, e := range events {
				switch e.Event {
				case "result":
					require.Empty(t, e.Thrown, "%s: the client got no result", e.Scenario)
					require.NotNil(t, e.Result, "%s: no structured result: %s", e.Scenario, e.Text)
					results[e.Scenario] = append(results[e.Scenario], e)
				case "progress":
					progress[e.Scenario]++
				case "tools":
					tools = e.Names
				}
			}
			require.Contains(t, tools, demotools.ApplyRefund)
			refundsOf := func(order string) int {
				n := 0
				for _, e := range allEffects(ctx, t, sb) {
					if e.Kind == "refund" && e.OrderID == order {
						n++
					}
				}
				return n
			}

			rep := results["rep"]
			require.Len(t, rep, 2)
			for _, r := range rep {
				require.Equal(t, workflows.TurnSucceeded, r.Result.State, r.Text)
			}
			require.Equal(t, rep[0].Result.Key, rep[1].Result.Key)
			require.Equal(t, rep[0].Result.ExternalID, rep[1].Result.ExternalID)
			require.Equal(t, 1, refundsOf(run+"_rep"), "one refund for a call repeated under one key")

			unk := results["unk"]
			require.Len(t, unk, 2)
			require.Equal(t, workflows.TurnSucceeded, unk[0].Result.State, unk[0].Text)
			require.Equal(t, workflows.TurnWaiting, unk[1].Result.State, unk[1].Text)
			require.NotNil(t, unk[1].Result.Held, "the unkeyed repeat is held as a suspected duplicate")
			require.Equal(t, 1, refundsOf(run+"_unk"), "one refund for an unkeyed repeat")

			lost := results["lost"]
			require.Len(t, lost, 2)
			require.True(t, lost[0].IsError)
			require.Equal(t, mcpgw.StateNoAnswer, lost[0].Result.State, lost[0].Text)
			require.Equal(t, workflows.TurnSucceeded, lost[1].Result.State, lost[1].Text)
			require.Equal(t, lost[0].Result.Key, lost[1].Result.Key)
			require.Len(t, effectsUnder(ctx, t, sb, lost[1].Result.Key), 1)
			require.Equal(t, 1, refundsOf(run+"_lost"), "one refund for a call whose answer was lost")

			for _, s := range []string{"wait-a", "wait-b"} {
				w := results[s]
				require.Len(t, w, 1)
				require.False(t, w[0].IsError, w[0].Text)
				require.Equal(t, workflows.TurnSucceeded, w[0].Result.State, "%s: the client got its result after the approval: %s", s, w[0].Text)
				require.Positive(t, progress[s])
			}
			require.Greater(t, results["wait-b"][0].ElapsedMs, 3000, "the 1.5 s client outlived its timeout on progress")
			require.Equal(t, 1, refundsOf(run+"_wa"))
			require.Equal(t, 1, refundsOf(run+"_wb"))
		})
	}
}

// runTSClient runs client.mjs and returns its events. It approves the
// calls that wait for a person while the client waits: wait-a at its first
// progress notification that says so, wait-b once the client has waited
// more than 3 s (twice its timeout).
func runTSClient(ctx context.Context, t *testing.T, plans *sagaclient.Client, node string, args, env []string) []tsEvent {
	t.Helper()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	run := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MCP_TS_RUN="); ok {
			run = v
		}
	}
	approved := map[string]bool{}
	approve := func(scenario string) {
		wf := workflows.SessionWorkflowID(run + "-" + scenario)
		status, err := plans.Status(ctx, wf)
		require.NoError(t, err)
		require.NotEmpty(t, status.Questions, "%s waits for a person", wf)
		q := status.Questions[0]
		_, err = plans.Approve(ctx, wf, workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "alice", Approved: true})
		require.NoError(t, err)
		approved[scenario] = true
	}
	var events []tsEvent
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e tsEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "a line of client.mjs: %s", sc.Text())
		events = append(events, e)
		if e.Event != "progress" || approved[e.Scenario] || !strings.Contains(e.Message, "waiting for a person") {
			continue
		}
		if e.Scenario == "wait-a" || (e.Scenario == "wait-b" && e.ElapsedMs > 3000) {
			approve(e.Scenario)
		}
	}
	err = cmd.Wait()
	require.NoError(t, err, "client.mjs failed: %s", stderr.String())
	require.NotEmpty(t, events)
	require.Equal(t, "done", events[len(events)-1].Event, "client.mjs stopped early: %s", stderr.String())
	return events
}

// mcpTestServer serves srv over streamable HTTP on a loopback port for the
// test and returns its URL.
func mcpTestServer(t *testing.T, srv *mcp.Server) string {
	t.Helper()
	hs := httptest.NewServer(mcpgw.Handler(srv))
	t.Cleanup(hs.Close)
	return hs.URL
}

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaworker"
)

// Environment of a worker process: when envWorker is set, the test binary
// runs a worker instead of the tests (see runWorkerProcess).
const (
	envWorker    = "AGENTSAGA_IT_WORKER"
	envTemporal  = "AGENTSAGA_IT_TEMPORAL_ADDRESS"
	envNamespace = "AGENTSAGA_IT_TEMPORAL_NAMESPACE"
	envTaskQueue = "AGENTSAGA_IT_TASK_QUEUE"
	envLedger    = "AGENTSAGA_IT_LEDGER"
	envSandbox   = "AGENTSAGA_IT_SANDBOX_URL"

	// workerReady is the line a worker process prints once it polls.
	workerReady = "agentsaga-it-worker ready"
)

// TestMain runs the tests, or, when envWorker is set, a worker process for
// TestWorkerDiedAfterTheExternalCall, or, when envMCPStdio is set, the MCP
// gateway over stdio for TestMCPTypeScriptClientOverBothTransports; it closes the shared stack at the end.
func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(runWorkerProcess())
	}
	if os.Getenv(envMCPStdio) != "" {
		os.Exit(runMCPStdioProcess())
	}
	// One keyring for every stack of this binary and its worker processes
	// (they inherit the environment): payloads are encrypted end to end.
	if err := shareKeyring(); err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	code := m.Run()
	if dir := os.Getenv(envRecordHistories); dir != "" && code == 0 && shared.stack != nil {
		n, err := recordHistories(context.Background(), shared.stack.Client, shared.stack.Server.Namespace(), dir, shared.stack.Keyring)
		if err != nil {
			fmt.Fprintln(os.Stderr, "integration: record histories:", err)
			code = 1
		}
		fmt.Fprintf(os.Stderr, "integration: recorded %d histories in %s\n", n, dir)
	}
	if err := closeShared(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: close the shared stack:", err)
	}
	os.Exit(code)
}

// runWorkerProcess is the body of a worker process: it connects to the
// Temporal server, ledger and sandbox named in the environment, runs
// AgentPlan until its stdin closes (the test ended or the test process
// died) and returns the exit code. A SIGKILL stops it anywhere.
func runWorkerProcess() int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "agentsaga-it-worker: "+format+"\n", args...)
		return 1
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tools, err := demotools.Registry(demotools.SandboxConfig(os.Getenv(envSandbox)))
	if err != nil {
		return fail("tools: %v", err)
	}
	store, err := ledgerdb.Open(ctx, os.Getenv(envLedger))
	if err != nil {
		return fail("ledger: %v", err)
	}
	defer store.Close()
	ring, _, err := codec.KeyringFromEnvironment()
	if err != nil || ring == nil {
		return fail("payload keys: %v (the test process sets %s)", err, codec.EnvKeys)
	}
	opts := client.Options{
		HostPort:  os.Getenv(envTemporal),
		Namespace: os.Getenv(envNamespace),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr,
			&slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
	codec.ClientOptions(&opts, ring)
	c, err := client.Dial(opts)
	if err != nil {
		return fail("connect to Temporal: %v", err)
	}
	defer c.Close()
	w, err := sagaworker.New(c, sagaworker.Options{
		TaskQueue: os.Getenv(envTaskQueue), Tools: tools, Ledger: store, Logger: log,
	})
	if err != nil {
		return fail("worker: %v", err)
	}
	if err := w.Start(); err != nil {
		return fail("start worker: %v", err)
	}
	fmt.Println(workerReady)
	_, _ = io.Copy(io.Discard, os.Stdin) // returns when the parent closes stdin or dies
	w.Stop()
	return 0
}

// shareKeyring puts a fresh keyring in this process's environment
// (AGENTSAGA_CODEC_KEYS), where every dev stack and worker process of the
// tests finds it.
func shareKeyring() error {
	ring, err := codec.GenerateKeyring("it-1")
	if err != nil {
		return err
	}
	b, err := ring.MarshalKeyFile()
	if err != nil {
		return err
	}
	os.Unsetenv(codec.EnvKeysFile)
	return os.Setenv(codec.EnvKeys, string(b))
}

// The shared stack of the seed checks and the UI check: one embedded
// Temporal server, sandbox and in-process worker for the whole test binary.
var shared struct {
	once  sync.Once
	stack *devstack.Stack
	err   error
}

// sharedStack returns the stack shared by the tests of this binary, started
// on first use and closed by TestMain. Tests on it use their own sessions
// and orders (the refund guard is per order across sessions) and run one
// after another, so call counters read before and after a test are its own.
func sharedStack(t *testing.T) *devstack.Stack {
	t.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.stack, shared.err = devstack.Start(ctx, devstack.Options{})
	})
	require.NoError(t, shared.err, "start the shared stack")
	return shared.stack
}

func closeShared() error {
	if consoleStack.st != nil {
		_ = consoleStack.st.Close()
	}
	if shared.stack == nil {
		return nil
	}
	return shared.stack.Close()
}

// testContext returns a context bounded by d and by the test's end.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// newPlan returns a plan of session, turn 1, with steps.
func newPlan(session string, steps ...plan.Step) plan.Plan {
	return plan.Plan{SessionID: session, Turn: 1, RequestID: "it-" + session, Steps: steps}
}

// step returns a plan step calling toolName with args.
func step(t *testing.T, toolName string, args map[string]any) plan.Step {
	t.Helper()
	b, err := json.Marshal(args)
	require.NoError(t, err)
	return plan.Step{Tool: toolName, Args: b}
}

// refundPlan is query_order -> check_refund_policy -> apply_refund of amount
// on order, the seeds' refund story.
func refundPlan(t *testing.T, session, order string, amount int) plan.Plan {
	t.Helper()
	return newPlan(session,
		step(t, demotools.QueryOrder, map[string]any{"order_id": order}),
		step(t, demotools.CheckRefundPolicy, map[string]any{"order_id": order, "amount_minor": amount}),
		step(t, demotools.ApplyRefund, map[string]any{"order_id": order, "amount_minor": amount, "currency": "EUR", "reason": "arrived damaged"}),
	)
}

// fingerprint returns p's plan fingerprint.
func fingerprint(t *testing.T, p plan.Plan) string {
	t.Helper()
	fp, err := p.Fingerprint()
	require.NoError(t, err)
	return fp
}

// allEffects reads every committed row of every provider from the
// providers' own stores.
func allEffects(ctx context.Context, t *testing.T, sb *sandbox.Client) []sandbox.Effect {
	t.Helper()
	effects, err := sb.Effects(ctx, "")
	require.NoError(t, err, "read the providers' effects")
	return effects
}

// effectsUnder returns the rows committed under key (any kind), as the
// providers' stores hold them.
func effectsUnder(ctx context.Context, t *testing.T, sb *sandbox.Client, key string) []sandbox.Effect {
	t.Helper()
	var out []sandbox.Effect
	for _, e := range allEffects(ctx, t, sb) {
		if e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// countKind counts the rows of kind in effects.
func countKind(effects []sandbox.Effect, kind string) int {
	n := 0
	for _, e := range effects {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// allCalls reads how many requests reached every operation, as the
// providers counted them.
func allCalls(ctx context.Context, t *testing.T, sb *sandbox.Client) map[string]int {
	t.Helper()
	calls, err := sb.Calls(ctx)
	require.NoError(t, err, "read the providers' call counters")
	return calls
}

// callsDelta returns after[op] - before[op] for every op in either map,
// leaving out ops whose count did not change.
func callsDelta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for op, n := range after {
		if d := n - before[op]; d != 0 {
			out[op] = d
		}
	}
	for op, n := range before {
		if _, ok := after[op]; !ok && n != 0 {
			out[op] = -n
		}
	}
	return out
}

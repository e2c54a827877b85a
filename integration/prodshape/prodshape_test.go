// Package prodshape is the production-shape test: agentsaga's chaos run on
// Temporal run as production runs it (the real server binary of the pinned
// module, two nodes on PostgreSQL, the real worker binary, a PostgreSQL
// ledger), with a worker and a server node SIGKILLed during the run. It is
// a package of its own so the other integration tests build without it.
//
//	go test ./integration/prodshape/                                  # CI: 30 plans
//	AGENTSAGA_PRODSHAPE_PLANS=600 go test -timeout 90m ./integration/prodshape/
package prodshape

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/chaos"
	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/gobuild"
	"github.com/agentsaga/agentsaga/internal/prodshape"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/sagaworker"
)

// EnvPlans sets the plans of the run: the long version, as the hand run of
// the production issue (600), with every kind of kill the full chaos run
// schedules; unset, the CI version runs 30 plans with one kill of each kind.
const EnvPlans = "AGENTSAGA_PRODSHAPE_PLANS"

const (
	ciPlans   = 30
	maxPlans  = 5000
	namespace = "agentsaga-prodshape"
	postgres  = "127.0.0.1:5432"
)

// requirePostgres fails under CI=true, and skips saying why elsewhere,
// when PostgreSQL does not answer on 127.0.0.1:5432 as postgres.
func requirePostgres(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+postgres+"/postgres?sslmode=disable")
	if err == nil {
		conn.Close(ctx)
		return
	}
	msg := fmt.Sprintf("the production-shape test needs PostgreSQL on %s (user postgres, trust): %v", postgres, err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; skipping outside CI")
}

// plans is the run's size from EnvPlans, and whether it is the CI version.
func plans(t *testing.T) (int, bool) {
	v := os.Getenv(EnvPlans)
	if v == "" {
		return ciPlans, true
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q: give a number of plans", EnvPlans, v)
	require.True(t, n >= 1 && n <= maxPlans, "%s=%d: give 1 to %d plans", EnvPlans, n, maxPlans)
	return n, false
}

// TestChaosOnTheProductionShape builds temporal-server and temporal-sql-tool
// from the pinned go.temporal.io/server (cached by version), sets up fresh
// databases with the SQL tool, starts two server nodes on them behind one
// frontend address, prepares the namespace with `starter cluster setup`,
// and runs the chaos run of `starter chaos --address` on it with two
// processes of the real worker binary on one PostgreSQL ledger. During the
// run a worker is SIGKILLed (and once between a provider's commit and the
// activity's completion) and a server node is SIGKILLed and started again.
// Effects are counted in the sandbox providers' stores: none may be
// duplicated or lost, and no plan may be stuck.
func TestChaosOnTheProductionShape(t *testing.T) {
	requirePostgres(t)
	n, short := plans(t)
	timeout := 14 * time.Minute
	if !short {
		timeout = 80 * time.Minute
	}
	dir := t.TempDir()

	bins := buildServer(t)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	workerBin := filepath.Join(dir, "worker")
	require.NoError(t, gobuild.Build(ctx, ".", workerBin, "github.com/agentsaga/agentsaga/worker"))
	t.Logf("worker binary: %s", time.Since(began).Round(time.Millisecond))
	cl, keys := startCluster(ctx, t, bins, dir)

	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })

	// The node killed is the one carrying the most client connections
	// (the run's own client and its workers'), so live connections die
	// with it and their clients must reach the other node.
	cut := 0
	rep, err := chaos.Run(ctx, chaos.Options{
		Plans: n, Seed: 11, Short: short, Workers: 2, Ready: "agentsaga worker on ",
		Cluster: &chaos.Cluster{
			Temporal:  config.Temporal{Address: cl.Address(), Namespace: namespace, CodecKeys: keys},
			LedgerDSN: cl.LedgerDSN, SandboxURL: sb.BaseURL(), SandboxToken: sb.Token(),
			Restart: func(ctx context.Context) error {
				began := time.Now()
				carried := cl.Carried()
				killed := 0
				for i, n := range carried {
					if n > carried[killed] {
						killed = i
					}
				}
				cut = carried[killed]
				if err := cl.Kill(killed); err != nil {
					return err
				}
				if err := cl.Restart(ctx, killed); err != nil {
					return err
				}
				t.Logf("node %d SIGKILLed, cutting %d of the %v connections through the balancer, and started again: answering after %s",
					killed, cut, carried, time.Since(began).Round(time.Millisecond))
				return nil
			},
		},
		WorkerCommand: func(cfg chaos.WorkerConfig) *exec.Cmd {
			// The real worker binary, as a team runs it: the demo tools
			// against this worker's proxy in front of the sandbox. The
			// chaos operator answers by typed name, so decisions are
			// accepted unverified (the flag says so, and the worker logs it).
			cmd := exec.Command(workerBin, "--address", cfg.TemporalAddr, "--namespace", cfg.Namespace,
				"--task-queue", cfg.TaskQueue, "--ledger", cfg.LedgerDSN, "--sandbox-url", cfg.SandboxURL,
				"--codec-keys", cfg.KeysFile, "--metrics-addr", "off", "--allow-unverified-decisions")
			cmd.Env = append(os.Environ(), cfg.TLS...)
			return cmd
		},
	})
	require.NoError(t, err)
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("chaos report:\n%s", b)

	var broken []string
	for _, v := range rep.Violations {
		broken = append(broken, v.String())
	}
	require.True(t, rep.OK, "invariants broken on the production shape:\n%s", strings.Join(broken, "\n"))
	require.Zero(t, rep.Duplicates, "duplicated effects: %s", strings.Join(broken, "\n"))
	require.Zero(t, rep.Lost, "lost effects: %s", strings.Join(broken, "\n"))
	require.Zero(t, rep.Stuck, "stuck in flight: %s", strings.Join(broken, "\n"))
	require.Equal(t, n, rep.Plans)
	require.Equal(t, 1, rep.Restarts, "one server node SIGKILLed and started again")
	require.GreaterOrEqual(t, cut, 1, "the node kill cut a client connection")
	require.GreaterOrEqual(t, rep.Kills, 1, "a worker process SIGKILLed")
	require.Greater(t, rep.Effects, n/2, "the plans made effects at the providers")
	require.Zero(t, rep.Ends["not_ended"], "ends: %v", rep.Ends)
}

// startCluster starts two nodes on fresh databases and prepares the
// namespace with `starter cluster setup`, as a team prepares theirs; it
// returns the cluster and a payload keyring file. Cleanup stops the nodes
// and drops the databases (their logs are printed when the test failed).
func startCluster(ctx context.Context, t *testing.T, bins prodshape.Binaries, dir string) (*prodshape.Cluster, string) {
	t.Helper()
	began := time.Now()
	prefix := fmt.Sprintf("prodshape_%d_%d", time.Now().Unix(), os.Getpid())
	cl, err := prodshape.Start(ctx, bins, prodshape.Options{Dir: dir, Postgres: postgres, Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			for _, l := range cl.Logs() {
				if b, err := os.ReadFile(l); err == nil {
					t.Logf("%s (last 4000 bytes):\n%s", l, tail(b, 4000))
				}
			}
		}
		require.NoError(t, cl.Close())
	})
	t.Logf("schema and two nodes up: %s (frontends %s and %s behind %s)", time.Since(began).Round(time.Millisecond),
		cl.Nodes()[0].Frontend, cl.Nodes()[1].Frontend, cl.Address())

	began = time.Now()
	keys := filepath.Join(dir, "codec-keys.json")
	ring, err := codec.GenerateKeyring("prodshape-1")
	require.NoError(t, err)
	kb, err := ring.MarshalKeyFile()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keys, kb, 0o600))
	t.Setenv(codec.EnvKeys, "")
	t.Setenv(codec.EnvKeysFile, "")
	var out bytes.Buffer
	require.NoError(t, cli.Run(ctx, []string{"cluster", "setup", "--address", cl.Address(), "--namespace", namespace, "--retention", "24h"}, nil, &out, cli.Config{}), out.String())
	require.NoError(t, cl.AwaitNamespace(ctx, namespace, sagaworker.SearchAttributes))
	t.Logf("cluster setup:\n%s(%s)", out.String(), time.Since(began).Round(time.Millisecond))
	return cl, keys
}

// buildServer builds (or takes from the cache) the server's binaries,
// bounded by go test's -timeout only: the first build compiles the
// packages the embedded server does not use.
func buildServer(t *testing.T) prodshape.Binaries {
	t.Helper()
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	began := time.Now()
	bins, err := prodshape.BuildBinaries(ctx, ".")
	require.NoError(t, err)
	t.Logf("temporal-server %s and temporal-sql-tool: %s (built now: %v)", bins.Version, time.Since(began).Round(time.Millisecond), bins.Built)
	return bins
}

// EnvBench runs TestBenchOnTheProductionShape: its value is added to the
// flags of `starter bench --address` (such as "--rounds 3"; "1" adds none).
const EnvBench = "AGENTSAGA_PRODSHAPE_BENCH"

// TestBenchOnTheProductionShape runs `starter bench --address` (the real
// starter binary) on the production shape: agentsaga and the plain activity
// measured on the same two-node cluster in one run, agentsaga's ledger on
// PostgreSQL. A measurement, not a check: it runs when EnvBench is set.
func TestBenchOnTheProductionShape(t *testing.T) {
	extra, ok := os.LookupEnv(EnvBench)
	if !ok {
		t.Skipf("a measurement of several minutes: set %s=1 (or to extra flags of starter bench) to run it", EnvBench)
	}
	requirePostgres(t)
	bins := buildServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Minute)
	defer cancel()
	dir := t.TempDir()
	starter := filepath.Join(dir, "starter")
	require.NoError(t, gobuild.Build(ctx, ".", starter, "github.com/agentsaga/agentsaga/starter"))
	cl, _ := startCluster(ctx, t, bins, dir)
	args := []string{"bench", "--address", cl.Address(), "--namespace", namespace, "--ledger", cl.LedgerDSN,
		"--waiting", "0", "--starts", "0", "--ledger-ops", "0", "--phases", "0"}
	if extra != "1" {
		args = append(args, strings.Fields(extra)...)
	}
	cmd := exec.CommandContext(ctx, starter, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	err := cmd.Run()
	t.Logf("starter %s (%s):\n%s", strings.Join(args, " "), time.Since(began).Round(time.Second), out.String())
	require.NoError(t, err)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

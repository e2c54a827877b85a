package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/chaos"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
)

// TestChaosShort is the CI version of `starter chaos`: 20 randomized plans
// under every fault kind of the sandbox, worker processes (this test binary
// re-executed) SIGKILLed at random and once between a provider's commit and
// the activity's completion, one restart of the embedded Temporal server on
// its SQLite file, plans started ten times at once, duplicated and early
// decisions, and an operator answering escalations through sagaclient. No
// invariant may break, every counted event must have happened, and a
// duplicated e-mail put into the mail relay's store afterwards must be
// caught by the same check.
func TestChaosShort(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	exe, err := os.Executable()
	require.NoError(t, err)
	var recheck chaos.Findings
	var planted string
	rep, err := chaos.Run(ctx, chaos.Options{
		Plans: 20, Seed: 1, Short: true, Ready: workerReady,
		WorkerCommand: func(cfg chaos.WorkerConfig) *exec.Cmd {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(),
				envWorker+"=1", envTemporal+"="+cfg.TemporalAddr, envNamespace+"="+cfg.Namespace,
				envTaskQueue+"="+cfg.TaskQueue, envLedger+"="+cfg.LedgerDSN, envSandbox+"="+cfg.SandboxURL)
			if cfg.KeysFile != "" {
				cmd.Env = append(cmd.Env, codec.EnvKeysFile+"="+cfg.KeysFile)
			}
			return cmd
		},
		Inspect: func(ctx context.Context, in chaos.Inspection) error {
			// Send one plan's e-mail a second time, straight to the relay.
			planted = plantDuplicateEmail(ctx, t, in)
			var err error
			recheck, err = in.Recheck(ctx)
			return err
		},
	})
	require.NoError(t, err)
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("chaos report:\n%s", b)

	require.True(t, rep.OK, "violations: %v", rep.Violations)
	require.Empty(t, rep.Violations)
	require.Zero(t, rep.Duplicates)
	require.Zero(t, rep.Lost)
	require.Zero(t, rep.Stuck)
	for _, k := range sandbox.FaultKinds {
		require.GreaterOrEqual(t, rep.FaultsFired[string(k)], 1, "fault %s never fired", k)
	}
	require.GreaterOrEqual(t, rep.Kills, 2, "a random kill and the kill between commit and completion")
	require.Equal(t, 1, rep.KillsBetweenCommitAndCompletion)
	require.Equal(t, 1, rep.Restarts)
	require.GreaterOrEqual(t, rep.StartedTenTimes, 1)
	// An early decision is refused when it beats its question and applied
	// when the question opened first (both correct; which one happens is
	// timing): at least one was sent, and the invariants above hold.
	require.GreaterOrEqual(t, rep.Decisions["early_refused"]+rep.Decisions["early_applied"], 1, "decisions: %v", rep.Decisions)
	require.GreaterOrEqual(t, rep.Decisions["duplicate"], 1, "decisions: %v", rep.Decisions)
	require.GreaterOrEqual(t, rep.Decisions["approve"], 1, "decisions: %v", rep.Decisions)
	require.GreaterOrEqual(t, rep.Ends["waiting"], 1, "a plan left waiting for a human and listed: %v", rep.Ends)
	require.GreaterOrEqual(t, rep.Ends["succeeded"], 1, "ends: %v", rep.Ends)
	require.GreaterOrEqual(t, rep.Escalated, 1)
	require.Greater(t, rep.Effects, 20)
	require.Less(t, rep.Elapsed, 90*time.Second)

	// The same check on the same stores, after the planted duplicate.
	require.Equal(t, 1, recheck.Duplicates, "violations after the planted duplicate: %v", recheck.Violations)
	require.Len(t, recheck.Violations, 1)
	require.Equal(t, "duplicate", recheck.Violations[0].Kind)
	require.Equal(t, planted, recheck.Violations[0].Key)
}

// plantDuplicateEmail sends the e-mail of the run's first send_email step
// once more, straight to the mail relay (which has no key to refuse it),
// and returns that step's operation key.
func plantDuplicateEmail(ctx context.Context, t *testing.T, in chaos.Inspection) string {
	t.Helper()
	for _, ps := range in.Schedule.Plans {
		steps := make([]int, 0, len(ps.Subjects))
		for n := range ps.Subjects {
			steps = append(steps, n)
		}
		sort.Ints(steps)
		for _, n := range steps {
			effects, err := sandbox.NewClient(in.SandboxURL, nil).Effects(ctx, sandbox.Mail)
			require.NoError(t, err)
			sent := false
			for _, e := range effects {
				sent = sent || e.Summary == "ana@example.com: "+ps.Subjects[n]
			}
			if !sent {
				continue
			}
			body, _ := json.Marshal(map[string]string{"to": "ana@example.com", "subject": ps.Subjects[n], "body": "sent again by hand"})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.SandboxURL+"/mail/v1/messages", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusAccepted, resp.StatusCode)
			return ps.Plan.Key(n)
		}
	}
	require.Fail(t, "no plan of the run sent an e-mail")
	return ""
}

// `starter chaos --address` runs the same proof on a cluster a team already
// has: here a Temporal server, ledger and sandbox started apart from the
// run, which connects to them, starts and kills only its own worker
// processes and never restarts the server. No invariant may break.
func TestChaosOnAClusterOfYourOwn(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	st, err := devstack.Start(ctx, devstack.Options{NoWorker: true, UIPort: -1, DataDir: filepath.Join(dir, "cluster"), SandboxURL: sb.BaseURL()})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	// The payload keys are the test process's (AGENTSAGA_CODEC_KEYS), which
	// the run and its workers read as a team's would.

	exe, err := os.Executable()
	require.NoError(t, err)
	rep, err := chaos.Run(ctx, chaos.Options{
		Plans: 10, Seed: 7, Short: true, Ready: workerReady,
		Cluster: &chaos.Cluster{
			Temporal:  config.Temporal{Address: st.Server.FrontendAddr(), Namespace: st.Server.Namespace(), CodecKeys: st.KeysFile},
			LedgerDSN: st.LedgerDSN, SandboxURL: sb.BaseURL(), SandboxToken: sb.Token(),
		},
		WorkerCommand: func(cfg chaos.WorkerConfig) *exec.Cmd {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(),
				envWorker+"=1", envTemporal+"="+cfg.TemporalAddr, envNamespace+"="+cfg.Namespace,
				envTaskQueue+"="+cfg.TaskQueue, envLedger+"="+cfg.LedgerDSN, envSandbox+"="+cfg.SandboxURL)
			return cmd
		},
	})
	require.NoError(t, err)
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("chaos report:\n%s", b)
	require.True(t, rep.OK, "violations: %v", rep.Violations)
	require.Zero(t, rep.Duplicates)
	require.Zero(t, rep.Lost)
	require.Zero(t, rep.Stuck)
	require.Zero(t, rep.Restarts, "a cluster of one's own is not restarted")
	require.GreaterOrEqual(t, rep.Kills, 1, "its own workers are killed")
	require.Equal(t, 10, rep.Plans)
}

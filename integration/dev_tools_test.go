package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/workflows"
)

// `worker --dev --tools FILE` runs the embedded server with the catalogue's
// tools and no sandbox or demo tools of its own: the real binary serves
// catalog/examples/sandbox.yaml against a sandbox this test runs as "the
// team's provider", its banner lists the tools, and a refund whose answer is
// lost after the acquirer committed is settled by the catalogue's lookup:
// one refund in the provider's store. A missing and an invalid catalogue
// stop it with exit 2 and the loader's words, before anything starts.
func TestDevWorkerServesTheCatalogue(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	bin := buildWorkerBinary(ctx, t, dir)

	// A missing file and an invalid one: exit 2, the loader's message.
	missing := filepath.Join(dir, "nope.yaml")
	out, code := runToExit(ctx, t, bin, "--dev", "--port", "0", "--ui-port", "-1", "--data-dir", filepath.Join(dir, "x"), "--tools", missing)
	require.Equal(t, 2, code, "a missing catalogue is bad usage:\n%s", out)
	require.Contains(t, out, "nope.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("version: 1\ntools:\n  - name: create_refund\n    class: NON_IDEMPOTENT\n    lookpu: {}\n"), 0o600))
	out, code = runToExit(ctx, t, bin, "--dev", "--port", "0", "--ui-port", "-1", "--data-dir", filepath.Join(dir, "x"), "--tools", bad)
	require.Equal(t, 2, code, "an invalid catalogue is bad usage:\n%s", out)
	require.Contains(t, out, "NON_IDEMPOTENT", "the loader names the wrong class")
	require.Contains(t, out, "lookpu", "the loader names the unknown key")
	require.NotContains(t, out, "agentsaga dev worker ready", "nothing started")

	// The team's provider: a sandbox nobody but this test started.
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "provider")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	admin := sb.Client()
	catalogue, err := filepath.Abs(filepath.Join("..", "catalog", "examples", "sandbox.yaml"))
	require.NoError(t, err)
	t.Setenv("AGENTSAGA_SANDBOX_URL", sb.BaseURL()) // the catalogue's ${AGENTSAGA_SANDBOX_URL}

	w := startDevBinary(ctx, t, bin, []string{"--dev", "--port", "0", "--ui-port", "-1", "--sandbox-addr", "127.0.0.1:1",
		"--data-dir", filepath.Join(dir, "dev"), "--tools", catalogue})
	banner := w.out.String()
	require.Regexp(t, `(?m)^  tools +.*apply_refund.*\(from .*sandbox\.yaml\)$`, banner, "the banner lists the catalogue's tools")
	require.Regexp(t, `(?m)^  sandbox +not started`, banner, "no sandbox of its own")
	addr := regexp.MustCompile(`(?m)^  Temporal +(\S+) \(namespace (\S+);`).FindStringSubmatch(banner)
	require.NotNil(t, addr, "the banner names the Temporal address:\n%s", banner)

	// A planner's client on the dev server (the shared keyring of TestMain).
	st, err := devstack.Start(ctx, devstack.Options{Address: addr[1], Namespace: addr[2], NoWorker: true, SandboxURL: sb.BaseURL(),
		Ledger: "sqlite:" + filepath.Join(dir, "client-ledger.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	require.NoError(t, admin.Fault(ctx, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop, Count: 1}))
	refund := newPlan("it-dev-tools", step(t, demotools.ApplyRefund, map[string]any{
		"order_id": "ord_1001", "amount_minor": 2500, "currency": "EUR", "reason": "arrived damaged",
	}))
	run, err := st.Plans.Start(ctx, refund)
	require.NoError(t, err)
	final, err := st.Plans.WaitRun(ctx, run)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan: %s", final.Error)
	require.Equal(t, 1, countKind(effectsUnder(ctx, t, admin, refund.Key(1)), "refund"), "one refund in the provider's store")
	require.Equal(t, 1, allCalls(ctx, t, admin)["refunds.create"], "the lost answer was settled by the lookup, not by a second refund")
}

// runToExit runs bin with args to its end and returns its output and exit
// code.
func runToExit(ctx context.Context, t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(b), ee.ExitCode()
	}
	require.NoError(t, err, "run %s", bin)
	return string(b), 0
}

// startDevBinary starts `worker --dev` (bin with args) and waits for its
// banner. Cleanup stops it with SIGTERM and logs its output when the test
// failed.
func startDevBinary(ctx context.Context, t *testing.T, bin string, args []string) *binaryWorker {
	t.Helper()
	w := &binaryWorker{out: &lineWatch{}, exited: make(chan struct{})}
	w.cmd = exec.Command(bin, args...)
	w.cmd.Env = os.Environ()
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	require.NoError(t, w.cmd.Start(), "start worker --dev")
	go func() {
		w.waitErr = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.exited:
		case <-time.After(time.Minute):
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
		if t.Failed() {
			t.Logf("output of worker --dev (pid %d):\n%s", w.cmd.Process.Pid, w.out.String())
		}
	})
	select {
	case <-w.out.wait("Ctrl-C stops."):
	case <-w.exited:
		t.Fatalf("worker --dev exited before it was ready: %v\n%s", w.waitErr, w.out.String())
	case <-ctx.Done():
		t.Fatalf("worker --dev was not ready: %v\n%s", ctx.Err(), w.out.String())
	}
	require.True(t, strings.Contains(w.out.String(), "agentsaga dev worker ready"))
	return w
}

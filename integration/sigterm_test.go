package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/gobuild"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// TestSIGTERMLetsTheCallInFlightFinish stops the real worker binary with
// SIGTERM while send_email is in flight: the relay holds the request (the
// sandbox's hook keeps it open, a slow relay) until the worker says it is
// stopping. The stopping worker takes no new task, lets the call finish and
// record its outcome, and exits 0; a new worker finishes the plan. The plan
// ends succeeded, the relay holds exactly one email, and no person is asked:
// before, the stop cancelled the call, the ledger write failed with "context
// canceled" and the sent email waited for a person as an unknown outcome.
func TestSIGTERMLetsTheCallInFlightFinish(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	dir := t.TempDir()
	bin := buildWorkerBinary(ctx, t, dir)

	var taken atomic.Bool
	arrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox"), Hook: func(hctx context.Context, op string) {
		if op != "mail.send" || !taken.CompareAndSwap(false, true) {
			return
		}
		close(arrived)
		select {
		case <-release:
		case <-hctx.Done():
		}
	}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	t.Cleanup(releaseAll) // runs before sb.Close
	admin := sb.Client()

	st, err := devstack.Start(ctx, devstack.Options{
		NoWorker: true, UIPort: -1, SandboxURL: sb.BaseURL(), Ledger: "sqlite:" + filepath.Join(dir, "ledger.db"),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	args := []string{
		"--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(), "--task-queue", workflows.TaskQueue,
		"--ledger", st.LedgerDSN, "--sandbox-url", sb.BaseURL(), "--data-dir", filepath.Join(dir, "worker"), "-v", "--allow-unverified-decisions",
	}
	first := startWorkerBinary(ctx, t, bin, "first", args)

	p := newPlan("it-sigterm", step(t, demotools.SendEmail, map[string]any{
		"to": "sigterm@example.com", "subject": "Your refund", "body": "It is on its way.",
	}))
	key := p.Key(1)
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	select {
	case <-arrived:
	case <-first.exited:
		t.Fatalf("the first worker exited before the email reached the relay: %v", first.waitErr)
	case <-ctx.Done():
		t.Fatalf("the email never reached the relay: %v", ctx.Err())
	}

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM), "SIGTERM the first worker")
	select {
	case <-first.out.wait("stopping:"):
	case <-first.exited: // a worker that does not wait for its calls
	case <-ctx.Done():
		t.Fatalf("the first worker neither stopped nor said it was stopping: %v", ctx.Err())
	}
	releaseAll() // the relay answers now
	select {
	case <-first.exited:
	case <-ctx.Done():
		t.Fatalf("the first worker did not exit after its call finished: %v", ctx.Err())
	}
	require.NoError(t, first.waitErr, "the stopped worker exits 0:\n%s", first.out.String())
	require.NotContains(t, first.out.String(), "ledger complete failed", "the outcome was recorded")
	require.Contains(t, first.out.String(), "\nstopped\n", "the worker said it stopped")

	op, err := st.Ledger.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status, "the stopping worker recorded the sent email")

	startWorkerBinary(ctx, t, bin, "second", args)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s; step: %+v", final.Error, final.Steps[0])
	require.Equal(t, ledger.Succeeded, final.Steps[0].State)
	require.Empty(t, final.Steps[0].Decisions, "no person was asked")
	require.Empty(t, final.Questions)
	trail, err := st.Ledger.Decisions(ctx, key)
	require.NoError(t, err)
	require.Empty(t, trail, "no decision in the audit trail")

	require.Equal(t, 1, countEmails(allEffects(ctx, t, admin)), "exactly one email at the relay")
	require.Equal(t, 1, allCalls(ctx, t, admin)["mail.send"], "the email was sent once")
}

// buildWorkerBinary builds ./worker into dir and returns its path.
func buildWorkerBinary(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "worker-bin")
	require.NoError(t, buildWorker(ctx, out), "build the worker binary")
	return out
}

// buildWorker builds ./worker to out with the extra go build flags.
func buildWorker(ctx context.Context, out string, flags ...string) error {
	return gobuild.Build(ctx, ".", out, "../worker", flags...)
}

// binaryWorker is the real worker binary running as a process.
type binaryWorker struct {
	cmd     *exec.Cmd
	out     *lineWatch
	exited  chan struct{}
	waitErr error // valid after exited is closed
}

// startWorkerBinary starts bin with args and waits until it polls. Cleanup
// stops it with SIGTERM (SIGKILL if it lingers) and logs its output when the
// test failed.
func startWorkerBinary(ctx context.Context, t *testing.T, bin, name string, args []string) *binaryWorker {
	t.Helper()
	w := &binaryWorker{out: &lineWatch{}, exited: make(chan struct{})}
	w.cmd = exec.Command(bin, args...)
	w.cmd.Env = os.Environ() // the shared payload keyring (AGENTSAGA_CODEC_KEYS)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	require.NoError(t, w.cmd.Start(), "start the %s worker", name)
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
			t.Logf("output of the %s worker (pid %d):\n%s", name, w.cmd.Process.Pid, w.out.String())
		}
	})
	select {
	case <-w.out.wait("agentsaga worker on "):
	case <-w.exited:
		t.Fatalf("the %s worker exited before it was ready: %v\n%s", name, w.waitErr, w.out.String())
	case <-ctx.Done():
		t.Fatalf("the %s worker was not ready: %v\n%s", name, ctx.Err(), w.out.String())
	}
	return w
}

// lineWatch collects a process's output; wait returns a channel closed once
// the output holds a line starting with prefix.
type lineWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	waiters []watchWaiter
}

type watchWaiter struct {
	prefix string
	ch     chan struct{}
}

func (l *lineWatch) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, _ := l.buf.Write(b)
	kept := l.waiters[:0]
	for _, w := range l.waiters {
		if l.hasLine(w.prefix) {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	l.waiters = kept
	return n, nil
}

func (l *lineWatch) wait(prefix string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{})
	if l.hasLine(prefix) {
		close(ch)
		return ch
	}
	l.waiters = append(l.waiters, watchWaiter{prefix, ch})
	return ch
}

// hasLine reports a line of the output starting with prefix; l.mu is held.
func (l *lineWatch) hasLine(prefix string) bool {
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

func (l *lineWatch) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

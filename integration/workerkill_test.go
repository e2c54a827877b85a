package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// TestWorkerDiedAfterTheExternalCall runs the worker as a separate process
// behind a proxy that forwards the refund to the acquirer, sees it committed
// and withholds the answer. The worker is killed with SIGKILL at that moment
// (the provider has the refund, the activity never completed), a new worker
// process is started, and the plan must finish succeeded with exactly one
// refund in the acquirer's store and no second refund request: the next
// attempt waits out the ledger lease and reconciles by key.
func TestWorkerDiedAfterTheExternalCall(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	dir := t.TempDir()

	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	admin := sb.Client()

	proxy := newWithholdingProxy(t, sb.BaseURL())
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	t.Cleanup(proxy.releaseAll) // runs before srv.Close: the withheld handler must return

	st, err := devstack.Start(ctx, devstack.Options{
		NoWorker: true, UIPort: -1, SandboxURL: sb.BaseURL(), Ledger: "sqlite:" + filepath.Join(dir, "ledger.db"),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	env := []string{
		envWorker + "=1",
		envTemporal + "=" + st.Server.FrontendAddr(),
		envNamespace + "=" + st.Server.Namespace(),
		envTaskQueue + "=" + workflows.TaskQueue,
		envLedger + "=" + st.LedgerDSN,
		envSandbox + "=" + srv.URL,
	}
	first := startWorkerProcess(ctx, t, "first", env)

	p := newPlan("it-worker-killed",
		step(t, demotools.QueryOrder, map[string]any{"order_id": "ord_1001"}),
		step(t, demotools.ApplyRefund, map[string]any{"order_id": "ord_1001", "amount_minor": 12900, "currency": "EUR", "reason": "arrived damaged"}),
	)
	key := p.Key(2)
	started := time.Now()
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)

	var committed proxiedResponse
	select {
	case committed = <-proxy.committed:
	case <-first.exited:
		t.Fatalf("the first worker exited before the refund was sent: %v", first.waitErr)
	case <-ctx.Done():
		t.Fatalf("the refund never reached the acquirer through the proxy: %v", ctx.Err())
	}
	require.NoError(t, committed.err, "forward the refund to the acquirer")
	require.Equal(t, http.StatusCreated, committed.status, "the acquirer's answer: %s", committed.body)
	require.Equal(t, key, committed.key, "the refund carries the step's key as Idempotency-Key")
	var refund struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(committed.body, &refund))
	rows := effectsUnder(ctx, t, admin, key)
	require.Len(t, rows, 1, "the acquirer committed the refund before the worker died")
	require.Equal(t, refund.ID, rows[0].ID)

	// The worker has sent the refund and waits for the answer: the step is
	// in progress and the activity has not completed.
	status, err := st.Plans.Status(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, ledger.InProgress, status.Steps[1].State)
	d, err := st.Client.DescribeWorkflowExecution(ctx, run.WorkflowID, run.RunID)
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus())
	require.NotEmpty(t, d.GetPendingActivities(), "the refund activity is still pending")

	first.kill(t)
	t.Logf("refund committed and the first worker killed %s after the start", time.Since(started).Round(time.Millisecond))
	second := startWorkerProcess(ctx, t, "second", env)

	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	t.Logf("plan finished %s after the start (lease %s: tool timeout 10s + 5s grace)", time.Since(started).Round(time.Millisecond), 15*time.Second)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)
	require.Equal(t, ledger.Succeeded, final.Steps[1].State, "last error: %s", final.Steps[1].LastError)
	require.Equal(t, refund.ID, final.Steps[1].ExternalID, "the step settled on the refund the dead worker created")

	effects := allEffects(ctx, t, admin)
	require.Equal(t, 1, countKind(effects, "refund"), "exactly one refund in the acquirer's store: %+v", effects)
	rows = effectsUnder(ctx, t, admin, key)
	require.Len(t, rows, 1)
	require.Equal(t, refund.ID, rows[0].ID)
	calls := allCalls(ctx, t, admin)
	require.Equal(t, 1, calls["refunds.create"], "the refund was never sent again; calls: %v", calls)
	require.GreaterOrEqual(t, calls["refunds.lookup"], 1, "the new worker reconciled by key; calls: %v", calls)

	op, err := st.Ledger.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, refund.ID, op.ExternalID)

	select {
	case <-second.exited:
		t.Fatalf("the second worker exited: %v", second.waitErr)
	default:
	}
}

// proxiedResponse is the acquirer's answer to the refund the proxy withheld.
type proxiedResponse struct {
	key    string
	status int
	body   []byte
	err    error
}

// withholdingProxy forwards everything to the sandbox, except that the
// first refund request's answer is reported on committed and never given to
// the caller: the handler blocks until releaseAll or until the caller hangs
// up, then aborts the connection.
type withholdingProxy struct {
	target    string
	rp        *httputil.ReverseProxy
	hc        *http.Client
	taken     atomic.Bool
	committed chan proxiedResponse
	release   chan struct{}
	once      sync.Once
}

func newWithholdingProxy(t *testing.T, target string) *withholdingProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	return &withholdingProxy{
		target:    strings.TrimRight(target, "/"),
		rp:        httputil.NewSingleHostReverseProxy(u),
		hc:        &http.Client{Timeout: 30 * time.Second},
		committed: make(chan proxiedResponse, 1),
		release:   make(chan struct{}),
	}
}

func (p *withholdingProxy) releaseAll() { p.once.Do(func() { close(p.release) }) }

func (p *withholdingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/payments/v1/refunds" || !p.taken.CompareAndSwap(false, true) {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.committed <- p.forward(r)
	select {
	case <-p.release:
	case <-r.Context().Done(): // the worker died
	}
	panic(http.ErrAbortHandler) // close the connection without an answer
}

// forward sends r to the sandbox on a context of its own, so the acquirer
// finishes even if the caller goes away, and reads the whole answer.
func (p *withholdingProxy) forward(r *http.Request) proxiedResponse {
	res := proxiedResponse{key: r.Header.Get("Idempotency-Key")}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		res.err = fmt.Errorf("read the refund request: %w", err)
		return res
	}
	out, err := http.NewRequestWithContext(context.Background(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		res.err = err
		return res
	}
	out.Header = r.Header.Clone()
	resp, err := p.hc.Do(out)
	if err != nil {
		res.err = fmt.Errorf("send the refund to the acquirer: %w", err)
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	res.body, res.err = io.ReadAll(resp.Body)
	return res
}

// workerProcess is a worker running as a separate OS process: the test
// binary re-executed with envWorker set.
type workerProcess struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *watchedOutput
	exited  chan struct{} // closed once the process has been reaped
	waitErr error         // valid after exited is closed
}

// startWorkerProcess starts a worker process with env and waits until it
// polls its task queue. Cleanup stops it (closing its stdin, or killing it)
// and logs its output when the test failed.
func startWorkerProcess(ctx context.Context, t *testing.T, name string, env []string) *workerProcess {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	w := &workerProcess{name: name, out: newWatchedOutput(workerReady), exited: make(chan struct{})}
	w.cmd = exec.Command(exe, "-test.run=^$")
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.Stdout, w.cmd.Stderr = w.out, w.out
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start(), "start the %s worker process", name)
	go func() {
		w.waitErr = w.cmd.Wait()
		close(w.exited)
	}()
	t.Cleanup(func() {
		_ = w.stdin.Close()
		select {
		case <-w.exited:
		case <-time.After(15 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.exited
		}
		if t.Failed() {
			t.Logf("output of the %s worker process (pid %d):\n%s", name, w.cmd.Process.Pid, w.out.String())
		}
	})
	select {
	case <-w.out.seen:
	case <-w.exited:
		t.Fatalf("the %s worker process exited before it was ready: %v\n%s", name, w.waitErr, w.out.String())
	case <-ctx.Done():
		t.Fatalf("the %s worker process was not ready: %v\n%s", name, ctx.Err(), w.out.String())
	}
	return w
}

// kill sends SIGKILL and waits until the process is gone.
func (w *workerProcess) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL), "SIGKILL the %s worker", w.name)
	<-w.exited
	var exit *exec.ExitError
	require.True(t, errors.As(w.waitErr, &exit), "the %s worker ended with %v", w.name, w.waitErr)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the %s worker was not killed by SIGKILL: %v", w.name, w.waitErr)
}

// watchedOutput collects a process's output and closes seen when a line
// equal to want was written.
type watchedOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newWatchedOutput(want string) *watchedOutput {
	return &watchedOutput{want: want, seen: make(chan struct{})}
}

func (o *watchedOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, _ := o.buf.Write(b)
	select {
	case <-o.seen:
		return n, nil
	default:
	}
	for _, line := range strings.Split(o.buf.String(), "\n") {
		if line == o.want {
			o.once.Do(func() { close(o.seen) })
			break
		}
	}
	return n, nil
}

func (o *watchedOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

package chaos

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaworker"
)

// WorkerConfig is what a worker process needs to reach the run's stack.
type WorkerConfig struct {
	TemporalAddr string
	Namespace    string
	TaskQueue    string
	LedgerDSN    string
	// SandboxURL is the worker's own withholding proxy in front of the
	// sandbox.
	SandboxURL string
	// KeysFile is the payload keyring file ("" when the keys come from the
	// environment, which the process inherits).
	KeysFile string
	// TLS is how the worker reaches a cluster of its own (Options.Cluster):
	// TEMPORAL_TLS* and TEMPORAL_API_KEY as the worker reads them; empty for
	// the embedded server.
	TLS []string
}

// Environment of a worker process started by WorkerEnv and read by
// RunWorker.
const (
	EnvTemporal  = "AGENTSAGA_CHAOS_TEMPORAL_ADDRESS"
	EnvNamespace = "AGENTSAGA_CHAOS_NAMESPACE"
	EnvTaskQueue = "AGENTSAGA_CHAOS_TASK_QUEUE"
	EnvLedger    = "AGENTSAGA_CHAOS_LEDGER"
	EnvSandbox   = "AGENTSAGA_CHAOS_SANDBOX_URL"
)

// WorkerReady is the line RunWorker prints once its worker polls.
const WorkerReady = "agentsaga-chaos-worker ready"

// WorkerEnv returns the environment (KEY=value) that makes RunWorker serve
// cfg.
func WorkerEnv(cfg WorkerConfig) []string {
	env := []string{
		EnvTemporal + "=" + cfg.TemporalAddr, EnvNamespace + "=" + cfg.Namespace, EnvTaskQueue + "=" + cfg.TaskQueue,
		EnvLedger + "=" + cfg.LedgerDSN, EnvSandbox + "=" + cfg.SandboxURL,
	}
	if cfg.KeysFile != "" {
		env = append(env, codec.EnvKeysFile+"="+cfg.KeysFile)
	}
	return append(env, cfg.TLS...)
}

// tlsEnv is t's TLS and API key as the environment a worker process reads
// them from (config.Temporal's variables).
func tlsEnv(t config.Temporal) []string {
	var env []string
	add := func(name, v string) {
		if v != "" {
			env = append(env, name+"="+v)
		}
	}
	if t.TLS {
		add(config.EnvTLS, "true")
	}
	add(config.EnvTLSCert, t.TLSCert)
	add(config.EnvTLSKey, t.TLSKey)
	add(config.EnvTLSCA, t.TLSCA)
	add(config.EnvTLSServer, t.TLSServer)
	add(config.EnvAPIKey, t.APIKeyValue())
	return env
}

// RunWorker is the body of a worker process: it runs AgentPlan with the
// demo tools against the stack named in the environment (see WorkerEnv),
// prints WorkerReady to out once it polls, and stops when stdin closes (the
// run ended, or the process that started it died). A SIGKILL stops it
// anywhere. It returns the process's exit code.
func RunWorker(ctx context.Context, stdin io.Reader, out, errOut io.Writer) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(errOut, "agentsaga-chaos-worker: "+format+"\n", args...)
		return 1
	}
	for _, name := range []string{EnvTemporal, EnvNamespace, EnvTaskQueue, EnvLedger, EnvSandbox} {
		if os.Getenv(name) == "" {
			return fail("%s is not set: this process is started by `starter chaos`, not by hand", name)
		}
	}
	log := slog.New(redact.NewHandler(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn})))
	tools, err := demotools.Registry(demotools.SandboxConfig(os.Getenv(EnvSandbox)))
	if err != nil {
		return fail("tools: %v", err)
	}
	store, err := ledgerdb.Open(ctx, os.Getenv(EnvLedger))
	if err != nil {
		return fail("ledger: %v", err)
	}
	defer store.Close()
	ring, _, err := codec.KeyringFromEnvironment()
	if err != nil || ring == nil {
		return fail("payload keys: %v (set %s or %s)", err, codec.EnvKeysFile, codec.EnvKeys)
	}
	// TLS and an API key come from the environment, as the worker reads
	// them (Options.Cluster passes them on).
	var t config.Temporal
	t.Register(flag.NewFlagSet("chaos-worker", flag.ContinueOnError))
	t.Address, t.Namespace, t.CodecKeys = os.Getenv(EnvTemporal), os.Getenv(EnvNamespace), ""
	opts, err := t.ClientOptions()
	if err != nil {
		return fail("Temporal options: %v", err)
	}
	opts.Logger = sdklog.NewStructuredLogger(log)
	codec.ClientOptions(&opts, ring)
	c, err := client.Dial(opts)
	if err != nil {
		return fail("connect to Temporal: %v", err)
	}
	defer c.Close()
	w, err := sagaworker.New(c, sagaworker.Options{TaskQueue: os.Getenv(EnvTaskQueue), Tools: tools, Ledger: store, Logger: log})
	if err != nil {
		return fail("worker: %v", err)
	}
	if err := w.Start(); err != nil {
		return fail("start worker: %v", err)
	}
	fmt.Fprintln(out, WorkerReady)
	_, _ = io.Copy(io.Discard, stdin)
	w.Stop()
	return 0
}

// process is one running worker process.
type process struct {
	id      int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	out     *watched
	proxy   *proxy
	exited  chan struct{}
	waitErr error
}

// startProcess starts cmd and waits until it prints ready, it exits, or
// ctx ends.
func startProcess(ctx context.Context, id int, cmd *exec.Cmd, ready string, px *proxy) (*process, error) {
	p := &process{id: id, cmd: cmd, out: newWatched(ready), proxy: px, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("worker %d: stdin: %w", id, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker process %d: %w", id, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-p.out.seen:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("worker process %d exited before it was ready: %v\n%s", id, p.waitErr, p.out.tail())
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-p.exited
		return nil, fmt.Errorf("worker process %d was not ready: %w\n%s", id, ctx.Err(), p.out.tail())
	}
}

// kill sends SIGKILL and waits until the process has been reaped; it
// reports whether SIGKILL is what ended it.
func (p *process) kill() (bool, error) {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return false, fmt.Errorf("SIGKILL worker %d: %w", p.id, err)
	}
	<-p.exited
	var exit *exec.ExitError
	if errors.As(p.waitErr, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, nil
		}
	}
	return false, nil
}

// stop closes stdin and sends SIGTERM (a worker stops on either: RunWorker
// on the first, the worker binary on the second) and kills it if it
// lingers.
func (p *process) stop(ctx context.Context) {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// watched keeps the last output of a process and closes seen when a line
// starting with want was written.
type watched struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newWatched(want string) *watched { return &watched{want: want, seen: make(chan struct{})} }

func (o *watched) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(b)
	if o.buf.Len() > 1<<20 { // keep the tail
		tail := append([]byte(nil), o.buf.Bytes()[o.buf.Len()-(64<<10):]...)
		o.buf.Reset()
		o.buf.Write(tail)
	}
	select {
	case <-o.seen:
		return len(b), nil
	default:
	}
	for _, line := range strings.Split(o.buf.String(), "\n") {
		if strings.HasPrefix(line, o.want) {
			o.once.Do(func() { close(o.seen) })
		}
	}
	return len(b), nil
}

func (o *watched) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.buf.String()
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}

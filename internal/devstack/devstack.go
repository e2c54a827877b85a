// Package devstack starts the whole product in one process: a real Temporal
// server on SQLite with the Web UI, the sandbox providers, the ledger and a
// worker running AgentPlan. `worker --dev`, `starter demo` and the
// integration tests all start it here.
//
// Payloads are encrypted (package codec): the stack's client and worker use
// the codec data converter, a codec server answers the Web UI, which is
// configured to call it from the browser, and the secrets live in the data
// directory, each made on first start with mode 0600:
//
//	<data-dir>/codec-keys.json       the keyring (KeysFile), unless the
//	                                 environment names one (see Options.Keyring)
//	<data-dir>/codec.token           the codec server's token (CodecTokenFile)
//	<data-dir>/sandbox-admin.token   the sandbox admin API's token (SandboxTokenFile)
//
// A stack without data directory keeps all three in memory.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devserver"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/telemetry"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Options configure a stack.
type Options struct {
	// DataDir keeps Temporal's database, the ledger and the sandbox stores
	// so plans survive a restart. Empty keeps them in a temporary directory
	// removed by Close.
	DataDir string
	// Address, when set, connects to a Temporal that already runs there
	// (a cluster prepared with `starter cluster setup`), in Namespace,
	// instead of embedding one: Stack.Server is nil, and Port, UIPort and
	// HTTPPort are unused.
	Address, Namespace string
	// Port is Temporal's frontend port (0 picks a free one); UIPort the Web
	// UI's (0 free, -1 none).
	Port, UIPort int
	// HTTPPort is the frontend's HTTP API port (0 picks a free one).
	HTTPPort int
	// Ledger is the ledger DSN; empty means SQLite under the data directory.
	Ledger string
	// SandboxURL uses a sandbox that already runs instead of starting one.
	SandboxURL string
	// SandboxAddr is where the started sandbox listens; empty picks a free
	// port on 127.0.0.1.
	SandboxAddr string
	// TaskQueue defaults to workflows.TaskQueue.
	TaskQueue string
	// NoWorker starts everything but the worker (tests that run the worker
	// as a separate process).
	NoWorker bool
	// Logger receives the stack's logs; nil discards them.
	Logger *slog.Logger
	// Operators verifies who decides (an *operators.Keyring); nil accepts
	// typed names, recorded as unverified.
	Operators workflows.Verifier
	// Keyring encrypts payloads with these keys (keys given with
	// --codec-keys, say). Nil means the keyring in $AGENTSAGA_CODEC_KEYS_FILE
	// or $AGENTSAGA_CODEC_KEYS, else <DataDir>/codec-keys.json (made on
	// first start), else, without DataDir, a fresh one in memory.
	Keyring *codec.Keyring
	// CodecAddr is where the codec server listens; empty picks a free port
	// on 127.0.0.1.
	CodecAddr string
	// AllowPlaintext makes the stack's worker accept payloads that clients
	// sent unencrypted (by default a stack with keys refuses them).
	AllowPlaintext bool
	// MetricsAddr, when set, serves the worker's Prometheus metrics at
	// http://MetricsAddr/metrics (port 0 picks a free one; see
	// Stack.MetricsURL). Empty serves none.
	MetricsAddr string
	// Tools, when set, are the tools the stack's worker runs (a team's
	// catalogue, `worker --dev --tools FILE`): no sandbox is started and the
	// demo tools are not registered. Nil runs the demo tools against the
	// sandbox (SandboxURL, or one started here).
	Tools *tool.Registry
	// Webhook, when set, is told when a question opens, ages past its
	// reminder, and is decided or expires (`worker --dev --notify-url`). An
	// empty Webhook.UIURL becomes the embedded Web UI's.
	Webhook *activities.Webhook
	// ServerMetrics makes the embedded server serve its own metrics
	// (Stack.Server.MetricsURL); the bench counts the server's work per
	// plan with them. Off by default: recording them costs the server CPU.
	ServerMetrics bool
}

// Stack is a running product.
type Stack struct {
	Server     *devserver.Server // nil with Options.Address
	Sandbox    *sandbox.Sandbox  // nil when Options.SandboxURL or Options.Tools was given
	SandboxURL string
	Client     client.Client
	Plans      *sagaclient.Client
	Tools      *tool.Registry
	Ledger     ledger.Store
	Worker     worker.Worker // nil with NoWorker
	LedgerDSN  string

	// Keyring encrypts the stack's payloads; DataConverter is the codec
	// data converter over it, which Client and Worker use. Another client
	// of this server needs the same keys (KeysFile).
	Keyring       *codec.Keyring
	DataConverter converter.DataConverter
	// KeysFile is the keyring file under the data directory ("" when the
	// keys are in memory or came from Options.Keyring).
	KeysFile string
	// CodecURL is the codec server's base URL (POST CodecURL+"/decode",
	// a browser logs in at CodecURL+"/login"); CodecToken is its bearer
	// token (keep it out of logs); CodecTokenFile the file that holds it
	// ("" without data directory).
	CodecURL, CodecToken, CodecTokenFile string
	// SandboxToken is the sandbox admin API's token and SandboxTokenFile
	// the file that holds it (both "" with Options.SandboxURL).
	SandboxToken, SandboxTokenFile string

	codecSrv *http.Server
	// Telemetry is the client's and worker's metrics and tracing; nil
	// without Options.MetricsAddr and without an OTLP endpoint.
	Telemetry *telemetry.Telemetry
	// MetricsURL is where /metrics is served; empty without
	// Options.MetricsAddr.
	MetricsURL string

	metrics *telemetry.Server
	// workerOpts is what the stack's worker is made with, apart from its
	// task queue and ledger (see WorkerOn).
	workerOpts sagaworker.Options

	tmp string
}

// WorkerOn returns a worker made as Stack.Worker is (the same tools,
// logger, operators and SDK options) on task queue tq over ledger l, not
// started: a measurement's own worker beside the stack's.
func (st *Stack) WorkerOn(tq string, l ledger.Store) (worker.Worker, error) {
	o := st.workerOpts
	o.TaskQueue, o.Ledger = tq, l
	return sagaworker.New(st.Client, o)
}

// PlansOn returns a planner's client like Stack.Plans that starts plans on
// task queue tq, for a worker of the caller's own on this stack.
func (st *Stack) PlansOn(tq string) *sagaclient.Client {
	// sagaclient reads the plan fingerprint memo with the default data
	// converter: hand it memos decoded.
	return sagaclient.New(codec.DecodeMemos(st.Client, codec.New(st.Keyring)), sagaclient.Options{TaskQueue: tq, Catalog: st.Tools})
}

// Start starts a stack. Close it when done.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Failures below return (nil, err) and the deferred clean-up closes
	// what was started so far.
	st := &Stack{}
	defer func() {
		if err != nil {
			if cerr := st.Close(); cerr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
			}
		}
	}()
	dir := o.DataDir
	temporalDir := ""
	if dir == "" {
		if st.tmp, err = os.MkdirTemp("", "agentsaga-"); err != nil {
			return nil, fmt.Errorf("make a temporary data directory: %w", err)
		}
		dir = st.tmp
	} else {
		temporalDir = filepath.Join(dir, "temporal")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("make data directory %s: %w", dir, err)
	}

	if err := st.prepareSecrets(o, dir, o.DataDir != ""); err != nil {
		return nil, err
	}
	codecSrv, err := st.startCodec(o.CodecAddr, log)
	if err != nil {
		return nil, addrError("CodecAddr", o.CodecAddr, err)
	}

	hostPort, namespace := o.Address, o.Namespace
	if hostPort == "" {
		st.Server, err = devserver.Start(ctx, devserver.Options{
			DataDir: temporalDir, Port: o.Port, UIPort: o.UIPort, HTTPPort: o.HTTPPort, ServeMetrics: o.ServerMetrics,
			SearchAttributes: sagaworker.SearchAttributes, Logger: log,
			UICodec: devserver.UICodec{Endpoint: st.CodecURL, IncludeCredentials: true},
		})
		if err != nil {
			return nil, fmt.Errorf("start embedded Temporal: %w", err)
		}
		if ui := st.Server.UIURL(); ui != "" {
			codecSrv.AllowOrigins(ui)
		}
		if o.DataDir != "" {
			// The starter's links follow the UI wherever --ui-port put it.
			if err := os.WriteFile(filepath.Join(dir, config.UIURLFile), []byte(st.Server.UIURL()+"\n"), 0o600); err != nil {
				return nil, fmt.Errorf("write the Web UI's address: %w", err)
			}
		}
		hostPort, namespace = st.Server.FrontendAddr(), st.Server.Namespace()
	} else if namespace == "" {
		return nil, errors.New("devstack: Options.Address is set without Namespace: name the namespace `starter cluster setup` prepared")
	}

	st.SandboxURL = o.SandboxURL
	if o.Tools != nil {
		st.SandboxToken, st.SandboxTokenFile = "", ""
	} else if st.SandboxURL == "" {
		sbDir := ""
		if o.DataDir != "" {
			sbDir = filepath.Join(dir, "sandbox")
		}
		if st.Sandbox, err = sandbox.Start(ctx, sandbox.Options{Addr: o.SandboxAddr, Dir: sbDir, Logger: log, Token: st.SandboxToken}); err != nil {
			return nil, addrError("SandboxAddr", o.SandboxAddr, fmt.Errorf("start sandbox providers: %w", err))
		}
		st.SandboxURL = st.Sandbox.BaseURL()
	} else {
		st.SandboxToken, st.SandboxTokenFile = "", ""
	}

	st.LedgerDSN = o.Ledger
	if st.LedgerDSN == "" {
		st.LedgerDSN = "sqlite:" + filepath.Join(dir, "ledger.db")
	}
	if st.Ledger, err = ledgerdb.Open(ctx, st.LedgerDSN); err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	st.Tools = o.Tools
	if st.Tools == nil {
		if st.Tools, err = demotools.Registry(demotools.SandboxConfig(st.SandboxURL)); err != nil {
			return nil, err
		}
	}

	copts := client.Options{
		HostPort: hostPort, Namespace: namespace,
		Logger: sdklog.NewStructuredLogger(log),
		// The server is on loopback (in this process, or beside it): gzip
		// of every request and response would cost CPU and save nothing.
		ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}},
	}
	var wopts worker.Options
	if o.MetricsAddr != "" || telemetry.TracingConfigured() {
		if st.Telemetry, err = telemetry.New(ctx, telemetry.Options{Tools: st.Tools, Ledger: st.Ledger, Logger: log}); err != nil {
			return nil, err
		}
		st.Telemetry.ClientOptions(&copts)
		wopts.Interceptors = st.Telemetry.WorkerInterceptors()
		if o.MetricsAddr != "" {
			if st.metrics, err = st.Telemetry.Serve(o.MetricsAddr); err != nil {
				return nil, addrError("MetricsAddr", o.MetricsAddr, err)
			}
			st.MetricsURL = st.metrics.URL()
		}
	}
	codec.WorkerClientOptions(&copts, st.Keyring, o.AllowPlaintext)
	st.DataConverter = copts.DataConverter
	st.Client, err = client.Dial(copts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s: %w", hostPort, err)
	}
	tq := o.TaskQueue
	if tq == "" {
		tq = workflows.TaskQueue
	}
	st.Plans = st.PlansOn(tq)
	hook := o.Webhook
	if hook != nil && hook.UIURL == "" && st.Server != nil {
		h := *hook
		h.UIURL = st.Server.UIURL()
		hook = &h
	}
	st.workerOpts = sagaworker.Options{Tools: st.Tools, Logger: log, Operators: o.Operators, Worker: wopts, Webhook: hook}
	if o.NoWorker {
		return st, nil
	}
	st.Worker, err = st.WorkerOn(tq, st.Ledger)
	if err != nil {
		return nil, err
	}
	if err := st.Worker.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	return st, nil
}

// Close stops everything Start started, in reverse order. Closing a nil
// stack does nothing.
func (s *Stack) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	if s.Worker != nil {
		s.Worker.Stop()
	}
	if s.Client != nil {
		s.Client.Close()
	}
	if s.metrics != nil {
		errs = append(errs, s.metrics.Close())
	}
	if s.Telemetry != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, s.Telemetry.Shutdown(ctx))
		cancel()
	}
	if s.Ledger != nil {
		errs = append(errs, s.Ledger.Close())
	}
	if s.Sandbox != nil {
		errs = append(errs, s.Sandbox.Close())
	}
	if s.Server != nil {
		errs = append(errs, s.Server.Stop())
	}
	if s.codecSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.codecSrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop the codec server: %w", err))
		}
		cancel()
	}
	if s.tmp != "" {
		errs = append(errs, os.RemoveAll(s.tmp))
	}
	return errors.Join(errs...)
}

// AddrError is an address asked for in Options that could not be listened
// on (another process holds it). Option names the field of Options, so a
// command can name its own flag.
type AddrError struct {
	Option string // CodecAddr, SandboxAddr, MetricsAddr
	Addr   string
	Err    error
}

func (e *AddrError) Error() string {
	return fmt.Sprintf("devstack: cannot listen on %s (Options.%s): %v", e.Addr, e.Option, e.Err)
}

func (e *AddrError) Unwrap() error { return e.Err }

// addrError marks err as an AddrError of option when it is a failure to
// listen on an address that was asked for.
func addrError(option, addr string, err error) error {
	var op *net.OpError
	if addr == "" || !errors.As(err, &op) || op.Op != "listen" {
		return err
	}
	return &AddrError{Option: option, Addr: addr, Err: err}
}

// Command worker runs AgentPlan workflows and their tool activities.
//
//	go run ./worker --dev            embedded Temporal + Web UI + sandbox + worker
//	go run ./worker                  connect to TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE
//
// --metrics-addr HOST:PORT (env AGENTSAGA_METRICS_ADDR) serves Prometheus
// metrics at /metrics: off by default, 127.0.0.1:9464 with --dev ("off" turns
// it off). Spans are exported over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT (or
// _TRACES_ENDPOINT) is set. See package telemetry for the metric names.
//
// It refuses to start when a tool lacks a side-effect class, a compensator or
// a reconciler, naming every offender, and stops gracefully on SIGINT/SIGTERM:
// it takes no new task, lets the tool calls in flight finish and record their
// outcome (up to sagaworker.StopTimeout: the longest tool timeout plus the
// ledger record and a margin), then exits. A second signal ends it at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devserver"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/version"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/telemetry"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopSignals = stop
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// stopSignals restores the default handling of SIGINT and SIGTERM once the
// first one has started a graceful stop.
var stopSignals = func() {}

type usageError struct{ error }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var t config.Temporal
	t.Register(fs)
	dev := fs.Bool("dev", false, "start an embedded Temporal server with the Web UI and the sandbox providers")
	dataDir := fs.String("data-dir", config.DefaultDataDir(), "with --dev: where Temporal, the ledger and the sandbox keep their data (env "+config.EnvDataDir+")")
	port := fs.Int("port", 7233, "with --dev: Temporal frontend port; the HTTP API, codec and metrics ports follow it unless set (0: every port free)")
	uiPort := fs.Int("ui-port", config.DefaultUIPort, "with --dev: Temporal Web UI port")
	httpPort := fs.Int("http-port", -1, "with --dev: the frontend's HTTP API port (default --port + 10: 7243)")
	codecAddr := fs.String("codec-addr", "", "with --dev: where the codec endpoint listens (default 127.0.0.1:PORT, PORT = --port + 1001: 8234)")
	var ledgerFlag string
	config.RegisterLedger(fs, &ledgerFlag, "default sqlite under --data-dir")
	sandboxAddr := fs.String("sandbox-addr", "127.0.0.1:8090", "with --dev: where the sandbox providers listen")
	sandboxURL := fs.String("sandbox-url", os.Getenv(config.EnvSandboxURL), "base URL of the sandbox providers, for the demo tools when no --tools is given (env "+config.EnvSandboxURL+"; --dev starts its own)")
	var toolFiles []string
	fs.Func("tools", "a tool catalogue file (YAML, see catalog/); repeatable; the worker runs the tools it declares (env "+catalog.EnvTools+", a path list)", func(v string) error {
		toolFiles = append(toolFiles, v)
		return nil
	})
	operatorsFile := fs.String("operators", os.Getenv(config.EnvOperators), "operators file: who may approve and resolve, with their Ed25519 public keys; decisions must then be signed (env "+config.EnvOperators+"; without it typed names are recorded as unverified)")
	metricsAddr := fs.String("metrics-addr", os.Getenv(telemetry.EnvMetricsAddr), "serve Prometheus metrics at http://ADDR/metrics; off unless set, except with --dev, where it defaults to "+telemetry.DefaultDevMetricsAddr+" (moving with --port); \"off\" turns it off (env "+telemetry.EnvMetricsAddr+")")
	allowPlaintext := fs.Bool("allow-plaintext-payloads", os.Getenv(config.EnvAllowPlaintext) == "true", "with codec keys: accept plans, turns and decisions that a client sent unencrypted (by default they are refused, so no customer data is stored in the clear; env "+config.EnvAllowPlaintext+"=true)")
	verbose := fs.Bool("v", false, "log every tool call")
	showVersion := fs.Bool("version", false, "print which agentsaga this is and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // the flags were printed
		}
		return usageError{err}
	}
	if *showVersion {
		fmt.Println(version.Line())
		return nil
	}
	if *dev {
		follow := func(base int) int { // a port that moves with --port
			if *port == 0 {
				return 0
			}
			return base + *port - 7233
		}
		if *httpPort < 0 {
			*httpPort = follow(7243)
		}
		if *codecAddr == "" {
			*codecAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(follow(8234)))
		}
		if *metricsAddr == "" {
			*metricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(follow(devMetricsPort())))
		}
	}
	if *metricsAddr == "off" {
		*metricsAddr = ""
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	// One redaction function on every log line, the SDK's included.
	log := slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	ledgerDSN := config.LedgerDSN(ledgerFlag)
	t.DataDir = *dataDir
	// A nil *operators.Keyring must not reach the interface: a typed nil
	// would be a non-nil Verifier that refuses every decision.
	var verifier workflows.Verifier
	if *operatorsFile != "" {
		ring, err := operators.Load(*operatorsFile)
		if err != nil {
			return usageError{fmt.Errorf("--operators: %w", err)}
		}
		verifier = ring
		log.Info("decisions must be signed", "operators", ring.Names())
	}

	if *dev {
		var ring *codec.Keyring
		if t.CodecKeys != "" {
			var err error
			if ring, _, err = t.Keyring(); err != nil {
				return usageError{fmt.Errorf("--codec-keys: %w", err)}
			}
		}
		st, err := devstack.Start(ctx, devstack.Options{
			DataDir: *dataDir, Port: *port, UIPort: *uiPort, HTTPPort: *httpPort, CodecAddr: *codecAddr, Ledger: ledgerDSN,
			SandboxURL: *sandboxURL, SandboxAddr: *sandboxAddr,
			TaskQueue: t.TaskQueue, Logger: log, Operators: verifier, MetricsAddr: *metricsAddr, Keyring: ring, AllowPlaintext: *allowPlaintext,
		})
		if err != nil {
			return portFlag(err)
		}
		sandboxLine := fmt.Sprintf("%s (started here; admin token in %s)", st.SandboxURL, st.SandboxTokenFile)
		if st.Sandbox == nil {
			sandboxLine = fmt.Sprintf("%s (not started here: --sandbox-url or %s names one that runs elsewhere)", st.SandboxURL, config.EnvSandboxURL)
		}
		fmt.Printf("agentsaga dev worker ready\n  Temporal   %s (namespace %s; HTTP API %s)\n  Web UI     %s\n  codec      %s (log in once per browser at %s/login with the token in %s; keys in %s)\n  sandbox    %s\n  ledger     %s\n  task queue %s\n  data       %s\n  metrics    %s\nCtrl-C stops.\n",
			st.Server.FrontendAddr(), st.Server.Namespace(), st.Server.FrontendHTTPAddr(), st.Server.UIURL(), st.CodecURL, st.CodecURL, st.CodecTokenFile, st.KeysFile,
			sandboxLine, config.SafeDSN(st.LedgerDSN), t.TaskQueue, *dataDir, orOff(st.MetricsURL))
		<-ctx.Done()
		fmt.Println("stopping")
		return st.Close()
	}

	if len(toolFiles) == 0 {
		toolFiles = filepath.SplitList(os.Getenv(catalog.EnvTools))
	}
	if len(toolFiles) == 0 && *sandboxURL == "" {
		return usageError{fmt.Errorf("no tools: give --tools FILE (a tool catalogue of your own APIs; env %s), or --sandbox-url (env %s) for the demo tools", catalog.EnvTools, config.EnvSandboxURL)}
	}
	dsn := ledgerDSN
	if dsn == "" {
		dsn = config.DefaultLedger(*dataDir)
		if err := os.MkdirAll(*dataDir, 0o750); err != nil {
			return fmt.Errorf("make data directory: %w", err)
		}
	}
	tools, err := workerTools(toolFiles, *sandboxURL)
	if err != nil {
		return usageError{err}
	}
	store, err := ledgerdb.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	opts, err := t.ClientOptions()
	if err != nil {
		return usageError{err}
	}
	if ring, _, err := t.Keyring(); err == nil && ring != nil {
		codec.WorkerClientOptions(&opts, ring, *allowPlaintext)
		if *allowPlaintext {
			log.Warn("plaintext payloads are accepted (--allow-plaintext-payloads): plans sent without the codec keys are stored in the clear")
		}
	}
	opts.Logger = sdklog.NewStructuredLogger(log)
	tel, err := telemetry.New(ctx, telemetry.Options{Tools: tools, Ledger: store, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(sctx); err != nil {
			log.Warn("spans not flushed", "error", err)
		}
	}()
	tel.ClientOptions(&opts)
	metricsURL := ""
	if *metricsAddr != "" {
		srv, err := tel.Serve(*metricsAddr)
		if err != nil {
			return usageError{fmt.Errorf("--metrics-addr: %w", err)}
		}
		defer srv.Close()
		metricsURL = srv.URL()
	}
	c, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("connect to Temporal at %s: %w (set --address or %s)", t.Address, err, config.EnvAddress)
	}
	defer c.Close()
	if err := sagaworker.RegisterSearchAttributes(ctx, c, t.Namespace); err != nil {
		log.Warn("search attributes not registered; escalations cannot be listed until they are", "error", err)
	}
	w, err := sagaworker.New(c, sagaworker.Options{TaskQueue: t.TaskQueue, Tools: tools, Ledger: store, Logger: log, Operators: verifier,
		Worker: worker.Options{Interceptors: tel.WorkerInterceptors()}})
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	identity := "typed names, recorded as unverified (no --operators)"
	if verifier != nil {
		identity = "signed by an operator in " + *operatorsFile
	}
	payloads := "plain (no --codec-keys: set a keyring to encrypt history)"
	if ring, src, err := t.Keyring(); err == nil && ring != nil {
		payloads = fmt.Sprintf("encrypted with key %s (%s)", ring.Current(), src)
	}
	toolsLine := fmt.Sprintf("the demo tools against the sandbox at %s", *sandboxURL)
	if len(toolFiles) > 0 {
		toolsLine = fmt.Sprintf("%s (from %s)", strings.Join(tools.Names(), ", "), strings.Join(toolFiles, ", "))
	}
	fmt.Printf("agentsaga worker on %s namespace %s task queue %s, ledger %s, API key %s\ntools: %s\ndecisions: %s\npayloads: %s\nmetrics: %s, traces: %s\n", t.Address, t.Namespace, t.TaskQueue, config.SafeDSN(dsn), t.APIKeyState(), toolsLine, identity,
		payloads, orOff(metricsURL), tracing(tel))
	<-ctx.Done()
	stopSignals() // a second signal ends the process at once
	fmt.Printf("stopping: no new tasks are taken; in-flight tool calls finish and record their outcome (up to %s)\n",
		sagaworker.StopTimeout(tools.Specs()))
	w.Stop()
	fmt.Println("stopped")
	return nil
}

func orOff(url string) string {
	if url == "" {
		return "off (--metrics-addr)"
	}
	return url
}

func tracing(t *telemetry.Telemetry) string {
	if t.Tracing {
		return "exported over OTLP (OTEL_EXPORTER_OTLP_*)"
	}
	return "off (set OTEL_EXPORTER_OTLP_ENDPOINT)"
}

// devMetricsPort is the metrics port of worker --dev on the default --port
// (telemetry.DefaultDevMetricsAddr's).
func devMetricsPort() int {
	_, p, _ := net.SplitHostPort(telemetry.DefaultDevMetricsAddr)
	n, _ := strconv.Atoi(p)
	return n
}

// portFlag turns a dev stack's "port taken" error into one that names the
// worker's flag that moves it.
func portFlag(err error) error {
	flags := map[string]string{"Port": "--port", "HTTPPort": "--http-port", "UIPort": "--ui-port",
		"CodecAddr": "--codec-addr", "SandboxAddr": "--sandbox-addr", "MetricsAddr": "--metrics-addr"}
	var pt *devserver.PortTakenError
	if errors.As(err, &pt) {
		return usageError{fmt.Errorf("the %s port %d is taken (another dev stack?): pass %s with another port (0 for a free one): %w", pt.What, pt.Port, flags[pt.Option], err)}
	}
	var ae *devstack.AddrError
	if errors.As(err, &ae) {
		return usageError{fmt.Errorf("%s is taken (another dev stack?): pass %s with another address (port 0 for a free one): %w", ae.Addr, flags[ae.Option], err)}
	}
	return err
}

// workerTools is the worker's registry: the tools of the catalogue files
// when any are given (the worker refuses to start on any problem in them,
// naming every one), else the demo tools against the sandbox at sandboxURL.
func workerTools(files []string, sandboxURL string) (*tool.Registry, error) {
	if len(files) == 0 {
		return demotools.Registry(demotools.SandboxConfig(sandboxURL))
	}
	cat, err := catalog.Load(files...)
	if err != nil {
		return nil, fmt.Errorf("--tools: %w", err)
	}
	reg, err := cat.Registry()
	if err != nil {
		return nil, fmt.Errorf("--tools: %w", err)
	}
	return reg, nil
}

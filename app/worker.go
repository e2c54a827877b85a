package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/version"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/telemetry"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Options are what a main gives the worker besides its flags.
type Options struct {
	// Name is the command's name in its usage (default "worker").
	Name string
	// Tools are Go tools (and their reversals) the worker runs besides the
	// catalogue files given with --tools: for what an HTTP template cannot
	// say (SMTP, gRPC, an SDK).
	Tools []tool.Tool
	// DemoTools, when set, gives the tools to run against --sandbox-url when
	// neither --tools nor Tools name any (agentsaga's own worker: the demo).
	DemoTools func(sandboxURL string) (*tool.Registry, error)
	// Dev, when set, runs --dev (agentsaga's own worker: the embedded
	// Temporal server, Web UI and sandbox). Without it --dev is refused, so
	// a team's worker does not build the Temporal server.
	Dev func(ctx context.Context, d Dev) error
	// Check, when set, is called by Run with the command's name before it
	// runs: a main refuses there what its Go tools lack (a base URL, a
	// credential), as a UsageError, before anything is dialled.
	Check func(command string) error
}

// Dev is what the worker's flags say for --dev, for Options.Dev.
type Dev struct {
	Temporal                config.Temporal
	DataDir, Ledger         string
	Port, UIPort, HTTPPort  int
	CodecAddr, MetricsAddr  string
	SandboxURL, SandboxAddr string
	Log                     *slog.Logger
	Operators               workflows.Verifier
	Keyring                 *codec.Keyring
	AllowPlaintext          bool
	// Tools are the tools of --tools (or $AGENTSAGA_TOOLS) and
	// Options.Tools, loaded and checked; nil when none were given, and the
	// dev stack runs the demo tools against its sandbox. ToolFiles names the
	// catalogue files they came from.
	Tools     *tool.Registry
	ToolFiles []string
	// Webhook is --notify-url's (nil without it).
	Webhook *activities.Webhook
}

// UsageError is a problem with the command line or its files: the command
// should exit 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the problem.
func (e UsageError) Unwrap() error { return e.Err }

// stopSignals restores the default handling of SIGINT and SIGTERM once the
// first one has started a graceful stop; Main sets it.
var stopSignals = func() {}

// Worker runs the worker command with args (flags as for agentsaga's worker;
// see the README) until ctx ends: it connects to Temporal, loads the tools
// (--tools catalogues and o.Tools), opens the ledger and runs AgentPlan,
// AgentSession and their activities, stopping gracefully. `worker replay
// [flags]` runs Replay instead.
func Worker(ctx context.Context, args []string, o Options) error {
	name := o.Name
	if name == "" {
		name = "worker"
	}
	if len(args) > 0 && args[0] == "replay" {
		return Replay(ctx, args[1:], os.Stdout)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
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
	allowUnverified := fs.Bool("allow-unverified-decisions", os.Getenv(config.EnvAllowUnverified) == "true", "without --operators outside --dev: run anyway, accepting approvals and resolutions by typed names nobody verified (each recorded as unverified; the start is logged as a warning; env "+config.EnvAllowUnverified+"=true)")
	notifyURL := fs.String("notify-url", os.Getenv(envNotifyURL), "POST a signed JSON notification (Slack-compatible) here when a question opens, ages past --notify-after, and is decided or expires; each event is posted until a 2xx (for --notify-retry-for), and receivers drop repeats by X-Agentsaga-Event-Id (env "+envNotifyURL+")")
	notifySecret := fs.String("notify-secret-file", os.Getenv(envNotifySecretFile), "the file holding the secret that signs notifications (HMAC-SHA256, at least 16 bytes; env "+envNotifySecretFile+"); required with --notify-url")
	notifyAfter := fs.Duration("notify-after", 30*time.Minute, "notify again when a question is still open this long after it opened; 0 turns it off (env "+envNotifyAfter+")")
	notifyRetryFor := fs.Duration("notify-retry-for", activities.DefaultNotifyRetryFor, "post a notification the webhook did not acknowledge (no 2xx) again, with backoff, for this long; then it is given up (env "+envNotifyRetryFor+")")
	notifyMaxBackoff := fs.Duration("notify-max-backoff", activities.DefaultNotifyMaxBackoff, "the longest wait between two posts of one notification; waits double from 1s up to it")
	consoleURL := fs.String("console-url", os.Getenv(envConsoleURL), "the operator console's base URL (starter console --addr): notifications then link to the question there, /q/{workflow}/{question} (env "+envConsoleURL+")")
	uiURL := fs.String("ui-url", os.Getenv(config.EnvUIURL), "the Temporal Web UI's base URL, for the links in notifications (env "+config.EnvUIURL+")")
	deploymentName := fs.String("deployment-name", os.Getenv(config.EnvDeploymentName), "run versioned (Temporal Worker Versioning) as a build of this worker deployment: each plan and session runs to its end on the build that started it; docs/production.md, \"Upgrading and rolling back\", moves builds (env "+config.EnvDeploymentName+"; unset: unversioned)")
	buildID := fs.String("build-id", os.Getenv(config.EnvBuildID), "with --deployment-name: this build's ID, at most 200 bytes (env "+config.EnvBuildID+"; default the binary's version, `worker --version`)")
	verbose := fs.Bool("v", false, "log every tool call")
	showVersion := fs.Bool("version", false, "print which agentsaga this is and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // the flags were printed
		}
		return UsageError{err}
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
	deployment, err := deploymentVersion(*deploymentName, *buildID, *dev)
	if err != nil {
		return UsageError{err}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	// One redaction function on every log line, the SDK's included.
	log := slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	ledgerDSN, err := config.LedgerDSN(ledgerFlag)
	if err != nil {
		return UsageError{err}
	}
	t.DataDir = *dataDir
	// A nil *operators.Keyring must not reach the interface: a typed nil
	// would be a non-nil Verifier that refuses every decision.
	var verifier workflows.Verifier
	if *operatorsFile == "" && !*dev {
		if !*allowUnverified {
			return UsageError{fmt.Errorf("no --operators file (env %s): anyone who can reach Temporal could approve a refund under any name; give --operators FILE (`starter operator keygen` prints its entries), or pass --allow-unverified-decisions to accept typed names, recorded as unverified", config.EnvOperators)}
		}
		log.Warn("decisions are not verified: --allow-unverified-decisions accepts typed names without --operators; give an operators file before real money")
	}
	if *operatorsFile != "" {
		ring, err := operators.Load(*operatorsFile)
		if err != nil {
			return UsageError{fmt.Errorf("--operators: %w", err)}
		}
		verifier = ring
		log.Info("decisions must be signed", "operators", ring.Names())
	}

	if v := os.Getenv(envNotifyAfter); v != "" && !cli.FlagGiven(fs, "notify-after") {
		d, err := time.ParseDuration(v)
		if err != nil {
			return UsageError{fmt.Errorf("%s=%q is not a duration such as 30m", envNotifyAfter, redact.String(v))}
		}
		*notifyAfter = d
	}
	if v := os.Getenv(envNotifyRetryFor); v != "" && !cli.FlagGiven(fs, "notify-retry-for") {
		d, err := time.ParseDuration(v)
		if err != nil {
			return UsageError{fmt.Errorf("%s=%q is not a duration such as 24h", envNotifyRetryFor, redact.String(v))}
		}
		*notifyRetryFor = d
	}
	hook, err := webhook(*notifyURL, *notifySecret, *notifyAfter, *uiURL, t.Namespace)
	if err != nil {
		return UsageError{err}
	}
	if hook != nil {
		if *notifyRetryFor < time.Minute || *notifyRetryFor > 30*24*time.Hour {
			return UsageError{fmt.Errorf("--notify-retry-for %v: give between 1m and 720h", *notifyRetryFor)}
		}
		if *notifyMaxBackoff < time.Second || *notifyMaxBackoff > *notifyRetryFor {
			return UsageError{fmt.Errorf("--notify-max-backoff %v: give between 1s and --notify-retry-for", *notifyMaxBackoff)}
		}
		hook.RetryFor, hook.MaxBackoff = *notifyRetryFor, *notifyMaxBackoff
		if *consoleURL != "" {
			u, err := url.Parse(*consoleURL)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" {
				return UsageError{fmt.Errorf("--console-url %q: give the console's http(s) base URL, such as http://127.0.0.1:8089", redact.String(*consoleURL))}
			}
			hook.ConsoleURL = strings.TrimRight(*consoleURL, "/")
		}
	}
	if len(toolFiles) == 0 {
		toolFiles = filepath.SplitList(os.Getenv(catalog.EnvTools))
	}
	if *dev {
		if o.Dev == nil {
			return UsageError{fmt.Errorf("--dev: this worker was built without the embedded dev stack: run agentsaga's own worker (go run ./worker --dev) for it")}
		}
		var ring *codec.Keyring
		if t.CodecKeys != "" {
			var err error
			if ring, _, err = t.Keyring(); err != nil {
				return UsageError{fmt.Errorf("--codec-keys: %w", err)}
			}
		}
		var tools *tool.Registry
		if len(toolFiles) > 0 || len(o.Tools) > 0 {
			// The catalogue is checked before anything starts: a missing or
			// invalid file stops --dev with the loader's messages.
			if tools, err = catalog.Tools(toolFiles, o.Tools...); err != nil {
				return UsageError{err}
			}
		}
		return o.Dev(ctx, Dev{
			Temporal: t, DataDir: *dataDir, Port: *port, UIPort: *uiPort, HTTPPort: *httpPort, CodecAddr: *codecAddr,
			Ledger: ledgerDSN, SandboxURL: *sandboxURL, SandboxAddr: *sandboxAddr, Log: log, Operators: verifier,
			MetricsAddr: *metricsAddr, Keyring: ring, AllowPlaintext: *allowPlaintext,
			Tools: tools, ToolFiles: toolFiles, Webhook: hook,
		})
	}

	if len(toolFiles) == 0 && len(o.Tools) == 0 && (*sandboxURL == "" || o.DemoTools == nil) {
		return UsageError{fmt.Errorf("no tools: give --tools FILE (a tool catalogue of your own APIs; env %s)%s", catalog.EnvTools, demoHint(o))}
	}
	dsn := ledgerDSN
	if dsn == "" {
		dsn = config.DefaultLedger(*dataDir)
		if err := os.MkdirAll(*dataDir, 0o750); err != nil {
			return fmt.Errorf("make data directory: %w", err)
		}
	}
	tools, err := workerTools(toolFiles, *sandboxURL, o)
	if err != nil {
		return UsageError{err}
	}
	store, err := ledgerdb.Open(ctx, dsn)
	if err != nil {
		return err
	}
	defer store.Close()
	opts, err := t.ClientOptions()
	if err != nil {
		return UsageError{err}
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
			return UsageError{fmt.Errorf("--metrics-addr: %w", err)}
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
	w, err := sagaworker.New(c, sagaworker.Options{TaskQueue: t.TaskQueue, Tools: tools, Ledger: store, Logger: log, Operators: verifier, Webhook: hook,
		Worker: worker.Options{Interceptors: tel.WorkerInterceptors()}, Deployment: deployment})
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
	toolsLine := strings.Join(tools.Names(), ", ")
	switch {
	case len(toolFiles) > 0:
		toolsLine += " (from " + strings.Join(toolFiles, ", ") + ")"
	case len(o.Tools) == 0:
		toolsLine = "the demo tools against the sandbox at " + *sandboxURL
	}
	fmt.Printf("agentsaga worker on %s namespace %s task queue %s, ledger %s, API key %s\ntools: %s\ndecisions: %s\npayloads: %s\nmetrics: %s, traces: %s\nversioning: %s\n", t.Address, t.Namespace, t.TaskQueue, config.SafeDSN(dsn), t.APIKeyState(), toolsLine, identity,
		payloads, orOff(metricsURL), tracing(tel), versioning(deployment))
	<-ctx.Done()
	stopSignals() // a second signal ends the process at once
	fmt.Printf("stopping: no new tasks are taken; in-flight tool calls finish and record their outcome (up to %s)\n",
		sagaworker.StopTimeout(tools.Specs()))
	w.Stop()
	fmt.Println("stopped")
	return nil
}

// deploymentVersion is the worker deployment version the flags ask for:
// none without --deployment-name; the build ID defaults to the binary's
// version, refused when the binary has none ("devel") or was built from a
// tree with uncommitted changes ("+dirty"): two different builds would share
// it.
func deploymentVersion(name, buildID string, dev bool) (worker.WorkerDeploymentVersion, error) {
	if name == "" {
		if buildID != "" {
			return worker.WorkerDeploymentVersion{}, fmt.Errorf("--build-id without --deployment-name (env %s): give the deployment's name too, or neither for an unversioned worker", config.EnvDeploymentName)
		}
		return worker.WorkerDeploymentVersion{}, nil
	}
	if dev {
		return worker.WorkerDeploymentVersion{}, errors.New("--deployment-name: worker --dev runs one build on its own server; run versioned workers against a cluster")
	}
	if buildID == "" {
		buildID = version.String()
		switch {
		case buildID == "devel":
			return worker.WorkerDeploymentVersion{}, fmt.Errorf("--build-id: this binary carries no version (it was built without VCS information or -ldflags -X %s.Version=...): give --build-id (env %s)", version.Module+"/internal/version", config.EnvBuildID)
		case strings.HasSuffix(buildID, "+dirty"):
			// Two builds of one commit with different edits would share it.
			return worker.WorkerDeploymentVersion{}, fmt.Errorf("--build-id: this binary's version %s was built from a tree with uncommitted changes, which another build may share: give --build-id (env %s)", buildID, config.EnvBuildID)
		}
	}
	v := worker.WorkerDeploymentVersion{DeploymentName: name, BuildID: buildID}
	if err := sagaworker.CheckDeployment(v); err != nil {
		return worker.WorkerDeploymentVersion{}, fmt.Errorf("--deployment-name/--build-id: %w", err)
	}
	return v, nil
}

func versioning(v worker.WorkerDeploymentVersion) string {
	if v.DeploymentName == "" {
		return "off (unversioned: every task of the queue; --deployment-name runs versioned)"
	}
	return fmt.Sprintf("deployment %s build %s, plans and sessions pinned to the build that started them", v.DeploymentName, v.BuildID)
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

// workerTools is the worker's registry: the tools of the catalogue files
// and Options.Tools together (the worker refuses to start on any problem in
// them, naming every one), else Options.DemoTools against sandboxURL.
func workerTools(files []string, sandboxURL string, o Options) (*tool.Registry, error) {
	if len(files) == 0 && len(o.Tools) == 0 {
		return o.DemoTools(sandboxURL)
	}
	return catalog.Tools(files, o.Tools...)
}

func demoHint(o Options) string {
	if o.DemoTools == nil {
		return ", or pass your Go tools in app.Options.Tools"
	}
	return fmt.Sprintf(", or --sandbox-url (env %s) for the demo tools", config.EnvSandboxURL)
}

// devMetricsPort is the metrics port of worker --dev on the default --port
// (telemetry.DefaultDevMetricsAddr's).
func devMetricsPort() int {
	_, p, _ := net.SplitHostPort(telemetry.DefaultDevMetricsAddr)
	n, _ := strconv.Atoi(p)
	return n
}

// Environment variables of the worker's notifications.
const (
	envNotifyURL        = "AGENTSAGA_NOTIFY_URL"
	envNotifySecretFile = "AGENTSAGA_NOTIFY_SECRET_FILE"
	envNotifyAfter      = "AGENTSAGA_NOTIFY_AFTER"
	envNotifyRetryFor   = "AGENTSAGA_NOTIFY_RETRY_FOR"
	envConsoleURL       = "AGENTSAGA_CONSOLE_URL"
)

// minNotifySecret is the shortest secret that signs notifications.
const minNotifySecret = 16

// webhook checks the notification flags; nil when --notify-url is not set.
func webhook(rawURL, secretFile string, after time.Duration, uiURL, namespace string) (*activities.Webhook, error) {
	if rawURL == "" {
		if secretFile != "" {
			return nil, errors.New("--notify-secret-file without --notify-url: give the webhook's URL too")
		}
		return nil, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("--notify-url %s is not an http(s) URL", activities.MaskURL(rawURL))
	}
	if u.User != nil {
		return nil, errors.New("--notify-url holds credentials: the secret goes in --notify-secret-file")
	}
	if secretFile == "" {
		return nil, fmt.Errorf("--notify-url needs --notify-secret-file (env %s): every notification is signed", envNotifySecretFile)
	}
	b, err := os.ReadFile(secretFile)
	if err != nil {
		return nil, fmt.Errorf("--notify-secret-file: %w", err)
	}
	secret := []byte(strings.TrimRight(string(b), "\r\n"))
	if len(secret) < minNotifySecret {
		return nil, fmt.Errorf("--notify-secret-file: the secret is %d bytes, at least %d are needed", len(secret), minNotifySecret)
	}
	if after < 0 {
		return nil, errors.New("--notify-after must not be negative (0 turns the reminder off)")
	}
	return &activities.Webhook{URL: rawURL, Secret: secret, After: after, UIURL: strings.TrimRight(uiURL, "/"), Namespace: namespace}, nil
}

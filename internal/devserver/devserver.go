// Package devserver runs a real Temporal server inside the current process,
// for development, demos and integration tests.
//
// The server is the genuine go.temporal.io/server (frontend, history, matching
// and worker services) on SQLite: a file under Options.DataDir, so workflows
// survive a restart, or an in-memory database when DataDir is empty. Next to it
// runs the Temporal Web UI (github.com/temporalio/ui-server, assets embedded).
// At start the namespace is created and the product's search attributes are
// registered through the operator service, and Start returns only when the
// frontend answers, the namespace is usable and the UI serves pages.
//
// Every internal service gets its own free loopback port, so two servers can run
// in one process (handy in tests). This is not a production deployment; use the
// repository's docker-compose.yml for that.
package devserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/temporal"
)

// Defaults applied by Start to the zero values of Options.
const (
	DefaultHost      = "127.0.0.1"
	DefaultNamespace = "default"
)

// NoUI is the Options.UIPort value that starts the server without the Web UI.
const NoUI = -1

// defaultStartTimeout bounds Start when the caller's context has no deadline.
const defaultStartTimeout = 2 * time.Minute

// Options configure Start. The zero value is a usable in-memory server on
// free loopback ports with the Web UI.
type Options struct {
	// DataDir is the directory that holds the SQLite database (temporal.db).
	// It is created if missing. Empty means an in-memory database that is lost
	// when the process exits.
	DataDir string
	// Host is the address the frontend and the UI listen on. Default 127.0.0.1.
	// Internal services always listen on 127.0.0.1.
	Host string
	// Port is the frontend gRPC port. 0 picks a free port. The worker's --dev
	// mode uses 7233, the port Temporal tools expect.
	Port int
	// HTTPPort is the frontend's HTTP API port. 0 picks a free port.
	HTTPPort int
	// UIPort is the Web UI's HTTP port. 0 picks a free port; NoUI (-1) starts
	// no UI. The worker's --dev mode uses 8233.
	UIPort int
	// Namespace is created at start if it does not exist. Default "default".
	Namespace string
	// SearchAttributes are registered on Namespace at start (names to types).
	// Attributes that already exist with the same type are left alone.
	SearchAttributes map[string]enums.IndexedValueType
	// Logger receives the server's own logs at warn level and above (the
	// server is noisy below that). Nil discards them.
	Logger *slog.Logger
	// UICodec points the Web UI at a codec server, so the browser decodes
	// encrypted payloads; the zero value configures none.
	UICodec UICodec
	// DynamicConfig sets server dynamic config keys (such as
	// "matching.numTaskqueueReadPartitions") on top of the dev defaults
	// (see DevDynamicConfig); a key given here wins. Values are of the
	// setting's type (int, bool, float64, time.Duration, string).
	DynamicConfig map[string]any
	// TLS, when set, makes the frontend require mutual TLS: clients must
	// present a certificate CAFile signed. Nil serves plain gRPC.
	TLS *TLS
	// ServeMetrics serves the server's own metrics (requests by service and
	// operation, persistence and visibility requests, latencies) for
	// Prometheus at http://127.0.0.1:MetricsPort/metrics (MetricsURL).
	// Off by default: recording them costs the server CPU.
	ServeMetrics bool
	// MetricsPort is the metrics endpoint's port with ServeMetrics. 0 picks
	// a free port.
	MetricsPort int
}

// TLS is the frontend's mutual TLS (Options.TLS), as a production cluster
// runs it. CertFile must be valid for both server and client use: the
// server's own system workers and Start's readiness probe present it too
// (`starter cluster certs` makes such a temporal.pem).
type TLS struct {
	CertFile, KeyFile string
	// CAFile is the CA client certificates must be signed by, and the one
	// the probe and the system workers trust the frontend with.
	CAFile string
	// ServerName is the name the frontend's certificate is checked
	// against; it must be among its SANs. Default "localhost".
	ServerName string
}

// ClientTLS returns the tls.Config the server's own clients use (a client
// certificate from CertFile, the CA of CAFile, ServerName).
func (t *TLS) ClientTLS() (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("devserver: TLS.CertFile/KeyFile: %w", err)
	}
	pem, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("devserver: TLS.CAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("devserver: TLS.CAFile %s holds no PEM certificate", t.CAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}, nil
}

// UICodec is the Web UI's codec server setting (ui-server's codec section).
// The browser calls Endpoint+"/decode" itself, so the endpoint must answer
// the UI's origin with CORS headers.
type UICodec struct {
	// Endpoint is the codec server's base URL, such as http://127.0.0.1:8234.
	Endpoint string
	// IncludeCredentials makes the browser send its cookies for Endpoint
	// (how a codec server's login cookie reaches it).
	IncludeCredentials bool
	// PassAccessToken makes the UI send its login's access token as a
	// bearer token; the UI does so only to an https endpoint and only with
	// UI login (auth) on.
	PassAccessToken bool
}

// Server is a running embedded Temporal server, with its Web UI when one was
// asked for. Its methods are safe for concurrent use.
type Server struct {
	temporal  temporal.Server
	release   func() // frees the data directory for another Start
	logger    serverLogger
	ui        *uiserver.Server
	uiDone    chan error   // receives the UI server's exit; nil without UI
	uiProxy   *http.Server // the Host-checking front of the UI, on its port
	frontend  string
	httpAPI   string
	namespace string
	uiURL     string
	metrics   string // "" without ServeMetrics
	config    *devConfig
	tls       *TLS // nil: plain gRPC

	stopOnce sync.Once
	stopErr  error
}

// Start starts a Temporal server and, unless opts.UIPort is NoUI, the Web UI.
// It returns once the frontend answers, the namespace exists with its search
// attributes and the UI serves pages; ctx bounds that wait (two minutes when
// ctx has no deadline). The caller must call Stop.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := opts.applyDefaults(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	logger := newServerLogger(opts.Logger)

	release, err := claimDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	sqlCfg, err := prepareStore(opts)
	if err != nil {
		release()
		return nil, err
	}
	var (
		srv    temporal.Server
		ports  ports
		uiHold *net.TCPListener
		dc     = newDevConfig(opts.DynamicConfig)
	)
	dc.allowLoopbackHostsOnly(opts.Host)
	for attempt := 1; ; attempt++ {
		srv, ports, uiHold, err = startTemporal(opts, sqlCfg, logger, dc)
		if err == nil {
			break
		}
		if attempt == maxPortAttempts || !errors.Is(err, errPortTaken) {
			release()
			return nil, err
		}
		// Another socket took a chosen port before the server bound it:
		// choose again.
		logger.l.Warn("devserver: a chosen port was taken before the server bound it; choosing new ports", "attempt", attempt, "error", err)
	}

	s := &Server{
		temporal:  srv,
		release:   release,
		logger:    logger,
		frontend:  net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(ports.frontend)),
		httpAPI:   net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(ports.frontendHTTP)),
		namespace: opts.Namespace,
		config:    dc,
		tls:       opts.TLS,
	}
	if opts.ServeMetrics {
		s.metrics = "http://" + net.JoinHostPort(internalHost, strconv.Itoa(ports.metrics)) + "/metrics"
	}
	if err := s.awaitReady(ctx, opts.SearchAttributes); err != nil {
		closeHeld(uiHold)
		return nil, errors.Join(err, s.Stop())
	}
	if uiHold != nil {
		if err := s.startUI(ctx, opts.Host, uiHold, opts.UICodec); err != nil {
			return nil, errors.Join(err, s.Stop())
		}
	}
	return s, nil
}

// FrontendAddr returns the frontend's gRPC address as host:port, ready to be
// used as client.Options.HostPort. When the server listens on all interfaces,
// the host is the loopback address.
func (s *Server) FrontendAddr() string { return s.frontend }

// Namespace returns the namespace created at start.
func (s *Server) Namespace() string { return s.namespace }

// FrontendHTTPAddr returns the host:port of the frontend's HTTP API (the
// same API as gRPC, as JSON over HTTP).
func (s *Server) FrontendHTTPAddr() string { return s.httpAPI }

// UIURL returns the Web UI's base URL, such as http://127.0.0.1:8233, or ""
// when the server runs without UI.
func (s *Server) UIURL() string { return s.uiURL }

// MetricsURL returns the address of the server's Prometheus metrics, such as
// http://127.0.0.1:9090/metrics, or "" without Options.ServeMetrics.
func (s *Server) MetricsURL() string { return s.metrics }

// Stop stops the UI and the server and waits for them to finish. Calling it
// more than once returns the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.logger.stopping.Store(true)
		var errs []error
		if s.uiProxy != nil {
			_ = s.uiProxy.Close()
		}
		if s.ui != nil {
			s.ui.Stop()
			if err := <-s.uiDone; err != nil {
				errs = append(errs, fmt.Errorf("devserver: stop the Web UI: %w", err))
			}
		}
		if err := s.temporal.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("devserver: stop the Temporal server: %w", err))
		}
		s.release()
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// maxPortAttempts bounds how often Start chooses new ports when one it chose
// was taken before the server could bind it.
const maxPortAttempts = 3

// errPortTaken marks a start that failed because a chosen port was taken.
var errPortTaken = errors.New("a port chosen for the server was taken before the server bound it")

// testHookPortsChosen, when set, runs after the ports are chosen and before
// the server binds them (tests take a port there).
var testHookPortsChosen func(*ports)

// startTemporal chooses ports, builds the server and starts it. Unless the UI
// is off, the UI's port is returned still held, for startUI.
//
// The server reports what it cannot recover from (a port it cannot bind, say)
// through serverLogger.Fatal, which panics; while the server is built and
// started that happens on this goroutine, and is returned here as an error,
// wrapping errPortTaken when a port was in use. Any other panic on the way is
// returned with its stack, after an attempt to stop what had started.
func startTemporal(opts Options, sqlCfg *config.SQL, logger serverLogger, dc *devConfig) (srv temporal.Server, p ports, uiHold *net.TCPListener, err error) {
	p, uiHold, err = pickPorts(opts)
	if err != nil {
		return nil, p, nil, err
	}
	if testHookPortsChosen != nil {
		testHookPortsChosen(&p)
	}
	defer func() {
		if err != nil {
			closeHeld(uiHold)
			uiHold = nil
		}
	}()
	serverOpts, err := buildServerOptions(opts, p, sqlCfg, logger, dc)
	if err != nil {
		return nil, p, nil, err
	}

	stage := "build"
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if srv != nil {
			stopAfterFailure(srv, logger)
		}
		srv = nil
		var fatal *fatalError
		if f, ok := r.(*fatalError); ok {
			fatal = f
		} else if e, ok := r.(error); ok {
			errors.As(e, &fatal) // fx may wrap what it recovered
		}
		switch {
		case fatal != nil && fatal.portInUse():
			err = fmt.Errorf("devserver: %s the Temporal server: %w: %w", stage, errPortTaken, fatal)
		case fatal != nil:
			err = fmt.Errorf("devserver: %s the Temporal server: %w; see the server log (Options.Logger)", stage, fatal)
		default:
			err = fmt.Errorf("devserver: %s the Temporal server: panic: %v; start again, and report it with this stack if it recurs:\n%s", stage, r, debug.Stack())
		}
	}()
	srv, err = temporal.NewServer(serverOpts...)
	if err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			return nil, p, nil, fmt.Errorf("devserver: build the Temporal server: %w: %w", errPortTaken, err)
		}
		return nil, p, nil, fmt.Errorf("devserver: build the Temporal server: %w", err)
	}
	stage = "start"
	if err := srv.Start(); err != nil {
		stopAfterFailure(srv, logger)
		if strings.Contains(err.Error(), "address already in use") {
			return nil, p, nil, fmt.Errorf("devserver: start the Temporal server: %w: %w", errPortTaken, err)
		}
		return nil, p, nil, fmt.Errorf("devserver: start the Temporal server: %w", err)
	}
	return srv, p, uiHold, nil
}

// stopAfterFailure stops a server whose build or start failed, as far as it
// can be stopped: it may itself panic, which is logged, not raised.
func stopAfterFailure(srv temporal.Server, logger serverLogger) {
	defer func() {
		if r := recover(); r != nil {
			logger.l.Error("devserver: stopping the Temporal server after a failed start panicked", "panic", r)
		}
	}()
	if err := srv.Stop(); err != nil {
		logger.l.Error("devserver: stopping the Temporal server after a failed start", "error", err)
	}
}

func closeHeld(l *net.TCPListener) {
	if l != nil {
		_ = l.Close()
	}
}

// dataDirs holds the data directories of the servers running in this process.
var dataDirs = struct {
	sync.Mutex
	inUse map[string]bool
}{inUse: map[string]bool{}}

// claimDataDir makes sure no other server in this process uses dir (two
// servers on one database would fight over it) and returns the release func.
func claimDataDir(dir string) (func(), error) {
	if dir == "" {
		return func() {}, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("devserver: resolve the data directory %q: %w", dir, err)
	}
	dataDirs.Lock()
	defer dataDirs.Unlock()
	if dataDirs.inUse[abs] {
		return nil, fmt.Errorf("devserver: data directory %s is in use by another server in this process; Stop it first or use another DataDir", abs)
	}
	dataDirs.inUse[abs] = true
	return func() {
		dataDirs.Lock()
		defer dataDirs.Unlock()
		delete(dataDirs.inUse, abs)
	}, nil
}

func (o *Options) applyDefaults() error {
	if o.Host == "" || o.Host == "localhost" {
		o.Host = DefaultHost
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("devserver: frontend port %d is out of range; use 0 for a free port or 1-65535", o.Port)
	}
	if o.HTTPPort < 0 || o.HTTPPort > 65535 {
		return fmt.Errorf("devserver: frontend HTTP port %d is out of range; use 0 for a free port or 1-65535", o.HTTPPort)
	}
	if o.UIPort < NoUI || o.UIPort > 65535 {
		return fmt.Errorf("devserver: UI port %d is out of range; use 0 for a free port, -1 for no UI or 1-65535", o.UIPort)
	}
	if o.MetricsPort < 0 || o.MetricsPort > 65535 {
		return fmt.Errorf("devserver: metrics port %d is out of range; use 0 for a free port or 1-65535", o.MetricsPort)
	}
	if o.MetricsPort != 0 && !o.ServeMetrics {
		return fmt.Errorf("devserver: MetricsPort %d is set without ServeMetrics; set ServeMetrics to serve the metrics", o.MetricsPort)
	}
	if net.ParseIP(o.Host) == nil {
		return fmt.Errorf("devserver: host %q is not an IP address; use an address such as 127.0.0.1 or 0.0.0.0", o.Host)
	}
	if o.TLS != nil {
		if o.UIPort != NoUI {
			return fmt.Errorf("devserver: TLS with the Web UI is not supported; set UIPort to NoUI")
		}
		if o.TLS.CertFile == "" || o.TLS.KeyFile == "" || o.TLS.CAFile == "" {
			return fmt.Errorf("devserver: TLS needs CertFile, KeyFile and CAFile")
		}
		if o.TLS.ServerName == "" {
			o.TLS.ServerName = "localhost"
		}
		if _, err := o.TLS.ClientTLS(); err != nil {
			return err
		}
	}
	return nil
}

// dialHost turns a listen host into one a client on this machine can dial.
func dialHost(host string) string {
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			return "127.0.0.1"
		}
		return "::1"
	}
	return host
}

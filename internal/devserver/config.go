package devserver

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/metrics"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"

	"github.com/agentsaga/agentsaga/internal/loopback"
	"github.com/agentsaga/agentsaga/internal/privfile"
)

const (
	// DatabaseFile is the name of the SQLite file Start keeps under Options.DataDir.
	DatabaseFile = "temporal.db"

	clusterName   = "active"
	internalHost  = "127.0.0.1"
	storeName     = "sqlite-default"
	numShards     = 1
	failoverIncr  = 10
	initialFailov = 1
)

// ports are the listen ports of one server: the frontend's (public) and the
// internal services', all chosen before the server starts.
type ports struct {
	frontend, frontendHTTP, history, matching, worker int
	ui                                                int // 0 without UI
	metrics                                           int // 0 without metrics
}

// pickPorts chooses the ports of one server. Every probe listener stays open
// until all ports are chosen, so the kernel cannot hand the same free port out
// twice (two services on one port: the second cannot bind). Ports the kernel
// chose are then parked in TIME_WAIT (see parkPort) so that no other socket in
// the meantime, such as an outgoing connection's local port, is given them.
//
// The Web UI's probe is returned open, unless the UI is off: the UI starts
// seconds later, after the server, and startUI closes it just before.
func pickPorts(opts Options) (p ports, uiHold *net.TCPListener, err error) {
	var probes []*portProbe
	defer func() {
		for _, pr := range probes {
			if cerr := pr.release(); cerr != nil && err == nil {
				err = cerr
			}
		}
		if err != nil {
			closeHeld(uiHold)
			uiHold = nil
		}
	}()
	probe := func(dst *int, host string, want int, what, option string) error {
		pr, err := newPortProbe(host, want, what, option)
		if err != nil {
			return err
		}
		probes = append(probes, pr)
		*dst = pr.port
		return nil
	}
	if err := probe(&p.frontend, opts.Host, opts.Port, "frontend", "Port"); err != nil {
		return p, nil, err
	}
	// The frontend's HTTP API (and with it Nexus) listens next to its gRPC port.
	if err := probe(&p.frontendHTTP, opts.Host, opts.HTTPPort, "frontend HTTP", "HTTPPort"); err != nil {
		return p, nil, err
	}
	for _, port := range []*int{&p.history, &p.matching, &p.worker} {
		if err := probe(port, internalHost, 0, "internal", ""); err != nil {
			return p, nil, err
		}
	}
	if opts.ServeMetrics {
		if err := probe(&p.metrics, internalHost, opts.MetricsPort, "metrics", "MetricsPort"); err != nil {
			return p, nil, err
		}
	}
	if opts.UIPort != NoUI {
		ui, err := newPortProbe(opts.Host, opts.UIPort, "Web UI", "UIPort")
		if err != nil {
			return p, nil, err
		}
		p.ui, uiHold = ui.port, ui.l
	}
	return p, uiHold, nil
}

// PortTakenError is a port asked for in Options that another process holds.
// Option names the field of Options that set it (Port, HTTPPort, UIPort), so
// a command can name its own flag.
type PortTakenError struct {
	What   string // "frontend", "frontend HTTP", "Web UI"
	Port   int
	Host   string
	Option string
	Err    error
}

func (e *PortTakenError) Error() string {
	return fmt.Sprintf("devserver: %s port %d on %s is not free (another Temporal dev server?); stop that process or set Options.%s to another port, 0 for any: %v",
		e.What, e.Port, e.Host, e.Option, e.Err)
}

func (e *PortTakenError) Unwrap() error { return e.Err }

// portProbe is a listener held on a port while the other ports are chosen.
type portProbe struct {
	l      *net.TCPListener
	port   int
	chosen bool // the kernel chose the port (want was 0)
}

// newPortProbe listens on want when it is free on host, or on a free port
// chosen by the kernel when want is 0.
func newPortProbe(host string, want int, what, option string) (*portProbe, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(want)))
	if err != nil {
		if want != 0 {
			return nil, &PortTakenError{What: what, Port: want, Host: host, Option: option, Err: err}
		}
		return nil, fmt.Errorf("devserver: find a free %s port on %s: %w", what, host, err)
	}
	tl := l.(*net.TCPListener)
	return &portProbe{l: tl, port: tl.Addr().(*net.TCPAddr).Port, chosen: want == 0}, nil
}

// release closes the probe so the server can bind the port moments later
// (the server's listeners set SO_REUSEADDR). A kernel-chosen port is parked
// first.
func (pr *portProbe) release() error {
	if pr.chosen {
		parkPort(pr.l)
	}
	if err := pr.l.Close(); err != nil {
		return fmt.Errorf("devserver: release the probe listener on port %d: %w", pr.port, err)
	}
	return nil
}

// parkPort connects to l and closes the accepted end first, which leaves that
// end, bound to l's port, in TIME_WAIT for a minute or so. While it lasts the
// kernel gives the port to no bind(0) or outgoing connection, yet a listener
// with SO_REUSEADDR (the server's) can still bind it. Temporal's own CLI dev
// server picks its ports the same way. Parking is best effort: on failure the
// port is merely as exposed as a plain probe.
func parkPort(l *net.TCPListener) {
	c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	_ = l.SetDeadline(time.Now().Add(time.Second))
	s, err := l.Accept()
	if err != nil {
		return
	}
	_ = s.Close() // this end closes first: it is the one left in TIME_WAIT
	// Wait for the peer to see the close, so that its own close completes
	// the handshake and moves the accepted end from FIN_WAIT to TIME_WAIT.
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = c.Read(make([]byte, 1))
}

// prepareStore returns the SQLite settings and makes sure the database has the
// schema and the namespace (with the search attributes) before the server
// opens it, so the namespace is usable as soon as the frontend answers.
func prepareStore(opts Options) (*config.SQL, error) {
	sqlCfg := &config.SQL{PluginName: sqliteplugin.PluginName}
	if opts.DataDir == "" {
		// A unique name per server: in-memory databases with a shared cache are
		// shared by name inside a process, and two servers must not meet.
		sqlCfg.DatabaseName = "agentsaga-" + strconv.FormatUint(rand.Uint64(), 36)
		sqlCfg.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
	} else {
		if err := os.MkdirAll(opts.DataDir, 0o750); err != nil {
			return nil, fmt.Errorf("devserver: create the data directory: %w; choose a writable DataDir", err)
		}
		path := filepath.Join(opts.DataDir, DatabaseFile)
		sqlCfg.DatabaseName = path
		// Write-ahead log with synchronous=FULL: every commit is still
		// fsynced before it returns (durable across a crash or restart),
		// but one fsync of the log instead of the rollback journal's
		// journal-then-database pair, and readers do not block the writer.
		// Twice the workflows per second at ten concurrent (BENCHMARKS.md).
		// The database is temporal.db plus temporal.db-wal and -shm: copy
		// the three together, or stop the server first (it checkpoints).
		sqlCfg.ConnectAttributes = map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "full"}
		_, statErr := os.Stat(path)
		if statErr != nil && !errors.Is(statErr, fs.ErrNotExist) {
			return nil, fmt.Errorf("devserver: check the database file: %w", statErr)
		}
		// Histories are customer data: the file (and with it its -wal and
		// -shm) is owner-only, whatever the directory or the umask.
		if err := privfile.Ensure(path); err != nil {
			return nil, fmt.Errorf("devserver: %w", err)
		}
		if errors.Is(statErr, fs.ErrNotExist) {
			if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
				// Leave no half-made file behind: the next start would take it for a database.
				_ = os.Remove(path)
				return nil, fmt.Errorf("devserver: create the Temporal schema in %s: %w", path, err)
			}
		}
	}

	ns, err := sqliteschema.NewNamespaceConfig(clusterName, opts.Namespace, false, opts.SearchAttributes)
	if err != nil {
		return nil, fmt.Errorf("devserver: namespace %q with the given search attributes: %w; use fewer attributes of that type", opts.Namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(sqlCfg, ns); err != nil {
		return nil, fmt.Errorf("devserver: create namespace %q in %s (is the file a Temporal database?): %w", opts.Namespace, sqlCfg.DatabaseName, err)
	}
	return sqlCfg, nil
}

func buildServerOptions(opts Options, p ports, sqlCfg *config.SQL, logger log.Logger, dc *devConfig) ([]temporal.ServerOption, error) {
	frontendAddr := net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(p.frontend))
	frontendHTTPAddr := net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(p.frontendHTTP))
	internal := func(port int) string { return net.JoinHostPort(internalHost, strconv.Itoa(port)) }

	cfg := &config.Config{}
	cfg.Global.Membership = config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: internalHost}
	// Metrics stay off unless asked for (a nil config is a no-op handler);
	// pprof stays off (port 0).
	if opts.ServeMetrics {
		cfg.Global.Metrics = &metrics.Config{Prometheus: &metrics.PrometheusConfig{
			Framework: metrics.FrameworkOpentelemetry, ListenAddress: internal(p.metrics), HandlerPath: "/metrics",
		}}
	}
	cfg.Persistence = config.Persistence{
		DefaultStore:     storeName,
		VisibilityStore:  storeName,
		NumHistoryShards: numShards,
		DataStores:       map[string]config.DataStore{storeName: {SQL: sqlCfg}},
	}
	cfg.ClusterMetadata = &cluster.Config{
		EnableGlobalNamespace:    false,
		FailoverVersionIncrement: failoverIncr,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: initialFailov,
				RPCAddress:             frontendAddr,
				HTTPAddress:            frontendHTTPAddr,
			},
		},
	}
	cfg.DCRedirectionPolicy.Policy = "noop"
	cfg.Services = map[string]config.Service{
		string(primitives.FrontendService): {RPC: config.RPC{GRPCPort: p.frontend, HTTPPort: p.frontendHTTP, BindOnIP: opts.Host}},
		string(primitives.HistoryService):  {RPC: config.RPC{GRPCPort: p.history, BindOnIP: internalHost}},
		string(primitives.MatchingService): {RPC: config.RPC{GRPCPort: p.matching, BindOnIP: internalHost}},
		string(primitives.WorkerService):   {RPC: config.RPC{GRPCPort: p.worker, BindOnIP: internalHost}},
	}
	cfg.Archival.History.State = "disabled"
	cfg.Archival.Visibility.State = "disabled"
	cfg.NamespaceDefaults.Archival.History.State = "disabled"
	cfg.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The server's own system workers dial the frontend through this address.
	cfg.PublicClient.HostPort = frontendAddr
	if t := opts.TLS; t != nil {
		// The frontend requires client certificates; the system workers
		// present the server's. Internal services stay on loopback.
		client := config.ClientTLS{ServerName: t.ServerName, RootCAFiles: []string{t.CAFile}}
		cfg.Global.TLS.Frontend = config.GroupTLS{
			Server: config.ServerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile, ClientCAFiles: []string{t.CAFile}, RequireClientAuth: true},
			Client: client,
		}
		cfg.Global.TLS.SystemWorker = config.WorkerTLS{CertFile: t.CertFile, KeyFile: t.KeyFile, Client: client}
	}

	authorizer, err := authorization.GetAuthorizerFromConfig(&cfg.Global.Authorization)
	if err != nil {
		return nil, fmt.Errorf("devserver: build the authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&cfg.Global.Authorization, logger)
	if err != nil {
		return nil, fmt.Errorf("devserver: build the claim mapper: %w", err)
	}

	return []temporal.ServerOption{
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: static.SingleLocalHost(frontendAddr),
			primitives.HistoryService:  static.SingleLocalHost(internal(p.history)),
			primitives.MatchingService: static.SingleLocalHost(internal(p.matching)),
			primitives.WorkerService:   static.SingleLocalHost(internal(p.worker)),
		}),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dc),
	}, nil
}

// devDynamicConfig tunes the server for one developer and a handful of plans:
// a UI that lists and counts often, search attributes visible at once, and
// no waiting interval between a workflow task being written and a worker
// receiving it. Each key, and what it costs (see BENCHMARKS.md):
//
//   - history.transferProcessorMaxPollRPS 20 -> 1000: the history service
//     reads its transfer queue (the tasks that hand workflow tasks to
//     matching) at most this often per shard. With the dev server's single
//     shard the default 20/s made every workflow task wait up to 50 ms
//     (about 44 ms measured) before a worker could poll it, twice per
//     one-activity workflow: that was the "100 ms per step". The reader is
//     woken by new tasks, so the higher limit costs nothing when idle; the
//     tasks themselves are written in the same transaction as before.
//   - matching.numTaskqueueReadPartitions / WritePartitions 4 -> 1: one
//     matching host has nothing to spread partitions over, and with four a
//     task written to a partition without a waiting poller had to be
//     forwarded to the root (rate-limited), or the workers' polls sat on
//     empty partitions while the task waited on another until a long poll
//     expired (the 20 s stalls, plain workflows too; reading four and
//     writing one still stalled). Caveat: a database last run by an older
//     devserver with a backlog in partitions 1-3 leaves those tasks unread.
//   - history.longPollExpirationInterval 20 s -> 200 ms: a result wait
//     (GetWorkflowExecutionHistory waiting for the close event) is a long
//     poll on the history service fed by an in-memory notifier whose
//     per-waiter channel holds one notification and drops the next (a
//     constant in the server); when the last notifications of a run reach
//     it back to back (about 1 wait in 50 to 100 here, plain workflows too)
//     the close is dropped and the wait sat out the full 20 s. A short poll
//     re-reads the (cached) mutable state every 200 ms, which bounds that
//     stall; the cost is one cached read per waiting caller per 200 ms.
//     Update waits use the same interval as their server-side timeout and
//     are re-polled by the SDK.
//   - system.forceSearchAttributesCacheRefreshOnRead: true while Start
//     registers the search attributes (each service then reads them from
//     the store, so they are usable at once), then false; Start returns
//     only after a probe workflow started with, and upserting, every one
//     of them has worked on the caches alone (see settleSearchAttributes).
//     Left on, every start
//     carrying search attributes, every upsert and every visibility record
//     read the namespace and the attribute types from the store: about
//     8 ms per three-step plan on this machine. Attributes added later by
//     other means reach the services' caches within their refresh
//     intervals (namespaces: 1 s here; attribute types: up to 60 s).
//   - frontend.namespaceRPS.visibility, history.cacheMaxSize (host level),
//     namespace cache refresh: a UI that lists often, many open plans, and
//     a new namespace usable within a second.
func devDynamicConfig() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8192,
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():      true,
		dynamicconfig.NamespaceCacheRefreshInterval.Key():                time.Second,
		dynamicconfig.TransferProcessorMaxPollRPS.Key():                  1000,
		dynamicconfig.HistoryLongPollExpirationInterval.Key():            200 * time.Millisecond,
		dynamicconfig.MatchingNumTaskqueueReadPartitions.Key():           1,
		dynamicconfig.MatchingNumTaskqueueWritePartitions.Key():          1,
	}
}

// DevDynamicConfig returns the dynamic config keys Start sets by default,
// by name, for documentation and tests (Options.DynamicConfig overrides
// them). The forced search-attribute refresh is reported as the sentence
// saying when it is on.
func DevDynamicConfig() map[string]any {
	out := map[string]any{}
	for k, v := range devDynamicConfig() {
		out[k.String()] = v
	}
	out[forceSARefresh.String()] = "true while Start registers search attributes, then false"
	return out
}

// forceSARefresh is the key devConfig switches off once the search
// attributes are settled.
var forceSARefresh = dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key()

// dynamicConfig is the dev defaults with overrides applied on top.
func dynamicConfig(overrides map[string]any) dynamicconfig.StaticClient {
	c := devDynamicConfig()
	for k, v := range overrides {
		c[dynamicconfig.MakeKey(k)] = v
	}
	return c
}

// devConfig is the server's dynamic config: the static keys, except the
// forced search-attribute refresh, which is on until settled is called
// (unless Options.DynamicConfig sets that key: then it is fixed).
type devConfig struct {
	static  dynamicconfig.StaticClient
	fixed   bool // the caller set forceSARefresh
	settled atomic.Bool
}

// Same slices every call: the server caches converted values per slice.
var (
	forceOn  = []dynamicconfig.ConstrainedValue{{Value: true}}
	forceOff = []dynamicconfig.ConstrainedValue{{Value: false}}
)

// allowLoopbackHostsOnly makes the frontend's HTTP API refuse a request
// whose Host is not a loopback name when the server listens on a loopback
// host (DNS rebinding: a web page whose name was rebound to 127.0.0.1 must
// not drive the API), unless the overrides set frontend.httpAllowedHosts.
func (c *devConfig) allowLoopbackHostsOnly(host string) {
	key := dynamicconfig.FrontendHTTPAllowedHosts.Key()
	if _, set := c.static[key]; set || !loopback.Host(host) {
		return
	}
	c.static[key] = []string{"localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*", "[::1]", "[::1]:*"}
}

func newDevConfig(overrides map[string]any) *devConfig {
	c := &devConfig{static: dynamicConfig(overrides)}
	for k := range overrides {
		if dynamicconfig.MakeKey(k) == forceSARefresh {
			c.fixed = true
		}
	}
	return c
}

// GetValue implements dynamicconfig.Client.
func (c *devConfig) GetValue(key dynamicconfig.Key) []dynamicconfig.ConstrainedValue {
	if key != forceSARefresh || c.fixed {
		return c.static.GetValue(key)
	}
	if c.settled.Load() {
		return forceOff
	}
	return forceOn
}

// settle switches the forced refresh off (a no-op when the caller fixed it).
func (c *devConfig) settle() { c.settled.Store(true) }

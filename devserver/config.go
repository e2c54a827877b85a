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
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
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
}

func pickPorts(opts Options) (ports, error) {
	var p ports
	var err error
	if p.frontend, err = reservePort(opts.Host, opts.Port, "frontend", "Port"); err != nil {
		return p, err
	}
	// The frontend's HTTP API (and with it Nexus) listens next to its gRPC port.
	if p.frontendHTTP, err = reservePort(opts.Host, 0, "frontend HTTP", ""); err != nil {
		return p, err
	}
	for _, port := range []*int{&p.history, &p.matching, &p.worker} {
		if *port, err = reservePort(internalHost, 0, "internal", ""); err != nil {
			return p, err
		}
	}
	if opts.UIPort != NoUI {
		if p.ui, err = reservePort(opts.Host, opts.UIPort, "Web UI", "UIPort"); err != nil {
			return p, err
		}
	}
	return p, nil
}

// reservePort returns want when it is free on host, or a free port chosen by the
// kernel when want is 0. The port is released before returning: the server
// binds it moments later, which is the usual (small) race of free-port pickers.
func reservePort(host string, want int, what, option string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(want)))
	if err != nil {
		if want != 0 {
			return 0, fmt.Errorf("devserver: %s port %d on %s is not free (another Temporal dev server?); stop that process or set Options.%s to another port, 0 for any: %w",
				what, want, host, option, err)
		}
		return 0, fmt.Errorf("devserver: find a free %s port on %s: %w", what, host, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("devserver: release the probe listener on port %d: %w", port, err)
	}
	return port, nil
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
		sqlCfg.ConnectAttributes = map[string]string{"mode": "rwc"}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
				// Leave no half-made file behind: the next start would take it for a database.
				_ = os.Remove(path)
				return nil, fmt.Errorf("devserver: create the Temporal schema in %s: %w", path, err)
			}
		} else if err != nil {
			return nil, fmt.Errorf("devserver: check the database file: %w", err)
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

func buildServerOptions(opts Options, p ports, sqlCfg *config.SQL, logger log.Logger) ([]temporal.ServerOption, error) {
	frontendAddr := net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(p.frontend))
	frontendHTTPAddr := net.JoinHostPort(dialHost(opts.Host), strconv.Itoa(p.frontendHTTP))
	internal := func(port int) string { return net.JoinHostPort(internalHost, strconv.Itoa(port)) }

	cfg := &config.Config{}
	cfg.Global.Membership = config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: internalHost}
	// Metrics stay off (a nil config is a no-op handler) and so does pprof (port 0).
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
		temporal.WithDynamicConfigClient(devDynamicConfig()),
	}, nil
}

// devDynamicConfig tunes the server for one developer and a handful of plans:
// a UI that lists and counts often, and search attributes visible at once.
func devDynamicConfig() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8192,
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():      true,
		dynamicconfig.NamespaceCacheRefreshInterval.Key():                time.Second,
	}
}

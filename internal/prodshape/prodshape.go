// Package prodshape runs Temporal as production runs it, on one machine: the
// real server binary of the pinned go.temporal.io/server module as separate
// processes (Nodes of them, each with every service, on the same PostgreSQL
// databases, their membership over loopback), its schema set up with the
// module's own temporal-sql-tool, and one frontend address in front of all
// the nodes (a round-robin TCP balancer, as a load balancer in front of the
// frontends is in production) that survives a node's death.
//
// integration/prodshape runs agentsaga's chaos run on it; nothing here is
// embedded: a node is killed with SIGKILL and started again from its
// config file, as an operator's process supervisor would.
package prodshape

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/internal/gobuild"
)

// ServerModule is the module whose server and SQL tool are built.
const ServerModule = "go.temporal.io/server"

// Limits of Options.
const (
	MaxNodes = 5
	// MaxPrefixLen bounds Options.Prefix: PostgreSQL database names are at
	// most 63 bytes and a suffix is added.
	MaxPrefixLen = 40
)

// Binaries are the server's programs and schema, from the pinned module.
type Binaries struct {
	// Version is the module's version as go.mod pins it.
	Version string
	// Server is temporal-server, SQLTool temporal-sql-tool.
	Server, SQLTool string
	// SchemaDir is the module's schema/postgresql/v12 directory (its
	// temporal and visibility subdirectories).
	SchemaDir string
	// Built reports whether either binary was linked now (false: both came
	// from the cache).
	Built bool
}

// BuildBinaries builds temporal-server and temporal-sql-tool from the
// go.temporal.io/server version the module in dir pins, or takes them from
// the cache of an earlier build of that version (see gobuild.Cached).
func BuildBinaries(ctx context.Context, dir string) (Binaries, error) {
	m, err := gobuild.Lookup(ctx, dir, ServerModule)
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{Version: m.Version, SchemaDir: filepath.Join(m.Dir, "schema", "postgresql", "v12")}
	for _, p := range []struct {
		out       *string
		name, pkg string
	}{
		{&b.Server, "temporal-server", ServerModule + "/cmd/server"},
		{&b.SQLTool, "temporal-sql-tool", ServerModule + "/cmd/tools/sql"},
	} {
		bin, built, err := gobuild.Cached(ctx, dir, m, p.name, p.pkg)
		if err != nil {
			return Binaries{}, fmt.Errorf("prodshape: build %s: %w", p.name, err)
		}
		*p.out, b.Built = bin, b.Built || built
	}
	for _, sub := range []string{"temporal", "visibility"} {
		if _, err := os.Stat(filepath.Join(b.SchemaDir, sub, "versioned")); err != nil {
			return Binaries{}, fmt.Errorf("prodshape: the schema of %s@%s: %w", ServerModule, m.Version, err)
		}
	}
	return b, nil
}

// Options configure a cluster.
type Options struct {
	// Dir holds the nodes' config files and logs. Required.
	Dir string
	// Postgres is PostgreSQL's host:port (127.0.0.1:5432 when empty); User
	// its user (postgres when empty), trusted without a password.
	Postgres, User string
	// Prefix starts the names of the databases this cluster makes (the
	// Temporal store, its visibility store and the ledger); at most
	// MaxPrefixLen of [a-z0-9_]. Required: one per run keeps runs apart.
	Prefix string
	// Nodes is how many server processes run (2 when zero; at most
	// MaxNodes).
	Nodes int
	// Shards is the history shard count (4 when zero). It is fixed once
	// the databases exist: production picks it for the largest load it
	// will see; this machine runs a few hundred plans.
	Shards int
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
}

// Cluster is a running multi-node Temporal cluster.
type Cluster struct {
	o     Options
	bins  Binaries
	log   *slog.Logger
	lb    *balancer
	nodes []*Node
	dbs   []string
	// LedgerDSN is a fresh PostgreSQL database for agentsaga's ledger, on
	// the same server.
	LedgerDSN string
}

// Node is one server process with every service.
type Node struct {
	// Index is the node's number, from 0.
	Index int
	// Frontend is this node's own frontend host:port (the cluster's
	// Address balances over all of them).
	Frontend string
	config   string
	logPath  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the process's end, once done is closed
}

// Start makes fresh databases, sets up Temporal's schema in them with
// temporal-sql-tool, writes a config file per node and starts every node,
// returning once each node's frontend answers and knows the system
// namespace. Close stops the nodes and drops the databases.
func Start(ctx context.Context, bins Binaries, o Options) (_ *Cluster, err error) {
	if o.Dir == "" {
		return nil, errors.New("prodshape: Options.Dir is empty: give a directory for the nodes' config files and logs")
	}
	if o.Prefix == "" || len(o.Prefix) > MaxPrefixLen || strings.Trim(o.Prefix, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		return nil, fmt.Errorf("prodshape: Options.Prefix %q: give 1 to %d of [a-z0-9_]", o.Prefix, MaxPrefixLen)
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.Nodes < 1 || o.Nodes > MaxNodes {
		return nil, fmt.Errorf("prodshape: Options.Nodes %d: give 1 to %d", o.Nodes, MaxNodes)
	}
	if o.Shards == 0 {
		o.Shards = 4
	}
	if o.Shards < 1 || o.Shards > 1024 {
		return nil, fmt.Errorf("prodshape: Options.Shards %d: give 1 to 1024", o.Shards)
	}
	if o.Postgres == "" {
		o.Postgres = "127.0.0.1:5432"
	}
	if o.User == "" {
		o.User = "postgres"
	}
	c := &Cluster{o: o, bins: bins, log: o.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	if err := c.makeDatabases(ctx); err != nil {
		return nil, err
	}
	if err := c.writeConfigs(); err != nil {
		return nil, err
	}
	// The first node initializes the cluster's metadata in the fresh
	// databases; nodes started with it race to insert the same row and
	// one exits ("failed to initialize current cluster metadata"), so
	// the others start once it answers, as a rollout would.
	if err := c.startNode(c.nodes[0]); err != nil {
		return nil, err
	}
	if err := c.awaitNode(ctx, c.nodes[0]); err != nil {
		return nil, err
	}
	for _, n := range c.nodes[1:] {
		if err := c.startNode(n); err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes[1:] {
		if err := c.awaitNode(ctx, n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Address is the cluster's frontend address: a balancer that hands each new
// connection to the next node that accepts it.
func (c *Cluster) Address() string { return c.lb.addr() }

// Carried counts the client connections the balancer carries now to each
// node (by Node.Index): a test kills the busiest node to cut live
// connections.
func (c *Cluster) Carried() []int { return c.lb.carried() }

// Nodes are the cluster's nodes.
func (c *Cluster) Nodes() []*Node { return c.nodes }

func (c *Cluster) frontends() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Frontend
	}
	return out
}

func (c *Cluster) dsn(db string) string {
	return "postgres://" + c.o.User + "@" + c.o.Postgres + "/" + db + "?sslmode=disable"
}

// makeDatabases creates the Temporal and visibility databases with the SQL
// tool and sets up their schema (setup-schema at 0.0, then update-schema to
// the module's latest), and creates the ledger's database.
func (c *Cluster) makeDatabases(ctx context.Context) error {
	host, port, err := net.SplitHostPort(c.o.Postgres)
	if err != nil {
		return fmt.Errorf("prodshape: Options.Postgres %q: give host:port: %w", c.o.Postgres, err)
	}
	main, vis, ledgerDB := c.o.Prefix+"_temporal", c.o.Prefix+"_visibility", c.o.Prefix+"_ledger"
	for _, db := range []struct{ name, schema string }{{main, "temporal"}, {vis, "visibility"}} {
		base := []string{"--plugin", "postgres12", "--ep", host, "-p", port, "-u", c.o.User, "--db", db.name}
		c.dbs = append(c.dbs, db.name)
		for _, args := range [][]string{
			{"create-database"},
			{"setup-schema", "-v", "0.0"},
			{"update-schema", "-d", filepath.Join(c.bins.SchemaDir, db.schema, "versioned")},
		} {
			cmd := exec.CommandContext(ctx, c.bins.SQLTool, append(append([]string(nil), base...), args...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("prodshape: temporal-sql-tool %s on %s: %w\n%s", args[0], db.name, err, out)
			}
		}
		c.log.Info("prodshape: schema set up", "database", db.name)
	}
	conn, err := pgx.Connect(ctx, c.dsn("postgres"))
	if err != nil {
		return fmt.Errorf("prodshape: connect to PostgreSQL at %s as %s: %w", c.o.Postgres, c.o.User, err)
	}
	defer conn.Close(ctx)
	c.dbs = append(c.dbs, ledgerDB)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{ledgerDB}.Sanitize()); err != nil {
		return fmt.Errorf("prodshape: create the ledger database %s: %w", ledgerDB, err)
	}
	c.LedgerDSN = c.dsn(ledgerDB)
	return nil
}

// Services every node runs, with the offset of their ports in the node's
// block.
var services = []struct {
	name string
	off  int
}{{"frontend", 0}, {"history", 2}, {"matching", 4}, {"worker", 6}}

// portsPerNode is the size of a node's block of ports: a gRPC and a
// membership port per service, and the frontend's HTTP port.
const portsPerNode = 9

// writeConfigs picks free ports, starts the balancer in front of the
// frontends, and writes each node's config file: every service on its own
// gRPC and membership port on loopback, the same databases, the balancer
// as the cluster's RPC address.
func (c *Cluster) writeConfigs() error {
	ports, err := freePorts(c.o.Nodes * portsPerNode)
	if err != nil {
		return err
	}
	c.nodes = make([]*Node, c.o.Nodes)
	for i := range c.nodes {
		c.nodes[i] = &Node{Index: i, Frontend: "127.0.0.1:" + strconv.Itoa(ports[i*portsPerNode]),
			config:  filepath.Join(c.o.Dir, fmt.Sprintf("node%d.yaml", i)),
			logPath: filepath.Join(c.o.Dir, fmt.Sprintf("node%d.log", i))}
	}
	if c.lb, err = startBalancer(c.frontends()); err != nil {
		return err
	}
	for i, n := range c.nodes {
		p := ports[i*portsPerNode : (i+1)*portsPerNode]
		var svc strings.Builder
		for _, s := range services {
			fmt.Fprintf(&svc, "  %s:\n    rpc:\n      grpcPort: %d\n      membershipPort: %d\n      bindOnLocalHost: true\n", s.name, p[s.off], p[s.off+1])
			if s.name == "frontend" {
				fmt.Fprintf(&svc, "      httpPort: %d\n", p[8])
			}
		}
		cfg := fmt.Sprintf(configTemplate, c.o.Shards,
			c.o.Prefix+"_temporal", c.o.Postgres, c.o.User,
			c.o.Prefix+"_visibility", c.o.Postgres, c.o.User,
			svc.String(), c.lb.addr())
		if err := os.WriteFile(n.config, []byte(cfg), 0o600); err != nil {
			return fmt.Errorf("prodshape: write %s: %w", n.config, err)
		}
	}
	return nil
}

// configTemplate is a node's config file (the module's
// config/development-postgres12.yaml, trimmed: no metrics endpoint, no
// pprof, no archival). Every service of a node opens pools of its own:
// 4 + 2 connections each keep two nodes at 48 of the local PostgreSQL's
// 100 (max_connections), which other tests share; with 20 + 10 two nodes
// held 87 and a second cluster could not connect.
const configTemplate = `log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: %d
  datastores:
    default:
      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: %s
        connectProtocol: tcp
        user: %s
        maxConns: 4
        maxIdleConns: 4
        maxConnLifetime: 1h
    visibility:
      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: %s
        connectProtocol: tcp
        user: %s
        maxConns: 2
        maxIdleConns: 2
        maxConnLifetime: 1h
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: 127.0.0.1
services:
%sclusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: %s
dcRedirectionPolicy:
  policy: noop
`

// freePorts returns n distinct ports free on loopback now, all below
// 32768: Temporal stores a membership port as a PostgreSQL smallint, and
// the kernel's ephemeral ports (what port 0 gives) lie above it.
func freePorts(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	const lo, hi = 20000, 32768
	start := lo + rand.IntN(hi-lo)
	for i := 0; i < hi-lo && len(ports) < n; i++ {
		port := lo + (start-lo+i)%(hi-lo)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken
		}
		lns = append(lns, ln)
		ports = append(ports, port)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("prodshape: found %d free ports on loopback between %d and %d, need %d", len(ports), lo, hi, n)
	}
	return ports, nil
}

// startNode starts n's process from its config file, its output appended
// to its log file.
func (c *Cluster) startNode(n *Node) error {
	logf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("prodshape: open %s: %w", n.logPath, err)
	}
	cmd := exec.Command(c.bins.Server, "--config-file", n.config, "--allow-no-auth", "start")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("prodshape: start node %d (%s): %w", n.Index, c.bins.Server, err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.done, n.err = cmd, done, nil
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}()
	c.log.Info("prodshape: node started", "node", n.Index, "pid", cmd.Process.Pid, "frontend", n.Frontend)
	return nil
}

// awaitNode polls n's own frontend until it answers a health check and
// describes the system namespace (its persistence is up), or n exits.
func (c *Cluster) awaitNode(ctx context.Context, n *Node) error {
	return c.pollNode(ctx, n, "", "answer", func(ctx context.Context, tc client.Client) error {
		if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			return err
		}
		_, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "temporal-system"})
		return err
	})
}

// AwaitNamespace polls every node's own frontend until each describes
// namespace and accepts a start carrying every search attribute of sas: a
// namespace and attributes registered through one node reach the others'
// caches up to a minute later. The probe workflows it starts are
// terminated at once (nothing polls their task queue).
func (c *Cluster) AwaitNamespace(ctx context.Context, namespace string, sas map[string]enumspb.IndexedValueType) error {
	var typed []temporal.SearchAttributeUpdate
	for name, typ := range sas {
		switch typ {
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD:
			typed = append(typed, temporal.NewSearchAttributeKeyKeyword(name).ValueSet("prodshape-probe"))
		case enumspb.INDEXED_VALUE_TYPE_BOOL:
			typed = append(typed, temporal.NewSearchAttributeKeyBool(name).ValueSet(false))
		default:
			return fmt.Errorf("prodshape: search attribute %s of type %v: only keyword and bool are probed", name, typ)
		}
	}
	for _, n := range c.nodes {
		err := c.pollNode(ctx, n, namespace, "know namespace "+namespace+" and its search attributes", func(ctx context.Context, tc client.Client) error {
			if _, err := tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace}); err != nil {
				return err
			}
			if len(typed) == 0 {
				return nil
			}
			run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: fmt.Sprintf("prodshape-probe-%d-%d", n.Index, time.Now().UnixNano()), TaskQueue: "prodshape-probe",
				TypedSearchAttributes: temporal.NewSearchAttributes(typed...),
			}, "prodshape-probe")
			if err != nil {
				return err
			}
			return tc.TerminateWorkflow(ctx, run.GetID(), run.GetRunID(), "prodshape: probe of the search attributes")
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// pollNode calls probe with a client of n's own frontend (in namespace; ""
// is the SDK's default) every 100 ms until it succeeds, n's process exits,
// or ctx ends.
func (c *Cluster) pollNode(ctx context.Context, n *Node, namespace, what string, probe func(context.Context, client.Client) error) error {
	var tc client.Client
	defer func() {
		if tc != nil {
			tc.Close()
		}
	}()
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	var last error
	for {
		if tc == nil {
			tc, last = client.NewLazyClient(client.Options{HostPort: n.Frontend, Namespace: namespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		}
		if tc != nil {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			last = probe(pctx, tc)
			cancel()
			if last == nil {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("prodshape: node %d exited before it would %s: %v (its log: %s)\n%s", n.Index, what, n.exitErr(), n.logPath, n.tail())
		case <-ctx.Done():
			return fmt.Errorf("prodshape: node %d did not %s at %s: %w (last: %v; its log: %s)\n%s", n.Index, what, n.Frontend, ctx.Err(), last, n.logPath, n.tail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) exitErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// tail is the end of n's log.
func (n *Node) tail() string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// Kill SIGKILLs node i and returns once the process is gone.
func (c *Cluster) Kill(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("prodshape: node %d was never started", i)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("prodshape: SIGKILL node %d: %w", i, err)
	}
	<-done
	var exit *exec.ExitError
	if !errors.As(n.exitErr(), &exit) {
		return fmt.Errorf("prodshape: node %d had exited before the SIGKILL: %v\n%s", i, n.exitErr(), n.tail())
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("prodshape: node %d was not ended by the SIGKILL: %v\n%s", i, n.exitErr(), n.tail())
	}
	c.log.Info("prodshape: node killed", "node", i)
	return nil
}

// Restart starts node i again from its config file (same ports, same
// databases) and returns once it answers.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.nodes[i]
	select {
	case <-n.done:
	default:
		return fmt.Errorf("prodshape: node %d still runs: Kill it first", i)
	}
	if err := c.startNode(n); err != nil {
		return err
	}
	if err := c.awaitNode(ctx, n); err != nil {
		return err
	}
	c.log.Info("prodshape: node restarted", "node", i)
	return nil
}

// Close stops every node (SIGTERM, SIGKILL after 20 s), the balancer, and
// drops the databases this cluster made.
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.nodes {
		n.mu.Lock()
		cmd, done := n.cmd, n.done
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if c.lb != nil {
		c.lb.close()
	}
	if len(c.dbs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.dsn("postgres"))
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("prodshape: connect to drop the databases %v: %w", c.dbs, err))...)
		}
		defer conn.Close(ctx)
		for _, db := range c.dbs {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
				errs = append(errs, fmt.Errorf("prodshape: drop database %s: %w", db, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Logs are the nodes' log files.
func (c *Cluster) Logs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.logPath
	}
	return out
}

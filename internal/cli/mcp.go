package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaclient"

	"github.com/agentsaga/agentsaga/tool"
)

// maxMCPSessions bounds --max-sessions.
const maxMCPSessions = 100_000

// mcpPath is where `starter mcp --http` serves the streamable HTTP
// endpoint.
const mcpPath = "/mcp"

// mcpFlags are the gateway's own flags.
type mcpFlags struct {
	http        string
	stdio       bool
	allowRemote bool
	window      time.Duration
	timeout     time.Duration
	requestedBy string
	personWait  time.Duration
	idle        time.Duration
	maxSessions int
	origins     string
}

func (m *mcpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.http, "http", "", "serve MCP over streamable HTTP on HOST:PORT, endpoint "+mcpPath+" (loopback only unless --allow-remote; port 0 picks a free one)")
	fs.BoolVar(&m.stdio, "stdio", false, "serve MCP over standard input and output, one session (logs go to standard error)")
	fs.BoolVar(&m.allowRemote, "allow-remote", false, "let --http listen on a non-loopback address; the gateway does not authenticate, so put an authenticating proxy in front")
	fs.DurationVar(&m.window, "duplicate-window", mcpgw.DefaultDuplicateWindow, "an identical write without a _meta key repeated within this window after its final result was given to the client is held as a suspected duplicate (a call still waiting is read, whatever the window)")
	fs.DurationVar(&m.timeout, "call-timeout", mcpgw.DefaultCallTimeout, "how long one tools/call waits for its turn; repeating the call later reads the same turn")
	fs.DurationVar(&m.personWait, "person-wait", mcpgw.DefaultPersonWait, "how long a call that sent a progressToken stays open while its turn waits for a person (it gets progress every 10 s); after it, the call answers that it still waits")
	fs.DurationVar(&m.idle, "session-idle", mcpgw.DefaultSessionIdle, "--http: end an MCP session that sent nothing for this long (its AgentSession too, unless it waits for a person)")
	fs.IntVar(&m.maxSessions, "max-sessions", mcpgw.DefaultMaxSessions, "--http: MCP sessions held at once; an initialize beyond gets 503")
	fs.StringVar(&m.origins, "allow-origin", "", "--http: browser origins (scheme://host[:port], comma-separated) let in besides loopback ones; any other Origin gets 403")
	fs.StringVar(&m.requestedBy, "requested-by", "", "the principal behind the agent's sessions; an approval by the same name is refused (four eyes)")
}

// check refuses flags that cannot be meant, before anything is dialled.
func (m *mcpFlags) check(pos []string) error {
	switch {
	case len(pos) > 0:
		return usageErr("mcp: takes no arguments, got %q (see starter mcp --help)", pos[0])
	case (m.http == "") == !m.stdio:
		return usageErr("mcp: give exactly one of --http HOST:PORT or --stdio")
	case m.window <= 0 || m.timeout <= 0 || m.personWait <= 0 || m.idle <= 0:
		return usageErr("mcp: --duplicate-window, --call-timeout, --person-wait and --session-idle must be positive durations, such as 10m")
	case m.maxSessions < 1 || m.maxSessions > maxMCPSessions:
		return usageErr("mcp: --max-sessions %d: give 1 to %d", m.maxSessions, maxMCPSessions)
	}
	if m.requestedBy != "" {
		if err := operators.ValidName(m.requestedBy); err != nil {
			return usageErr("mcp: --requested-by: %v", err)
		}
	}
	if m.http != "" {
		host, _, err := net.SplitHostPort(m.http)
		if err != nil {
			return usageErr("mcp: --http %q is not HOST:PORT: %v", m.http, err)
		}
		if ip := net.ParseIP(host); !m.allowRemote && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return usageErr("mcp: --http %s is not a loopback address and the gateway does not authenticate: serve it on 127.0.0.1, or pass --allow-remote behind an authenticating proxy", m.http)
		}
	}
	return nil
}

func cmdMCP(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var c conn
	c.register(fs)
	var m mcpFlags
	m.register(fs)
	var l ledgerFlags
	l.register(fs)
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if err := m.check(pos); err != nil {
		return err
	}
	// Every gateway process keeps its memory of the calls sent without a
	// key in the workers' ledger, so a reconnect or another replica is
	// one caller.
	calls, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer calls.Close()
	sc, closeFn, err := c.dial(ctx, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	tools, err := c.registry(ctx)
	if err != nil {
		return err
	}
	return serveMCP(ctx, sc, calls, tools, m, stdin, out, os.Stderr)
}

// serveMCP serves the gateway over plans, keeping its memory of keyless
// calls in calls, until ctx ends (HTTP) or the
// client closes its side (stdio). Logs go to logw; with --stdio, out
// carries the protocol and nothing else.
func serveMCP(ctx context.Context, plans mcpgw.Plans, calls ledger.KeylessCalls, tools *tool.Registry, m mcpFlags, stdin io.Reader, out, logw io.Writer) error {
	log := slog.New(redact.NewHandler(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})))
	srv, err := mcpgw.New(plans, tools, mcpgw.Options{
		Calls: calls, DuplicateWindow: m.window, CallTimeout: m.timeout, PersonWait: m.personWait, Logger: log,
		Session: sagaclient.SessionOptions{RequestedBy: m.requestedBy},
	})
	if err != nil {
		return usageErr("mcp: %v", err)
	}
	if m.stdio {
		err := srv.Run(ctx, mcpgw.NewStdioTransport(stdin, out))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = mcpgw.Settle(sctx, srv) // the connection's AgentSession ends before the process does
		if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("mcp over stdio: %w", err)
		}
		return nil
	}
	ln, err := net.Listen("tcp", m.http)
	if err != nil {
		return fmt.Errorf("mcp: listen on %s: %w (is the port taken? pick another with --http)", m.http, err)
	}
	mux := http.NewServeMux()
	var origins []string
	for _, o := range strings.Split(m.origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	h, err := mcpgw.NewHandler(srv, mcpgw.HandlerOptions{SessionIdle: m.idle, MaxSessions: m.maxSessions, AllowedOrigins: origins})
	if err != nil {
		return usageErr("mcp: %v", err)
	}
	mux.Handle(mcpPath, h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "MCP gateway on http://%s%s (streamable HTTP); Ctrl-C stops it\n", ln.Addr(), mcpPath)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("mcp: serve HTTP: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	return nil
}

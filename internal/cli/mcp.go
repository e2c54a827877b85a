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
	"time"

	"github.com/agentsaga/agentsaga/mcpgw"
	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/sagaclient"

	"github.com/agentsaga/agentsaga/tool"
)

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
}

func (m *mcpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.http, "http", "", "serve MCP over streamable HTTP on HOST:PORT, endpoint "+mcpPath+" (loopback only unless --allow-remote; port 0 picks a free one)")
	fs.BoolVar(&m.stdio, "stdio", false, "serve MCP over standard input and output, one session (logs go to standard error)")
	fs.BoolVar(&m.allowRemote, "allow-remote", false, "let --http listen on a non-loopback address; the gateway does not authenticate, so put an authenticating proxy in front")
	fs.DurationVar(&m.window, "duplicate-window", mcpgw.DefaultDuplicateWindow, "an identical write without a _meta key repeated within this window after its final result was given to the client is held as a suspected duplicate (a call still waiting is read, whatever the window)")
	fs.DurationVar(&m.timeout, "call-timeout", mcpgw.DefaultCallTimeout, "how long one tools/call waits for its turn; repeating the call later reads the same turn")
	fs.StringVar(&m.requestedBy, "requested-by", "", "the principal behind the agent's sessions; an approval by the same name is refused (four eyes)")
}

// check refuses flags that cannot be meant, before anything is dialled.
func (m *mcpFlags) check(pos []string) error {
	switch {
	case len(pos) > 0:
		return usageErr("mcp: takes no arguments, got %q (see starter mcp --help)", pos[0])
	case (m.http == "") == !m.stdio:
		return usageErr("mcp: give exactly one of --http HOST:PORT or --stdio")
	case m.window <= 0 || m.timeout <= 0:
		return usageErr("mcp: --duplicate-window and --call-timeout must be positive durations, such as 10m")
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
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if err := m.check(pos); err != nil {
		return err
	}
	sc, closeFn, err := c.dial(ctx, nil)
	if err != nil {
		return err
	}
	defer closeFn()
	tools, err := c.registry(ctx)
	if err != nil {
		return err
	}
	return serveMCP(ctx, sc, tools, m, stdin, out, os.Stderr)
}

// serveMCP serves the gateway over plans until ctx ends (HTTP) or the
// client closes its side (stdio). Logs go to logw; with --stdio, out
// carries the protocol and nothing else.
func serveMCP(ctx context.Context, plans mcpgw.Plans, tools *tool.Registry, m mcpFlags, stdin io.Reader, out, logw io.Writer) error {
	log := slog.New(redact.NewHandler(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})))
	srv, err := mcpgw.New(plans, tools, mcpgw.Options{
		DuplicateWindow: m.window, CallTimeout: m.timeout, Logger: log,
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
	mux.Handle(mcpPath, mcpgw.Handler(srv))
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

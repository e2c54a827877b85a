package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/devserver"
	"github.com/agentsaga/agentsaga/internal/devstack"
)

// runDev runs worker --dev: the embedded Temporal server, Web UI, codec
// endpoint and sandbox, and a worker on them, until ctx ends.
func runDev(ctx context.Context, d app.Dev) error {
	t := d.Temporal
	st, err := devstack.Start(ctx, devstack.Options{
		DataDir: d.DataDir, Port: d.Port, UIPort: d.UIPort, HTTPPort: d.HTTPPort, CodecAddr: d.CodecAddr, Ledger: d.Ledger,
		SandboxURL: d.SandboxURL, SandboxAddr: d.SandboxAddr,
		TaskQueue: t.TaskQueue, Logger: d.Log, Operators: d.Operators, MetricsAddr: d.MetricsAddr, Keyring: d.Keyring, AllowPlaintext: d.AllowPlaintext,
		Tools: d.Tools, Webhook: d.Webhook,
	})
	if err != nil {
		return portFlag(err)
	}
	sandboxLine := fmt.Sprintf("%s (started here; admin token in %s)", st.SandboxURL, st.SandboxTokenFile)
	tools := "the demo tools: " + strings.Join(st.Tools.Names(), ", ")
	switch {
	case d.Tools != nil:
		sandboxLine = "not started (your tools are served; no --tools runs the demo tools against it)"
		tools = strings.Join(st.Tools.Names(), ", ")
		if len(d.ToolFiles) > 0 {
			tools += " (from " + strings.Join(d.ToolFiles, ", ") + ")"
		}
	case st.Sandbox == nil:
		sandboxLine = fmt.Sprintf("%s (not started here: --sandbox-url or %s names one that runs elsewhere)", st.SandboxURL, config.EnvSandboxURL)
	}
	metrics := st.MetricsURL
	if metrics == "" {
		metrics = "off (--metrics-addr)" // as before the move into package app
	}
	notify := "off (--notify-url)"
	if d.Webhook != nil {
		// A webhook's path is often its secret (Slack's): the host only.
		notify = "on, to " + d.Webhook.URL
		if u, err := url.Parse(d.Webhook.URL); err == nil {
			notify = "on, to " + u.Scheme + "://" + u.Host + "/..."
		}
	}
	fmt.Printf("agentsaga dev worker ready\n  Temporal   %s (namespace %s; HTTP API %s)\n  Web UI     %s\n  codec      %s (log in once per browser at %s/login with the token in %s; keys in %s)\n  tools      %s\n  sandbox    %s\n  ledger     %s\n  task queue %s\n  data       %s\n  metrics    %s\n  notify     %s\nCtrl-C stops.\n",
		st.Server.FrontendAddr(), st.Server.Namespace(), st.Server.FrontendHTTPAddr(), st.Server.UIURL(), st.CodecURL, st.CodecURL, st.CodecTokenFile, st.KeysFile,
		tools, sandboxLine, config.SafeDSN(st.LedgerDSN), t.TaskQueue, d.DataDir, metrics, notify)
	<-ctx.Done()
	fmt.Println("stopping")
	return st.Close()
}

// portFlag turns a dev stack's "port taken" error into one that names the
// worker's flag that moves it.
func portFlag(err error) error {
	flags := map[string]string{"Port": "--port", "HTTPPort": "--http-port", "UIPort": "--ui-port",
		"CodecAddr": "--codec-addr", "SandboxAddr": "--sandbox-addr", "MetricsAddr": "--metrics-addr"}
	var pt *devserver.PortTakenError
	if errors.As(err, &pt) {
		return app.UsageError{Err: fmt.Errorf("the %s port %d is taken (another dev stack?): pass %s with another port (0 for a free one): %w", pt.What, pt.Port, flags[pt.Option], err)}
	}
	var ae *devstack.AddrError
	if errors.As(err, &ae) {
		return app.UsageError{Err: fmt.Errorf("%s is taken (another dev stack?): pass %s with another address (port 0 for a free one): %w", ae.Addr, flags[ae.Option], err)}
	}
	return err
}

// Command worker runs AgentPlan workflows and their tool activities.
//
//	go run ./worker --dev                        embedded Temporal + Web UI + sandbox + worker
//	go run ./worker --tools tools.yaml           your tools, on TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE
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
//
// The command is package app's Worker with agentsaga's own demo tools and
// dev stack; a team's worker is the same call with its own tools (see
// examples/).
package main

import (
	"context"
	"os"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/tool"
)

func main() {
	os.Exit(app.Main(os.Args[1:], run))
}

// options are agentsaga's own worker's: the demo tools and the dev stack.
func options() app.Options {
	return app.Options{
		DemoTools: func(sandboxURL string) (*tool.Registry, error) {
			return demotools.Registry(demotools.SandboxConfig(sandboxURL))
		},
		Dev: runDev,
	}
}

func run(ctx context.Context, args []string) error { return app.Worker(ctx, args, options()) }

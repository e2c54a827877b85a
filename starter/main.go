// Command starter is agentsaga's own CLI: the planner's and operator's
// commands (package internal/cli, which a team's main gets through app.Run)
// over the demo tools unless --tools names a catalogue, and the dev commands
// that need the embedded stack or the sandbox: demo, sandbox, chaos, bench.
//
// Exit codes: 0 ok (and --help), 1 the operation failed (a decision refused
// by the workflow among them), 2 bad usage or input. With --json, results go
// to standard output as JSON and an error goes to standard error as
// {"error": "...", "code": N}.
package main

import (
	"context"
	"io"
	"os"

	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/tool"
)

func main() { os.Exit(cli.Main(starterConfig())) }

// starterConfig adds the demo tools and the dev commands to the CLI.
func starterConfig() cli.Config {
	return cli.Config{
		DemoTools: func() (*tool.Registry, error) { return demotools.Registry(demotools.Config{}) },
		Commands: map[string]cli.Command{
			"sandbox": cmdSandbox, "demo": cmdDemo, "chaos": cmdChaos, "bench": cmdBench,
		},
		Synopsis: map[string]string{
			"sandbox effects": "sandbox effects: committed rows in the sandbox providers' own stores",
			"sandbox fault":   "sandbox fault --op OP --kind KIND: make the sandbox misbehave on the next calls",
			"sandbox serve":   "sandbox serve: run the sandbox providers standalone",
			"demo":            "demo: run the stories on an embedded Temporal server and check every count",
			"chaos":           "chaos [--plans N] [--seed S] [--workers N] [--short] [--json]: randomized plans under every sandbox fault, worker SIGKILLs and a Temporal restart; invariants checked in the providers' stores and the ledger (see README, Chaos run)",
			"bench":           "bench [--rounds N] [--concurrency 1,10,50] [--json]: agentsaga against plain Temporal on one embedded server in one process (see BENCHMARKS.md)",
		},
		Usage: `sandbox:
  sandbox effects [--provider NAME]     committed rows in the providers' own stores
  sandbox fault --op OP --kind KIND [--count N] [--delay D]
  sandbox serve [--addr HOST:PORT]      run the sandbox providers standalone
demo:
  demo [--ui] [--json]                  run the stories on an embedded Temporal server
  bench [--rounds N] [--concurrency 1,10,50] [--json]   agentsaga against plain Temporal on one embedded server
  chaos [--plans N] [--seed S] [--json] randomized plans under faults, kills and a server restart; checks the invariants
`,
	}
}

// run is the CLI with agentsaga's own config, for tests.
func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	return cli.Run(ctx, args, stdin, out, starterConfig())
}

// The CLI's helpers, under the names the dev commands use.
var (
	parse       = cli.Parse
	usageErr    = cli.UsageErr
	printJSON   = cli.PrintJSON
	safe        = cli.Safe
	subcommands = cli.Subcommands
	envOr       = cli.EnvOr
)

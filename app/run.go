package app

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentsaga/agentsaga/internal/cli"
)

// Run is a team's whole command line in one binary, over one set of tools
// (o.Tools and the catalogue files of --tools or $AGENTSAGA_TOOLS): `NAME
// worker [flags]` runs the worker (Worker, every flag of agentsaga's worker),
// and the other commands are agentsaga's planner and operator CLI: run,
// status, escalations, approve, resolve, cancel, exceptions, audit, report,
// ledger purge, operator keygen|show, codec serve, mcp (the MCP gateway
// serving the same tools), tools probe (the same tools' write tools probed
// against a staging provider, Go tools among them) and version, with the flags, environment, --json
// and exit codes the README gives for `starter`. It returns the exit code: 0,
// 1 when the command failed, 2 for bad usage. A team's main is:
//
//	func main() { os.Exit(app.Run(os.Args[1:], app.Options{Name: "payments-agent", Tools: mytools.All()})) }
//
// o.Check, when set, runs before a command with its name, so a main refuses
// there what its Go tools lack (a base URL, a credential) before anything is
// dialled.
func Run(args []string, o Options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	stopSignals = stop
	return cli.Report(os.Stderr, Exec(ctx, args, os.Stdin, os.Stdout, o), cli.WantsJSON(args))
}

// Exec is Run without the process (signals, exit code): it runs the
// command args name with stdin and out, for tests and embedding. A usage
// problem is an error whose exit code Run would make 2.
func Exec(ctx context.Context, args []string, stdin io.Reader, out io.Writer, o Options) error {
	name := o.Name
	if name == "" {
		name = "agentsaga"
	}
	if o.Check != nil && len(args) > 0 {
		if err := o.Check(args[0]); err != nil {
			var ue UsageError
			if errors.As(err, &ue) {
				return cli.UsageErr("%v", err)
			}
			return err
		}
	}
	worker := func(ctx context.Context, args []string, _ io.Reader, _ io.Writer) error {
		wo := o
		wo.Name = name + " worker"
		err := Worker(ctx, args, wo)
		var ue UsageError
		if errors.As(err, &ue) {
			return cli.UsageErr("worker: %v", ue.Err)
		}
		return err
	}
	return cli.Run(ctx, args, stdin, out, cli.Config{
		Name:     name,
		Tools:    o.Tools,
		Commands: map[string]cli.Command{"worker": worker},
		Synopsis: map[string]string{"worker": "worker [flags]: run the worker over the tools (see " + name + " worker --help)"},
		Usage:    "worker:\n  worker [flags]                        run the worker: AgentPlan, AgentSession and the tools' activities\n",
	})
}

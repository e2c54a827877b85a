// Command starter is the planner's and operator's CLI for agentsaga: start
// plans, read their status, approve and resolve steps, list what waits for a
// human, inspect the sandbox providers, and run the demo.
//
// Exit codes: 0 ok, 1 the operation failed, 2 bad usage or input.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: starter <command> [flags]

planner:
  run --plan FILE|- [--wait]            start a plan (or attach to the same plan); prints workflow ID and UI link
operator:
  status ID                             a plan's steps, states, attempts, external ids, decisions
  approve ID --step N --by NAME [--reject --reason TEXT] [--fingerprint FP]
  resolve ID --step N --outcome succeeded|failed|retry --by NAME [--external-id X] [--note TEXT]
  escalations                           running plans that wait for a human
  exceptions [--older-than 15m]         the ledger's exception queue
  ledger purge [--older-than 720h]      remove final ledger entries past retention
sandbox:
  sandbox effects [--provider NAME]     committed rows in the providers' own stores
  sandbox fault --op OP --kind KIND [--count N] [--delay D]
  sandbox serve [--addr HOST:PORT]      run the sandbox providers standalone
demo:
  demo [--ui] [--json]                  run the stories on an embedded Temporal server

Every command takes --json for machine-readable output. Temporal is reached with
--address/--namespace (env TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE).`

// exitError carries an exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "starter:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	os.Exit(1)
}

type command func(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(out, usage)
		if len(args) == 0 {
			return usageErr("no command given")
		}
		return nil
	}
	commands := map[string]command{
		"run": cmdRun, "status": cmdStatus, "approve": cmdApprove, "resolve": cmdResolve,
		"escalations": cmdEscalations, "exceptions": cmdExceptions, "ledger": cmdLedger,
		"sandbox": cmdSandbox, "demo": cmdDemo,
	}
	c, ok := commands[args[0]]
	if !ok {
		return usageErr("unknown command %q: run `starter help` for the list", args[0])
	}
	return c(ctx, args[1:], stdin, out)
}

// parse parses flags, allowing positional arguments before and after them.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageErr("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

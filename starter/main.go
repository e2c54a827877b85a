// Command starter is the planner's and operator's CLI for agentsaga: start
// plans, read their status, answer their open questions (approve, resolve),
// cancel them, list what waits for a human, read the ledger and its audit
// trail, make operator keys, inspect the sandbox providers, and run the demo.
//
// Exit codes: 0 ok (and --help), 1 the operation failed (a decision refused
// by the workflow among them), 2 bad usage or input. With --json, results go
// to standard output as JSON and an error goes to standard error as
// {"error": "...", "code": N}.
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
	"strings"
	"syscall"
)

const usage = `usage: starter <command> [flags]     (starter <command> --help lists a command's flags)

planner:
  run --plan FILE|- [--wait]            start a plan (or attach to the same plan); prints workflow ID, request ID, UI link
operator:
  status ID                             a plan's steps, decisions and open questions with their cards
  escalations                           running plans that wait for a human, oldest open question first
  approve ID --step N [--question Q] (--key FILE | --by NAME) [--reject] [--override] [--reason TEXT]
  resolve ID --step N [--question Q] --outcome succeeded|failed|retry (--key FILE | --by NAME) [--external-id X] [--note TEXT]
  cancel ID                             cancel a plan: it compensates what it did (terminate would not)
  exceptions [--older-than 15m]         the ledger's exception queue, with a hint per row
  audit KEY                             a ledger row and its audit trail of human decisions
  report [--since 24h]                  the seeds' operating figures for a window, from the ledger
  ledger purge [--older-than 720h]      remove final ledger entries past retention
  operator keygen --name NAME --out FILE   make an operator's signing key; prints the operators-file entry
  operator show --key FILE              print the operators-file entry of a key
  codec serve [--addr HOST:PORT]        the codec endpoint the Web UI calls to decrypt payloads for those with its token
sandbox:
  sandbox effects [--provider NAME]     committed rows in the providers' own stores
  sandbox fault --op OP --kind KIND [--count N] [--delay D]
  sandbox serve [--addr HOST:PORT]      run the sandbox providers standalone
demo:
  demo [--ui] [--json]                  run the stories on an embedded Temporal server
  bench [--rounds N] [--concurrency 1,10,50] [--json]   agentsaga against plain Temporal on one embedded server
  chaos [--plans N] [--seed S] [--json] randomized plans under faults, kills and a server restart; checks the invariants
agents:
  mcp (--http HOST:PORT | --stdio)      serve the tools to MCP clients, each call a turn of the caller's session
other:
  version                               which agentsaga this is (release, or the commit it was built from)

Every command takes --json for machine-readable output (errors too). Temporal is reached with
--address/--namespace (env TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE); the ledger with --ledger or
--data-dir (env AGENTSAGA_LEDGER, AGENTSAGA_DATA_DIR), as the worker finds it.`

// synopsis is the first line of each command's --help.
var synopsis = map[string]string{
	"run":             "run --plan FILE|- [--wait]: start a plan, or attach to the run of the same plan",
	"status":          "status ID: a plan's steps, decisions and open questions with their cards",
	"escalations":     "escalations: running plans that wait for a human, oldest open question first",
	"approve":         "approve ID --step N [--question Q] (--key FILE | --by NAME) [--reject] [--override] [--reason TEXT]: answer an open approval question",
	"resolve":         "resolve ID --step N [--question Q] --outcome succeeded|failed|retry (--key FILE | --by NAME) [--external-id X] [--note TEXT]: answer an open outcome or reversal question",
	"cancel":          "cancel ID: ask a plan to stop; it compensates what it did. (Terminating a workflow does NOT compensate.)",
	"exceptions":      "exceptions: the ledger's exception queue, each row with a hint that fits its tool",
	"audit":           "audit KEY: the ledger row of an operation key and its audit trail of human decisions",
	"report":          "report [--since 24h]: the seeds' operating figures for a window, from the ledger (first attempts, replays, unknown outcomes and time to settle, holds, people's decisions and wait, exception queue, amounts in uncertainty)",
	"ledger purge":    "ledger purge: remove final ledger entries completed longer ago than --older-than",
	"codec serve":     "codec serve: serve the codec endpoint the Temporal Web UI calls to show encrypted payloads (token in env AGENTSAGA_CODEC_TOKEN)",
	"operator keygen": "operator keygen --name NAME --out FILE: make an operator's Ed25519 signing key (file mode 0600) and print the entry for the worker's operators file",
	"operator show":   "operator show --key FILE: print the operators-file entry of an existing key",
	"sandbox effects": "sandbox effects: committed rows in the sandbox providers' own stores",
	"sandbox fault":   "sandbox fault --op OP --kind KIND: make the sandbox misbehave on the next calls",
	"sandbox serve":   "sandbox serve: run the sandbox providers standalone",
	"demo":            "demo: run the stories on an embedded Temporal server and check every count",
	"chaos":           "chaos [--plans N] [--seed S] [--workers N] [--short] [--json]: randomized plans under every sandbox fault, worker SIGKILLs and a Temporal restart; invariants checked in the providers' stores and the ledger (see README, Chaos run)",
	"bench":           "bench [--rounds N] [--concurrency 1,10,50] [--json]: agentsaga against plain Temporal on one embedded server in one process (see BENCHMARKS.md)",
	"version":         "version [--json]: print which agentsaga this is (the release set at build time, else the module version or commit from the build information)",
	"mcp":             "mcp (--http HOST:PORT | --stdio): serve the registered tools to MCP clients; each tools/call is one turn of the caller's AgentSession (see README, MCP gateway)",
}

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

// errHelp ends a command after its --help was printed; run returns nil.
var errHelp = errors.New("help printed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	err := run(ctx, args, os.Stdin, os.Stdout)
	stop()
	os.Exit(report(os.Stderr, err, wantsJSON(args)))
}

// report prints err (neutralised, or as JSON) and returns the exit code.
func report(w io.Writer, err error, asJSON bool) int {
	if err == nil {
		return 0
	}
	code := 1
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if asJSON {
		_ = printJSON(w, map[string]any{"error": err.Error(), "code": code})
		return code
	}
	fmt.Fprintln(w, "starter:", safe(err.Error()))
	return code
}

// wantsJSON reports whether args ask for JSON (--json, -json, --json=true),
// looking at flags before a "--" terminator.
func wantsJSON(args []string) bool {
	on := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		on = !hasVal || val == "true" || val == "1" || val == "t" || val == "TRUE" || val == "True" || val == "T"
	}
	return on
}

type command func(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error

func commands() map[string]command {
	return map[string]command{
		"run": cmdRun, "status": cmdStatus, "approve": cmdApprove, "resolve": cmdResolve, "cancel": cmdCancel,
		"escalations": cmdEscalations, "exceptions": cmdExceptions, "audit": cmdAudit, "ledger": cmdLedger,
		"operator": cmdOperator, "sandbox": cmdSandbox, "demo": cmdDemo, "mcp": cmdMCP, "codec": cmdCodec, "report": cmdReport,
		"chaos": cmdChaos, "bench": cmdBench,
		"version": cmdVersion,
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		if len(args) >= 2 && args[0] == "help" {
			return run(ctx, append(args[1:], "--help"), stdin, out)
		}
		fmt.Fprintln(out, usage)
		if len(args) == 0 {
			return usageErr("no command given")
		}
		return nil
	}
	c, ok := commands()[args[0]]
	if !ok {
		return usageErr("unknown command %q: run `starter help` for the list", args[0])
	}
	err := c(ctx, args[1:], stdin, out)
	if errors.Is(err, errHelp) {
		return nil
	}
	return err
}

// isHelp reports whether a is a request for help.
func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" || a == "help" }

// subcommands handles a command group (ledger, sandbox, operator): with no
// subcommand it is a usage error, with --help it lists the subcommands.
func subcommands(group string, args []string, out io.Writer, names ...string) (string, error) {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprintf(out, "usage: starter %s <subcommand> [flags]\n\n", group)
		for _, n := range names {
			fmt.Fprintf(out, "  %s\n", synopsis[group+" "+n])
		}
		if len(args) == 0 {
			return "", usageErr("%s: give a subcommand: %s", group, strings.Join(names, ", "))
		}
		return "", errHelp
	}
	for _, n := range names {
		if args[0] == n {
			return n, nil
		}
	}
	return "", usageErr("%s: unknown subcommand %q: give %s", group, args[0], strings.Join(names, ", "))
}

// parse parses flags, allowing positional arguments before and after them.
// --help (or -h) prints the command's synopsis and flags to out and returns
// errHelp, which run turns into exit 0.
func parse(fs *flag.FlagSet, args []string, out io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printHelp(fs, out)
				return nil, errHelp
			}
			return nil, usageErr("%s: %v (see starter %s --help)", fs.Name(), err, fs.Name())
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func printHelp(fs *flag.FlagSet, out io.Writer) {
	s := synopsis[fs.Name()]
	if s == "" {
		s = fs.Name()
	}
	fmt.Fprintf(out, "usage: starter %s\n\nflags:\n", s)
	fs.SetOutput(out)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// printJSON writes v as indented JSON, with every character a terminal
// would obey escaped (see jsonSafe).
func printJSON(out io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = out.Write(append(jsonSafe(b), '\n'))
	return err
}

// printJSONCompact writes v as one line of JSON, escaped as printJSON does.
func printJSONCompact(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = out.Write(append(jsonSafe(b), '\n'))
	return err
}

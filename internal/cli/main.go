// Package cli is the planner's and operator's command line of agentsaga:
// start plans, read their status, answer their open questions (approve,
// resolve), cancel them, list what waits for a human, read the ledger and its
// audit trail, make operator keys, and serve the tools over MCP. agentsaga's
// own starter adds the dev commands (demo, sandbox, chaos, bench) through
// Config.Commands; a team's main reaches it through app.Run. It is not API:
// app is the public door.
//
// Exit codes: 0 ok (and --help), 1 the operation failed (a decision refused
// by the workflow among them), 2 bad usage or input. With --json, results go
// to standard output as JSON and an error goes to standard error as
// {"error": "...", "code": N}.
package cli

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

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
)

const usage = `usage: starter <command> [flags]     (starter <command> --help lists a command's flags)

planner:
  run --plan FILE|- [--wait]            start a plan (or attach to the same plan); prints workflow ID, request ID, UI link
operator:
  status ID                             a plan's steps, decisions and open questions with their cards
  escalations                           running plans that wait for a human, oldest open question first
  console [--listen 127.0.0.1:8235] (--key FILE | --by NAME)   the same questions in a browser on this machine, decided from there
  approve ID --step N [--question Q] (--key FILE | --by NAME) [--reject] [--override] [--reason TEXT]
  resolve ID --step N [--question Q] --outcome succeeded|failed|retry (--key FILE | --by NAME) [--external-id X] [--note TEXT]
  cancel ID                             cancel a plan: it compensates what it did (terminate would not)
  exceptions [--older-than 15m]         the ledger's exception queue, with a hint per row
  audit KEY                             a ledger row and its audit trail of human decisions
  report [--since 24h]                  the seeds' operating figures for a window, from the ledger
  ledger purge [--older-than 720h]      remove final ledger entries past retention
  ledger migrate --ledger OWNER-DSN [--grant-runtime ROLE]   migrate a PostgreSQL ledger as its owner (back it up first)
  operator keygen --name NAME --out FILE   make an operator's signing key; prints the operators-file entry
  operator show --key FILE              print the operators-file entry of a key
  cluster setup [--retention 720h]      create the namespace and its search attributes, checked against what exists
  cluster certs --out DIR               make the CA and the mTLS certificates of docker-compose.yml (kept when present)
  codec serve [--addr HOST:PORT]        the codec endpoint the Web UI calls to decrypt payloads for those with its token
  codec keygen --out FILE [--rotate OLD]   make a codec keyring (or a rotated one); codec token --out FILE its token
agents:
  mcp (--http HOST:PORT | --stdio)      serve the tools to MCP clients, each call a turn of the caller's session
tools:
  tools probe --tools FILE --args NAME=JSON   send real requests to a staging provider: does it honour the key, how long
                                        does its lookup lag, does an abandoned request still land; the safe settings
other:
  version                               which agentsaga this is (release, or the commit it was built from)
%s
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
	"console":         "console [--listen 127.0.0.1:8235] (--key FILE | --by NAME): the open questions in a browser on this machine (loopback only, a token per start), each with its card, age and expiry; approve, reject, override or resolve them there, signed with your key as approve and resolve sign",
	"cancel":          "cancel ID: ask a plan to stop; it compensates what it did. (Terminating a workflow does NOT compensate.)",
	"exceptions":      "exceptions: the ledger's exception queue, each row with a hint that fits its tool",
	"audit":           "audit KEY: the ledger row of an operation key and its audit trail of human decisions",
	"report":          "report [--since 24h]: the seeds' operating figures for a window, from the ledger (first attempts, replays, unknown outcomes and time to settle, holds, people's decisions and wait, exception queue, amounts in uncertainty)",
	"ledger purge":    "ledger purge: remove final ledger entries completed longer ago than --older-than",
	"codec serve":     "codec serve: serve the codec endpoint the Temporal Web UI calls to show encrypted payloads (token from --token-file or env AGENTSAGA_CODEC_TOKEN)",
	"cluster setup":   "cluster setup [--retention 720h] [--update-retention]: prepare a Temporal namespace for agentsaga (create it with a retention, add the search attributes), checked against what exists; safe to run again",
	"ledger migrate":  "ledger migrate --ledger OWNER-DSN [--grant-runtime ROLE]: bring a PostgreSQL ledger's schema up to this binary's as the role that owns it (back the database up first: pg_dump), then give the worker's ROLE its privileges (the audit trail: SELECT and INSERT only)",
	"cluster certs":   "cluster certs --out DIR [--validity 8760h] [--renew] [--owner NAME=UID[:GID]]: make a CA and the mutual-TLS certificates of docker-compose.yml (ECDSA P-256, SANs of the compose service names, localhost and 127.0.0.1); existing files are kept",
	"codec keygen":    "codec keygen --out FILE [--id ID] [--rotate OLD-FILE]: make a codec keyring file (mode 0600), or a rotated one holding the old keys",
	"codec token":     "codec token --out FILE: make a random token file (mode 0600) for codec serve --token-file",
	"operator keygen": "operator keygen --name NAME --out FILE: make an operator's Ed25519 signing key (file mode 0600) and print the entry for the worker's operators file",
	"operator show":   "operator show --key FILE: print the operators-file entry of an existing key",
	"version":         "version [--json]: print which agentsaga this is (the release set at build time, else the module version or commit from the build information)",
	"mcp":             "mcp (--http HOST:PORT | --stdio): serve the registered tools to MCP clients; each tools/call is one turn of the caller's AgentSession (see docs/agents.md, MCP gateway)",
	"tools probe":     "tools probe --tools FILE --args NAME=JSON [--tool NAME] [--lag-max 30s] [--settle-max D]: probe each write tool given --args against its provider (a staging one: every probe call is a real effect) and print one verdict per promise (key, lookup, absent, settle) with its evidence and the settings that are safe; exit 1 when the provider contradicts the catalogue",
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

// Command is one command: it parses its own args (flags and positional
// arguments), reads stdin where it takes input, and writes to out.
type Command func(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error

// Config is what a main adds to the commands.
type Config struct {
	// Tools are Go tools the commands know besides the catalogue files of
	// --tools (or $AGENTSAGA_TOOLS): run checks plans against them, mcp
	// serves them, exceptions hints by them.
	Tools []tool.Tool
	// DemoTools, when set, gives the tools when neither --tools nor Tools
	// name any (agentsaga's own starter: the demo tools).
	DemoTools func() (*tool.Registry, error)
	// Commands are further commands by name (agentsaga's own starter: demo,
	// sandbox, chaos, bench), with Synopsis their --help lines (a group's
	// subcommands as "group sub") and Usage their lines in the list.
	Commands map[string]Command
	Synopsis map[string]string
	Usage    string
	// Name is the command's name in usage and help (default "starter").
	Name string
}

// progName is the command's name in usage and help; Run sets it.
var progName = "starter"

type configKey struct{}

// configFrom returns the Config Main or Run put in ctx (the zero Config
// when there is none: tests calling run).
func configFrom(ctx context.Context) Config {
	c, _ := ctx.Value(configKey{}).(Config)
	return c
}

// Main runs the command of os.Args under a context that ends on SIGINT or
// SIGTERM and returns the exit code (see the package doc).
func Main(cfg Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	return Report(os.Stderr, Run(ctx, args, os.Stdin, os.Stdout, cfg), WantsJSON(args))
}

// Run runs the command args name with cfg's tools and commands; Report
// turns its error into the exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, out io.Writer, cfg Config) error {
	if cfg.Name != "" {
		progName = cfg.Name
	}
	for k, v := range cfg.Synopsis {
		synopsis[k] = v
	}
	return run(context.WithValue(ctx, configKey{}, cfg), args, stdin, out)
}

// Report prints err (neutralised, or as JSON) to w and returns the exit
// code: 0 for nil, 2 for a usage error, else 1.
func Report(w io.Writer, err error, asJSON bool) int { return report(w, err, asJSON) }

// WantsJSON reports whether args ask for JSON output (--json).
func WantsJSON(args []string) bool { return wantsJSON(args) }

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
	var ce *catalog.Error
	if errors.As(err, &ce) {
		// A refused catalogue (the team's own file) names one problem per
		// line: each line neutralised on its own.
		lines := strings.Split(err.Error(), "\n")
		for i, l := range lines {
			lines[i] = safe(l)
		}
		fmt.Fprintln(w, progName+":", strings.Join(lines, "\n"))
		return code
	}
	fmt.Fprintln(w, progName+":", safe(err.Error()))
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

func commands(ctx context.Context) map[string]Command {
	m := map[string]Command{
		"run": cmdRun, "status": cmdStatus, "approve": cmdApprove, "resolve": cmdResolve, "cancel": cmdCancel,
		"escalations": cmdEscalations, "exceptions": cmdExceptions, "audit": cmdAudit, "ledger": cmdLedger,
		"operator": cmdOperator, "cluster": cmdCluster, "mcp": cmdMCP, "codec": cmdCodec, "report": cmdReport,
		"version": cmdVersion, "console": cmdConsole, "tools": cmdTools,
	}
	for name, c := range configFrom(ctx).Commands {
		m[name] = c
	}
	return m
}

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || args[0] == "help" {
		if len(args) >= 2 && args[0] == "help" {
			return run(ctx, append(args[1:], "--help"), stdin, out)
		}
		fmt.Fprintln(out, strings.ReplaceAll(fmt.Sprintf(usage, configFrom(ctx).Usage), "starter ", progName+" "))
		if len(args) == 0 {
			return usageErr("no command given")
		}
		return nil
	}
	c, ok := commands(ctx)[args[0]]
	if !ok {
		return usageErr("unknown command %q: run `%s help` for the list", args[0], progName)
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
		fmt.Fprintf(out, "usage: %s %s <subcommand> [flags]\n\n", progName, group)
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
	fmt.Fprintf(out, "usage: %s %s\n\nflags:\n", progName, s)
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

// The helpers below are for Config.Commands, so a main's own commands parse,
// fail and print as these do.

// Parse parses a command's flags as the commands do (positional arguments
// before and after them; --help prints the synopsis and the flags).
func Parse(fs *flag.FlagSet, args []string, out io.Writer) ([]string, error) {
	return parse(fs, args, out)
}

// UsageErr is a usage error (exit 2) worded by format.
func UsageErr(format string, args ...any) error { return usageErr(format, args...) }

// Exit is err with its exit code.
func Exit(code int, err error) error { return &exitError{code: code, err: err} }

// PrintJSON writes v as indented JSON, terminal controls escaped.
func PrintJSON(out io.Writer, v any) error { return printJSON(out, v) }

// Safe neutralises what a terminal would obey in s.
func Safe(s string) string { return safe(s) }

// Subcommands picks group's subcommand among names from args (see the
// ledger and operator groups).
func Subcommands(group string, args []string, out io.Writer, names ...string) (string, error) {
	return subcommands(group, args, out, names...)
}

// EnvOr is the environment variable name, or def when it is empty.
func EnvOr(name, def string) string { return envOr(name, def) }

// FlagGiven reports whether the command line set flag name (not only its
// default).
func FlagGiven(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

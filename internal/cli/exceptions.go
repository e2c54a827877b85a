package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/ledger/ledgerpg"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// DefaultRetention is how long final ledger entries are kept: longer than
// any retry or reconcile window.
const DefaultRetention = 30 * 24 * time.Hour

// ledgerFlags find the ledger as the worker does: --ledger (env
// AGENTSAGA_LEDGER), else SQLite under --data-dir (env AGENTSAGA_DATA_DIR,
// else the user cache directory).
type ledgerFlags struct {
	dsn     string
	dataDir string
}

func (l *ledgerFlags) register(fs *flag.FlagSet) {
	config.RegisterLedger(fs, &l.dsn, "default sqlite under --data-dir, as the worker")
	fs.StringVar(&l.dataDir, "data-dir", config.DefaultDataDir(), "the worker's data directory, where its SQLite ledger is (env "+config.EnvDataDir+")")
}

// resolve returns the DSN to open; a SQLite ledger must exist already, so a
// wrong directory is reported instead of creating an empty ledger.
func (l *ledgerFlags) resolve() (string, error) {
	dsn, err := config.LedgerDSN(l.dsn)
	if err != nil {
		return "", usageErr("%v", err)
	}
	if dsn == "" {
		dsn = config.DefaultLedger(l.dataDir)
	}
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		path, _, _ = strings.Cut(path, "?")
		if _, err := os.Stat(path); err != nil {
			return "", usageErr("no ledger at %s: give the worker's --data-dir (or env %s), or --ledger (env %s); the worker keeps it at <data-dir>/ledger.db", path, config.EnvDataDir, config.EnvLedger)
		}
	}
	return dsn, nil
}

func (l *ledgerFlags) open(ctx context.Context) (ledger.Store, error) {
	dsn, err := l.resolve()
	if err != nil {
		return nil, err
	}
	store, err := ledgerdb.Open(ctx, dsn)
	if err != nil {
		return nil, usageErr("open ledger %s: %v", config.SafeDSN(dsn), err)
	}
	return store, nil
}

// exception is one row of the exception queue.
type exception struct {
	Key        string        `json:"operation_key"`
	Tool       string        `json:"tool"`
	Status     ledger.Status `json:"status"`
	WorkflowID string        `json:"workflow_id"`
	Step       int           `json:"step,omitempty"`
	Age        string        `json:"age"`
	Summary    string        `json:"summary,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	Suggested  string        `json:"suggested_action"`
}

// stepOf reads the step number from an operation key
// {session}:{turn}:{step}:{tool}[:compensate]; 0 when it is not one.
func stepOf(key string) int {
	parts := strings.Split(key, ":")
	if len(parts) < 4 {
		return 0
	}
	var n int
	if _, err := fmt.Sscanf(parts[2], "%d", &n); err != nil || n < 1 {
		return 0
	}
	return n
}

// suggest is the hint for one exception row: it fits how the row came to
// need a human and whether its tool can look itself up at the provider.
func suggest(op ledger.Operation, specs tool.Catalog) string {
	step := "N"
	if n := stepOf(op.Key); n > 0 {
		step = fmt.Sprint(n)
	}
	wf := op.WorkflowID
	if wf == "" {
		wf = "ID"
	}
	status := "starter status " + wf
	resolve := func(outcomes string) string {
		return fmt.Sprintf("starter resolve %s --step %s --outcome %s --key FILE --note TEXT", wf, step, outcomes)
	}
	spec, known := specs.Spec(op.ActionType)
	reversal := tool.IsReversalKey(op.Key)
	switch {
	case op.ActionType == ledger.NotifyActionType:
		return fmt.Sprintf("the webhook has not acknowledged this notification (%s): the worker posts it again with backoff for its --notify-retry-for (default 24h) and the row leaves this list once a post gets a 2xx; check the receiver (worker metric agentsaga_notifications_total{result=\"failed\"}); nothing here needs a decision: the question itself is answered in `starter console` or by `%s`", op.ErrorCode, status)
	case op.HoldReason != "":
		return fmt.Sprintf("held before any call (%s); read the card in `%s`, then starter approve %s --step %s --override --key FILE if it must run anyway, or --reject", op.HoldReason, status, wf, step)
	case op.Status == ledger.CompensationFailed || reversal && op.Status == ledger.NeedsHuman:
		return fmt.Sprintf("the reversal %s failed: reverse it by hand at the provider, then %s (succeeded: reversed by hand, retry: try the reversal again)", op.Key, resolve("succeeded|retry"))
	case op.Status == ledger.InProgress:
		return "an executor took the lease and vanished; the workflow's retry takes it over after the lease ends; check the worker's logs and `" + status + "`"
	case known && spec.NoLookup && (op.Status == ledger.NeedsHuman || op.Status == ledger.Unknown):
		return fmt.Sprintf("%s cannot be looked up by key: check the provider's own records (for mail, the relay log) for key %s, then %s; succeeded is recorded as your assertion", op.ActionType, op.Key, resolve("succeeded|failed|retry"))
	case op.Status == ledger.Unknown:
		return fmt.Sprintf("the workflow reconciles key %s with the provider until its window closes, then asks; to decide after it asks: %s --external-id ID for succeeded (checked at the provider)", op.Key, resolve("succeeded|failed|retry"))
	case known:
		return fmt.Sprintf("reconcile could not settle key %s: look it up at the provider, then %s --external-id ID for succeeded (checked at the provider)", op.Key, resolve("succeeded|failed|retry"))
	}
	return fmt.Sprintf("find out what happened to key %s at the provider, then %s", op.Key, resolve("succeeded|failed|retry"))
}

func exceptionRows(ops []ledger.Operation, specs tool.Catalog, at time.Time) []exception {
	rows := []exception{}
	for _, op := range ops {
		reason := op.HoldReason
		if reason == "" {
			reason = op.ErrorCode
		}
		rows = append(rows, exception{Key: op.Key, Tool: op.ActionType, Status: op.Status, WorkflowID: op.WorkflowID, Step: stepOf(op.Key),
			Age: age(op.CreatedAt, at), Summary: op.Summary, Reason: reason, Suggested: suggest(op, specs)})
	}
	return rows
}

func printExceptions(out io.Writer, rows []exception, asJSON bool) error {
	if asJSON {
		return printJSON(out, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "the exception queue is empty")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATUS\tAGE\tPLAN\tSUMMARY\tREASON")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", safe(r.Key), safe(string(r.Status)), r.Age, safe(r.WorkflowID), safe(r.Summary), safe(r.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	for _, r := range rows {
		fmt.Fprintf(out, "%s: %s\n", safe(r.Key), safe(r.Suggested))
	}
	return nil
}

func cmdExceptions(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("exceptions", flag.ContinueOnError)
	var l ledgerFlags
	l.register(fs)
	older := fs.Duration("older-than", 15*time.Minute, "also list unknown operations unchanged for this long (needs_human, held and compensation_failed rows, and unknown rows of tools that cannot look themselves up, are listed at once)")
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("exceptions: takes no arguments (see starter exceptions --help)")
	}
	store, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	ops, err := store.Exceptions(ctx, ledger.ExceptionFilter{})
	if err != nil {
		return err
	}
	specs := exceptionSpecs(ctx)
	return printExceptions(out, exceptionRows(queue(ops, specs, *older, now()), specs, now()), *asJSON)
}

// queue keeps what waits for a human now: every row but the unknown ones
// still inside --older-than, except those of a tool that cannot look itself
// up (its unknown outcome goes to a human at once).
func queue(ops []ledger.Operation, specs tool.Catalog, older time.Duration, at time.Time) []ledger.Operation {
	var out []ledger.Operation
	for _, op := range ops {
		if op.ActionType == ledger.NotifyActionType {
			// Posted again every few minutes: its age counts from the
			// first try.
			if at.Sub(op.CreatedAt) >= older {
				out = append(out, op)
			}
			continue
		}
		if op.Status == ledger.Unknown && at.Sub(op.UpdatedAt) < older {
			if spec, ok := specs.Spec(op.ActionType); !ok || !spec.NoLookup {
				continue
			}
		}
		out = append(out, op)
	}
	return out
}

func cmdAudit(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	var l ledgerFlags
	l.register(fs)
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("audit: give one operation key, like sess-42:1:3:apply_refund (see starter audit --help)")
	}
	store, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return audit(ctx, store, pos[0], out, *asJSON)
}

// audit prints an operation's ledger row and its audit trail. A key with no
// row but with decisions (an approval rejected, expired or refused before
// any call was made) prints the trail alone: what people did is on record
// even when nothing ran.
func audit(ctx context.Context, store ledger.Store, key string, out io.Writer, asJSON bool) error {
	op, err := store.Get(ctx, key)
	found := err == nil
	if err != nil && !errors.Is(err, ledger.ErrNotFound) {
		return err
	}
	trail, err := store.Decisions(ctx, key)
	if err != nil {
		err = fmt.Errorf("read the audit trail of %s: %w", key, err)
		if found && !asJSON {
			printOperation(out, op)
		}
		return err
	}
	if !found && len(trail) == 0 {
		return &exitError{code: 1, err: fmt.Errorf("no operation with key %q in the ledger and no decision about it (keys look like sess-42:1:3:apply_refund; starter status ID lists a plan's keys)", key)}
	}
	if trail == nil {
		trail = []ledger.DecisionRecord{}
	}
	if asJSON {
		var row any
		if found {
			row = op
		}
		return printJSON(out, map[string]any{"operation": row, "decisions": trail})
	}
	if found {
		printOperation(out, op)
	} else {
		fmt.Fprintf(out, "operation %s  no call was made: it has no row in the ledger (the decisions below stopped it, or its question expired)\n", safe(key))
	}
	if len(trail) == 0 {
		fmt.Fprintln(out, "\nno human decision recorded")
		return nil
	}
	fmt.Fprintln(out, "\ndecisions, oldest first:")
	for _, d := range trail {
		printRecord(out, d)
	}
	return nil
}

func printOperation(out io.Writer, op ledger.Operation) {
	fmt.Fprintf(out, "operation %s  tool %s  status %s  attempts %d\n", safe(op.Key), safe(op.ActionType), safe(string(op.Status)), op.AttemptCount)
	row := func(label, v string) {
		if v != "" {
			fmt.Fprintf(out, "  %-12s %s\n", label, safe(v))
		}
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	row("summary", op.Summary)
	row("external id", op.ExternalID)
	row("error", op.ErrorCode)
	row("hold", op.HoldReason)
	row("plan", op.WorkflowID)
	row("request", op.RequestID)
	row("guard scope", op.GuardScope)
	row("created", ts(op.CreatedAt))
	row("updated", ts(op.UpdatedAt))
	row("completed", ts(op.CompletedAt))
	if op.ResolvedBy != "" {
		row("resolved", fmt.Sprintf("by %s at %s: %s", op.ResolvedBy, ts(op.ResolvedAt), op.ResolveNote))
	}
}

func printRecord(out io.Writer, d ledger.DecisionRecord) {
	who := d.By + " (unverified)"
	if d.Verified {
		who = d.By + " (verified)"
	}
	fmt.Fprintf(out, "  #%d %s %s by %s, question %s", d.ID, d.AppliedAt.UTC().Format(time.RFC3339), safe(d.Kind), safe(who), safe(d.QuestionID))
	if !d.SentAt.IsZero() {
		fmt.Fprintf(out, ", sent %s", d.SentAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintln(out)
	row := func(label, v string) {
		if v != "" {
			fmt.Fprintf(out, "      %-10s %s\n", label, safe(v))
		}
	}
	row("key", d.Key)
	row("outcome", strings.TrimSpace(d.Outcome+" "+d.ExternalID))
	row("note", d.Note)
	row("REFUSED", d.Refused)
	if len(d.Card) > 0 {
		var c workflows.Card
		if json.Unmarshal(d.Card, &c) == nil {
			row("card", strings.Join(nonEmpty(c.Change, c.Object, c.Amount, c.Rule, c.Clash), "; "))
		}
	}
	row("card seen", cardSeen(d))
}

// cardSeen words the card digest a decision carried: the digest, and
// whether it is the digest of the card recorded beside it (the card the
// workflow asked with), or that the decider's client sent none.
func cardSeen(d ledger.DecisionRecord) string {
	switch {
	case d.CardDigest == "" && d.Refused == "" && d.Kind != "expire":
		return "no digest (the decider's client sent none)"
	case d.CardDigest == "":
		return ""
	}
	var c workflows.Card
	if len(d.Card) == 0 || json.Unmarshal(d.Card, &c) != nil {
		return d.CardDigest
	}
	if workflows.CardDigest(c) == d.CardDigest {
		return d.CardDigest + " (the card recorded here)"
	}
	return d.CardDigest + " (NOT the card recorded here: the decider's client showed another rendering)"
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

func cmdLedger(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	sub, err := subcommands("ledger", args, out, "purge", "migrate")
	if err != nil {
		return err
	}
	if sub == "migrate" {
		return ledgerMigrate(ctx, args[1:], out)
	}
	fs := flag.NewFlagSet("ledger purge", flag.ContinueOnError)
	var l ledgerFlags
	l.register(fs)
	keep := fs.Duration("older-than", DefaultRetention, "remove final operations completed longer ago than this (at least 24h)")
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	pos, err := parse(fs, args[1:], out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("ledger purge: takes no arguments (see starter ledger purge --help)")
	}
	if *keep < 24*time.Hour {
		return usageErr("ledger purge: --older-than %s is shorter than a day; keep entries longer than any retry window", *keep)
	}
	store, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	n, err := store.Purge(ctx, now().Add(-*keep))
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, map[string]any{"purged": n, "older_than": keep.String()})
	}
	fmt.Fprintf(out, "purged %d final operation(s) completed more than %s ago; nothing unfinished was touched\n", n, *keep)
	return nil
}

// ledgerMigrate brings a PostgreSQL ledger's schema up to this binary's, as
// the role that owns it, and grants a worker's runtime role its privileges.
func ledgerMigrate(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ledger migrate", flag.ContinueOnError)
	var dsnFlag string
	config.RegisterLedger(fs, &dsnFlag, "the DSN of the role that owns the ledger; back the database up first: pg_dump")
	grant := fs.String("grant-runtime", "", "then give this role the worker's privileges on the ledger (no UPDATE, DELETE or TRUNCATE of the audit trail); again after each migration")
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("ledger migrate: takes no arguments (see starter ledger migrate --help)")
	}
	dsn, err := config.LedgerDSN(dsnFlag)
	if err != nil {
		return usageErr("ledger migrate: %v", err)
	}
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return usageErr("ledger migrate: give --ledger postgres://OWNER@HOST/DB (env %s or %s); a SQLite ledger is migrated by the worker when it opens it", config.EnvLedger, config.EnvLedgerFile)
	}
	from, to, err := ledgerpg.Migrate(ctx, dsn)
	if err != nil {
		return fmt.Errorf("ledger migrate %s: %w", config.SafeDSN(dsn), err)
	}
	if *grant != "" {
		if err := ledgerpg.GrantRuntime(ctx, dsn, *grant); err != nil {
			return fmt.Errorf("ledger migrate %s: %w", config.SafeDSN(dsn), err)
		}
	}
	if *asJSON {
		return printJSON(out, map[string]any{"from": from, "to": to, "granted": *grant})
	}
	fmt.Fprintf(out, "ledger %s: schema version %d -> %d", safe(config.SafeDSN(dsn)), from, to)
	if *grant != "" {
		fmt.Fprintf(out, "; role %s may read and write it, and append to the audit trail only", safe(*grant))
	}
	fmt.Fprintln(out)
	return nil
}

// exceptionSpecs are the specs the exception rows are hinted by: the tools
// of $AGENTSAGA_TOOLS and the Config's (or its demo tools); none when no
// tools are known here, and a row of a tool not known gets the general hint.
func exceptionSpecs(ctx context.Context) tool.Catalog {
	reg, err := toolRegistry(ctx, nil)
	if err != nil {
		return tool.Specs{}
	}
	return reg.Specs()
}

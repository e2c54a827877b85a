package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
)

// DefaultRetention is how long final ledger entries are kept: longer than
// any retry or reconcile window.
const DefaultRetention = 30 * 24 * time.Hour

func ledgerFlag(fs *flag.FlagSet) *string {
	def := os.Getenv(config.EnvLedger)
	if def == "" {
		def = config.DefaultLedger(config.DefaultDataDir())
	}
	return fs.String("ledger", def, "ledger DSN: sqlite:PATH or postgres://... (env "+config.EnvLedger+")")
}

// exception is one row of the exception queue.
type exception struct {
	Key        string        `json:"operation_key"`
	Tool       string        `json:"tool"`
	Status     ledger.Status `json:"status"`
	WorkflowID string        `json:"workflow_id"`
	Age        string        `json:"age"`
	Reason     string        `json:"reason,omitempty"`
	Suggested  string        `json:"suggested_action"`
}

func suggest(op ledger.Operation) string {
	resolve := fmt.Sprintf("starter resolve %s --step N --outcome succeeded|failed|retry --by NAME", op.WorkflowID)
	switch {
	case op.HoldReason != "":
		return fmt.Sprintf("review the hold, then starter approve %s --step N --by NAME (or --reject)", op.WorkflowID)
	case op.Status == ledger.CompensationFailed:
		return "reverse it by hand or retry the reversal: " + resolve
	case op.Status == ledger.Unknown:
		return "look the key up at the provider; the workflow keeps reconciling until its window closes, then asks: " + resolve
	}
	return "find out what happened at the provider, then: " + resolve
}

func cmdExceptions(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("exceptions", flag.ContinueOnError)
	dsn := ledgerFlag(fs)
	older := fs.Duration("older-than", 15*time.Minute, "list unknown operations older than this")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	store, err := ledgerdb.Open(ctx, *dsn)
	if err != nil {
		return usageErr("%v", err)
	}
	defer store.Close()
	ops, err := store.Exceptions(ctx, ledger.ExceptionFilter{UnknownOlderThan: *older})
	if err != nil {
		return err
	}
	now := time.Now()
	rows := []exception{}
	for _, op := range ops {
		reason := op.HoldReason
		if reason == "" {
			reason = op.ErrorCode
		}
		rows = append(rows, exception{Key: op.Key, Tool: op.ActionType, Status: op.Status, WorkflowID: op.WorkflowID,
			Age: now.Sub(op.CreatedAt).Round(time.Second).String(), Reason: reason, Suggested: suggest(op)})
	}
	if *asJSON {
		return printJSON(out, rows)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATUS\tAGE\tPLAN\tREASON\tSUGGESTED")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Key, r.Status, r.Age, r.WorkflowID, r.Reason, r.Suggested)
	}
	return tw.Flush()
}

func cmdLedger(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	if len(args) == 0 || args[0] != "purge" {
		return usageErr("ledger: the only subcommand is purge")
	}
	fs := flag.NewFlagSet("ledger purge", flag.ContinueOnError)
	dsn := ledgerFlag(fs)
	keep := fs.Duration("older-than", DefaultRetention, "remove final operations completed longer ago than this")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *keep < 24*time.Hour {
		return usageErr("ledger purge: --older-than %s is shorter than a day; keep entries longer than any retry window", *keep)
	}
	store, err := ledgerdb.Open(ctx, *dsn)
	if err != nil {
		return usageErr("%v", err)
	}
	defer store.Close()
	n, err := store.Purge(ctx, time.Now().Add(-*keep))
	if err != nil {
		return err
	}
	if *asJSON {
		return printJSON(out, map[string]any{"purged": n, "older_than": keep.String()})
	}
	fmt.Fprintf(out, "purged %d final operation(s) completed more than %s ago; nothing unfinished was touched\n", n, *keep)
	return nil
}

package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentsaga/agentsaga/ledger"
)

// reportNotes say what the report's figures measure and what they leave
// out; they are printed with the figures, in text and JSON.
var reportNotes = []string{
	"replays count the duplicates the ledger absorbed (a claim answered from the stored result, nothing called); the same plan started twice attaches to its Temporal run and never reaches the ledger, so it is not counted here",
	"guard-refused calls are not stored in the ledger; the worker's metric agentsaga_tool_calls_total{outcome=\"guard_refused\"} counts them. Held calls are stored and counted here",
	"human wait minutes run from a question's opening (as recorded with the decision; else when the outcome became unknown, or when the held call was stored) to the applied decision: how long plans waited for people, an upper bound of their working time; decisions without any opening time are counted as unmeasured",
	"amounts in uncertainty are read from the operations' one-line summaries (tool, object, amount, key)",
	"the exception queue and the amounts in uncertainty are the ledger now; every other figure covers the window",
}

// reportView is what `starter report --json` prints: the ledger's report
// with the shares worked out and the notes.
type reportView struct {
	ledger.Report
	Window            string   `json:"window"`
	FirstAttemptShare float64  `json:"first_attempt_share"`
	Notes             []string `json:"notes"`
}

func cmdReport(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var l ledgerFlags
	l.register(fs)
	since := fs.Duration("since", 24*time.Hour, "the window: operations created, and decisions applied, this long ago or later (0: everything the ledger holds)")
	asJSON := fs.Bool("json", false, "print JSON (errors too, on standard error)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("report: takes no arguments (see starter report --help)")
	}
	if *since < 0 {
		return usageErr("report: --since %s is negative: give how far back the window reaches, such as 24h", *since)
	}
	store, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	var from time.Time
	if *since > 0 {
		from = now().Add(-*since)
	}
	rep, err := store.Report(ctx, from)
	if err != nil {
		return fmt.Errorf("read the report from the ledger: %w", err)
	}
	v := reportView{Report: rep, Window: window(*since), FirstAttemptShare: rep.Totals.FirstAttemptShare(), Notes: reportNotes}
	if *asJSON {
		return printJSON(out, v)
	}
	return printFigures(out, v)
}

func window(since time.Duration) string {
	if since == 0 {
		return "everything in the ledger"
	}
	return "the last " + since.String()
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

func printFigures(out io.Writer, v reportView) error {
	r := v.Report
	fmt.Fprintf(out, "agentsaga report: %s (read %s)\n\n", v.Window, r.At.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TOOL\tOPERATIONS\tFIRST ATTEMPT\tREPLAYS\tUNKNOWN\tFAILED\tCOMPENSATED\t")
	for _, t := range append(append([]ledger.ToolFigures{}, r.Tools...), withName(r.Totals, "total")) {
		fmt.Fprintf(tw, "%s\t%d\t%d (%s)\t%d\t%d\t%d\t%d\t\n", safe(t.Tool), t.Operations, t.FirstAttempt, pct(t.FirstAttemptShare()),
			t.Replays, t.Unknown, t.Failed, t.Compensated)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	u := r.Unknown
	fmt.Fprintf(out, "\nshare done on the first attempt   %s (%d of %d)\n", pct(v.FirstAttemptShare), r.Totals.FirstAttempt, r.Totals.Operations)
	fmt.Fprintf(out, "duplicates absorbed (replays)     %d\n", r.Totals.Replays)
	fmt.Fprintf(out, "unknown outcomes                  %d: %d settled by reconcile, %d by a person, %d open\n", u.Total, u.ByReconcile, u.ByHuman, u.Open)
	fmt.Fprintf(out, "mean time to settle               %s (reconcile %s, person %s)\n", secs(u.MeanSettleSeconds), secs(u.MeanReconcileSeconds), secs(u.MeanHumanSettleSeconds))
	fmt.Fprintf(out, "repeats stopped by guards         %d held: %d stopped, %d run after an override (refused calls are not stored)\n", r.Held.Held, r.Held.Stopped, r.Held.RunAfterOverride)
	h := r.Humans
	fmt.Fprintf(out, "needed a person                   %s (%d operations, %d decisions; why: %s)\n", pct(h.Share), h.Operations, h.Decisions, counts(h.Why))
	fmt.Fprintf(out, "decisions by kind                 %s; %d refused, %d expired\n", counts(h.ByKind), h.Refused, h.Expired)
	fmt.Fprintf(out, "human wait                        %.1f minutes over %d decisions (%d unmeasured)\n", h.WaitMinutes, h.Measured, h.Unmeasured)
	var q []string
	for _, e := range r.Queue {
		s := fmt.Sprintf("%s %d", e.Kind, e.Count)
		if e.Count > 0 {
			s += " (oldest " + secs(e.OldestAgeSeconds) + ")"
		}
		q = append(q, s)
	}
	fmt.Fprintf(out, "exception queue now               %s\n", strings.Join(q, ", "))
	var amounts []string
	for _, a := range r.Uncertain.Amounts {
		amounts = append(amounts, fmt.Sprintf("%s minor units of %s in %d", formatMinorUnits(a.Minor), safe(a.Currency), a.Operations))
	}
	if len(amounts) == 0 {
		amounts = []string{"none"}
	}
	fmt.Fprintf(out, "held in uncertainty now           %d operations: %s; %d without an amount\n", r.Uncertain.Operations, strings.Join(amounts, ", "), r.Uncertain.WithoutAmount)
	fmt.Fprintln(out, "\nnotes:")
	for _, n := range v.Notes {
		fmt.Fprintf(out, "  - %s\n", n)
	}
	return nil
}

func withName(t ledger.ToolFigures, name string) ledger.ToolFigures {
	t.Tool = name
	return t
}

func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", safe(k), m[k])
	}
	return strings.Join(parts, ", ")
}

// formatMinorUnits writes an integer with thousands separators.
func formatMinorUnits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

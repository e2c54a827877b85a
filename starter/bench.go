package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/agentsaga/agentsaga/internal/bench"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/redact"
)

func cmdBench(ctx context.Context, args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON (errors too, on standard error)")
	rounds := fs.Int("rounds", 3, "alternating rounds per plan shape and concurrency (each round: one batch per side)")
	concurrency := fs.String("concurrency", "1,10,50", "comma-separated numbers of plans in flight at once")
	plans := fs.Int("plans", 0, "plans per batch (0: max(50, 4 x concurrency))")
	waiting := fs.Int("waiting", 200, "plans waiting for a human in the memory measurement (0 skips it)")
	starts := fs.Int("starts", 1000, "concurrent starts of one plan counted at the provider (0 skips it)")
	ledgerOps := fs.Int("ledger-ops", 1000, "ledger claim+complete pairs measured per driver (0 skips them)")
	growth := fs.String("ledger-growth", "", "also measure ledger claims as the ledger grows to these row counts, comma-separated (such as 1000,100000,1000000; with --postgres in a schema of its own, dropped after)")
	growthOps := fs.Int("growth-ops", 200, "claims of each kind measured at each --ledger-growth size")
	phases := fs.Int("phases", 50, "sequential one-step plans per side split into phases by their event times (0 skips them)")
	durable := fs.Bool("durable", false, "keep Temporal, the sandbox providers and the ledger on files in a temporary directory (each commit fsynced), as a production server would; default: Temporal and the providers in memory, the ledger on a file")
	postgres := fs.String("postgres", "", "also measure the ledger on this PostgreSQL DSN (rows are left under keys bench:...)")
	cpuprofile := fs.String("cpuprofile", "", "write each side's CPU profile at each shape and concurrency into this directory (agentsaga-3steps-c10.pprof, plain-3steps-c10.pprof; read with go tool pprof)")
	noSplit := fs.Bool("no-cpu-split", false, "do not profile the batches to split each side's CPU by component")
	address := fs.String("address", "", "measure on this Temporal cluster (host:port; prepared with `starter cluster setup`) instead of an embedded server: both sides' workers run here, the server's CPU is not counted")
	namespace := fs.String("namespace", "", "with --address: the namespace (`starter cluster setup` prepared it)")
	commitSplit := fs.Bool("commit-split", false, "also run a third side in every round, agentsaga on a worker of its own whose ledger skips the claim and completion commits (it keeps NO promise; nothing else runs on its task queue), to split agentsaga's CPU into those commits, measured where they run, and the rest")
	serverWork := fs.Int("server-work", 5, "plans per side and shape whose server work (requests, persistence and visibility writes, payload bytes) is counted, one at a time, on a second embedded server with its metrics on, after the timed batches (0 skips it; skipped with --address)")
	ledgerDSN := fs.String("ledger", "", "the ledger agentsaga's worker uses (postgres://... or sqlite:...; default SQLite in a temporary directory)")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("bench: takes no arguments (see starter bench --help)")
	}
	o := bench.Options{Rounds: *rounds, PlansPerBatch: *plans, WaitingPlans: skip(*waiting), DuplicateStarts: skip(*starts),
		LedgerOps: skip(*ledgerOps), PhasePlans: skip(*phases), PostgresDSN: *postgres, NoCPUSplit: *noSplit, ProfileDir: *cpuprofile}
	if *cpuprofile != "" && *noSplit {
		return usageErr("bench: --cpuprofile needs the batches profiled: drop --no-cpu-split")
	}
	if *cpuprofile != "" {
		if err := os.MkdirAll(*cpuprofile, 0o755); err != nil {
			return fmt.Errorf("bench: --cpuprofile %s: %w", *cpuprofile, err)
		}
	}
	if *rounds < 1 || *plans < 0 {
		return usageErr("bench: --rounds must be at least 1 and --plans not negative")
	}
	for _, c := range strings.Split(*concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return usageErr("bench: --concurrency %q: give positive numbers separated by commas, such as 1,10,50", *concurrency)
		}
		o.Concurrency = append(o.Concurrency, n)
	}
	if *growth != "" {
		for _, c := range strings.Split(*growth, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || n < 1 || n > 10_000_000 {
				return usageErr("bench: --ledger-growth %q: give row counts from 1 to 10000000 separated by commas, such as 1000,100000,1000000", *growth)
			}
			o.GrowthSizes = append(o.GrowthSizes, n)
		}
	}
	if *growthOps < 1 || *growthOps > 100_000 {
		return usageErr("bench: --growth-ops must be from 1 to 100000")
	}
	o.GrowthOps = *growthOps
	if (*address == "") != (*namespace == "") {
		return usageErr("bench: --address and --namespace go together (the cluster and the namespace `starter cluster setup` prepared)")
	}
	if *address != "" && *durable {
		return usageErr("bench: --durable is for the embedded server; a cluster keeps its own data")
	}
	o.Cluster = *address
	o.CommitSplit = *commitSplit
	if *serverWork < 0 || *serverWork > 1000 {
		return usageErr("bench: --server-work must be from 0 to 1000 plans")
	}
	if !*asJSON {
		if *address != "" {
			fmt.Fprintf(out, "connecting to Temporal at %s namespace %s, starting the sandbox providers and a worker ...\n", *address, *namespace)
		} else {
			fmt.Fprintln(out, "starting an embedded Temporal server, the sandbox providers and a worker ...")
		}
		o.Logger = slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	}
	so := devstack.Options{UIPort: -1, Address: *address, Namespace: *namespace, Ledger: *ledgerDSN}
	if *durable {
		dir, err := os.MkdirTemp("", "agentsaga-bench-")
		if err != nil {
			return fmt.Errorf("bench: make a data directory: %w", err)
		}
		defer os.RemoveAll(dir)
		so.DataDir = dir
	}
	o.Durable = *durable
	st, err := devstack.Start(ctx, so)
	if err != nil {
		return err
	}
	closed := false
	defer func() {
		if !closed {
			st.Close()
		}
	}()
	rep, err := bench.Run(ctx, st, o)
	if err != nil {
		return err
	}
	if *serverWork > 0 && *address == "" {
		// On a stack of its own: the timed batches ran without the
		// server's metrics, which cost it CPU.
		closed = true
		if err := st.Close(); err != nil {
			return err
		}
		if err := measureServerWork(ctx, &rep, so, *serverWork); err != nil {
			return err
		}
	}
	if *asJSON {
		return printJSON(out, rep)
	}
	bench.PrintTable(out, rep)
	return nil
}

// measureServerWork counts the server's work per plan of each shape rep
// measured, on a new in-memory stack like so with the server's metrics on.
func measureServerWork(ctx context.Context, rep *bench.Report, so devstack.Options, plans int) error {
	so.DataDir, so.ServerMetrics = "", true
	st, err := devstack.Start(ctx, so)
	if err != nil {
		return fmt.Errorf("bench: start the stack that counts the server's work: %w", err)
	}
	defer st.Close()
	var shapes []int // none: the bench's own
	for _, s := range rep.Shapes {
		shapes = append(shapes, s.Steps)
	}
	w, err := bench.MeasureServerWork(ctx, st, plans, shapes)
	if err != nil {
		return err
	}
	rep.AddServerWork(w)
	return nil
}

// skip turns a flag's 0 ("skip it") into the negative bench.Options wants.
func skip(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/chaos"
	"github.com/agentsaga/agentsaga/internal/cli"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/redact"
)

// chaosWorkerArg is the hidden first argument of `starter chaos` that makes
// the process a worker of a chaos run (the run re-executes this binary).
const chaosWorkerArg = "__worker"

func cmdChaos(ctx context.Context, args []string, stdin io.Reader, out io.Writer) error {
	if len(args) > 0 && args[0] == chaosWorkerArg {
		if code := chaos.RunWorker(ctx, stdin, out, os.Stderr); code != 0 {
			return cli.Exit(code, fmt.Errorf("chaos worker exited with code %d", code))
		}
		return nil
	}
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	plans := fs.Int("plans", chaos.DefaultPlans, "how many randomized plans to run")
	seed := fs.Uint64("seed", chaos.DefaultSeed, "seed of every random choice (plans, faults, kills, decisions); the same seed makes the same choices")
	workers := fs.Int("workers", chaos.DefaultWorkers, "worker processes polling at once (each killed one is replaced)")
	concurrency := fs.Int("concurrency", chaos.DefaultConcurrency, "plans in flight at once")
	short := fs.Bool("short", false, "the CI version: one random kill and no delay past a tool's timeout")
	dataDir := fs.String("data-dir", "", "keep Temporal's SQLite file, the ledger and the sandbox stores here (default: a temporary directory removed at the end)")
	settle := fs.Duration("settle", chaos.DefaultSettle, "how long to wait for the plans to end after the last one started")
	asJSON := fs.Bool("json", false, "print the report as JSON (errors too, on standard error)")
	verbose := fs.Bool("verbose", false, "log progress (kills, restart, plans started) to standard error")
	// On a cluster of one's own: --address names it (with --namespace,
	// --task-queue, TLS, --codec-keys), --ledger the ledger the run's
	// workers share, --sandbox-url a running sandbox.
	var t config.Temporal
	t.Register(fs)
	ledgerDSN := fs.String("ledger", "", "on a cluster: the ledger DSN the run's workers share (postgres://... or sqlite:...)")
	sandboxURL := fs.String("sandbox-url", "", "on a cluster: a running sandbox (`starter sandbox serve`); its admin token from env "+config.EnvSandboxToken)
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageErr("chaos: takes no arguments, got %q (see starter chaos --help)", pos[0])
	case *plans < 1:
		return usageErr("chaos: --plans %d: run at least 1 plan", *plans)
	case *workers < 1:
		return usageErr("chaos: --workers %d: run at least 1 worker process", *workers)
	case *concurrency < 1:
		return usageErr("chaos: --concurrency %d: let at least 1 plan run", *concurrency)
	}
	var cluster *chaos.Cluster
	if cli.FlagGiven(fs, "address") {
		if *ledgerDSN == "" || *sandboxURL == "" {
			return usageErr("chaos: --address runs on your cluster and needs --ledger (the ledger its workers share) and --sandbox-url (a running `starter sandbox serve`)")
		}
		if *dataDir != "" {
			return usageErr("chaos: --data-dir is for the embedded stack; on a cluster the data is the cluster's")
		}
		cluster = &chaos.Cluster{Temporal: t, LedgerDSN: *ledgerDSN, SandboxURL: *sandboxURL, SandboxToken: os.Getenv(config.EnvSandboxToken)}
	} else if *ledgerDSN != "" || *sandboxURL != "" {
		return usageErr("chaos: --ledger and --sandbox-url go with --address (a run on your cluster)")
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("chaos: find this binary to start worker processes from it: %w", err)
	}
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	}
	if !*asJSON {
		fmt.Fprintf(out, "chaos run: %d plans, seed %d, %d worker processes; this takes a few minutes ...\n", *plans, *seed, *workers)
	}
	rep, err := chaos.Run(ctx, chaos.Options{
		Plans: *plans, Seed: *seed, Workers: *workers, Concurrency: *concurrency, Short: *short, DataDir: *dataDir, Settle: *settle, Logger: log, Cluster: cluster,
		WorkerCommand: func(cfg chaos.WorkerConfig) *exec.Cmd {
			cmd := exec.Command(exe, "chaos", chaosWorkerArg)
			cmd.Env = append(os.Environ(), chaos.WorkerEnv(cfg)...)
			return cmd
		},
	})
	if err != nil {
		return err
	}
	if *asJSON {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else {
		printChaos(out, rep)
	}
	if !rep.OK {
		return cli.Exit(1, fmt.Errorf("chaos: %d invariant(s) broken (see the violations above)", len(rep.Violations)))
	}
	return nil
}

// printChaos prints the chaos report as a table.
func printChaos(out io.Writer, rep chaos.Report) {
	row := func(name, value string) { fmt.Fprintf(out, "  %-44s %s\n", name, safe(value)) }
	fmt.Fprintln(out)
	row("plans", fmt.Sprintf("%d (seed %d, %d worker processes)", rep.Plans, rep.Seed, rep.Workers))
	row("plan templates", joinCounts(rep.Templates))
	row("ends", joinCounts(rep.Ends))
	for _, k := range sandbox.FaultKinds {
		row("faults "+string(k), fmt.Sprintf("%d fired (%d injected)", rep.FaultsFired[string(k)], rep.FaultsInjected[string(k)]))
	}
	row("worker kills (SIGKILL)", fmt.Sprint(rep.Kills))
	row("kills between commit and completion", fmt.Sprint(rep.KillsBetweenCommitAndCompletion))
	row("Temporal server restarts (same SQLite file)", fmt.Sprint(rep.Restarts))
	row("plans started 10 times at once", fmt.Sprint(rep.StartedTenTimes))
	row("decisions", joinCounts(rep.Decisions))
	row("escalated (plans that asked a human)", fmt.Sprint(rep.Escalated))
	row("effects at the providers", fmt.Sprintf("%d (%d reversals)", rep.Effects, rep.Reversals))
	row("duplicates", fmt.Sprint(rep.Duplicates))
	row("lost", fmt.Sprint(rep.Lost))
	row("stuck in flight", fmt.Sprint(rep.Stuck))
	row("longest time to reconcile", rep.LongestReconcile.Round(time.Millisecond).String())
	row("elapsed", rep.Elapsed.Round(time.Second).String())
	fmt.Fprintln(out)
	if rep.OK {
		fmt.Fprintln(out, "result: every invariant holds (checked in the providers' stores and the ledger)")
		return
	}
	fmt.Fprintf(out, "result: %d VIOLATION(S)\n", len(rep.Violations))
	for _, v := range rep.Violations {
		fmt.Fprintf(out, "  %s\n", safe(v.String()))
	}
}

func joinCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// targets checks the run against the goals of issue 10.
func targets(rep Report) []Target {
	var out []Target
	add := func(name, want, got string, met bool) {
		out = append(out, Target{Name: name, Want: want, Got: got, Met: met})
	}
	worst := func(f func(Level) float64, only func(Level) bool) (float64, string) {
		w, where := 0.0, ""
		for _, s := range rep.Shapes {
			for _, l := range s.Levels {
				if only != nil && !only(l) {
					continue
				}
				if v := f(l); where == "" || v > w {
					w, where = v, fmt.Sprintf("%s at %d", s.Name, l.Concurrency)
				}
			}
		}
		return w, where
	}
	best := func(f func(Level) float64, only func(Level) bool) (float64, string) {
		v, where := worst(func(l Level) float64 { return -f(l) }, only)
		return -v, where
	}
	if len(rep.Shapes) > 0 {
		v, w := worst(func(l Level) float64 { return l.Ratio.P50 }, nil)
		add("latency ratio p50", "<= 1.05 at every concurrency", fmt.Sprintf("worst %.3f (%s)", v, w), v <= 1.05)
		v, w = worst(func(l Level) float64 { return l.Ratio.P99 }, nil)
		add("latency ratio p99", "<= 1.05 at every concurrency", fmt.Sprintf("worst %.3f (%s)", v, w), v <= 1.05)
		v, w = worst(func(l Level) float64 { return l.AddedP99PerStepMs }, nil)
		add("p99 added per write step", "<= 2 ms", fmt.Sprintf("worst %.2f ms (%s)", v, w), v <= 2)
		v, w = worst(func(l Level) float64 { return l.Ratio.StartP50 }, nil)
		add("start call p50", "<= 1.2 x plain start", fmt.Sprintf("worst %.3f (%s)", v, w), v <= 1.2)
		v, w = worst(func(l Level) float64 { return l.Ratio.StartP99 }, nil)
		add("start call p99", "<= 1.2 x plain start", fmt.Sprintf("worst %.3f (%s)", v, w), v <= 1.2)
		conc := func(l Level) bool { return l.Concurrency >= 10 }
		v, w = best(func(l Level) float64 { return l.Ratio.Throughput }, conc)
		if w != "" {
			add("throughput ratio at 10 and 50", ">= 0.95", fmt.Sprintf("worst %.3f (%s)", v, w), v >= 0.95)
		}
		tp, where := 0.0, ""
		for _, s := range rep.Shapes {
			for _, l := range s.Levels {
				if s.Steps == 3 && l.Concurrency >= 10 && (where == "" || l.Ratio.Throughput < tp) {
					tp, where = l.Ratio.Throughput, fmt.Sprintf("at %d", l.Concurrency)
				}
			}
		}
		if where != "" {
			add("3-step throughput ratio at 10 and 50 (issue 22)", ">= 0.9", fmt.Sprintf("worst %.3f (%s)", tp, where), tp >= 0.9)
		}
		if rep.LedgerFloor != nil {
			v, w = worst(func(l Level) float64 { return l.CPUMsPerStepAboveFloor }, nil)
			add("CPU per write step above plain + ledger floor (issue 22)", "<= 0.3 ms", fmt.Sprintf("worst %.2f ms (%s; floor %.2f ms)", v, w, rep.LedgerFloor.CPUMsPerStep), v <= 0.3)
		}
		split := func(l Level) bool { return l.WithoutCommits != nil }
		if v, w = worst(func(l Level) float64 { return l.CPUMsPerStepAboveCommits }, split); w != "" {
			add("CPU per write step above plain + commits in the run (issue 22)", "<= 0.3 ms", fmt.Sprintf("worst %.2f ms (%s)", v, w), v <= 0.3)
		}
	}
	var events []string
	met := true
	for _, s := range rep.Shapes {
		var a, p History
		for _, h := range rep.History {
			if h.Shape == s.Name && h.Side == "agentsaga" {
				a = h
			} else if h.Shape == s.Name {
				p = h
			}
		}
		events = append(events, fmt.Sprintf("%s %.2f vs %.2f", s.Name, a.EventsPerStep, p.EventsPerStep))
		met = met && a.EventsPerStep <= p.EventsPerStep
	}
	if len(events) > 0 {
		add("history events per step", "<= plain", strings.Join(events, "; "), met)
	}
	if d := rep.Duplicates; d != nil {
		add("duplicates at concurrent starts of one plan", "0", fmt.Sprintf("%d effects from %d starts (%d runs, %d provider calls)", d.Effects, d.Starts, d.RunIDs, d.ProviderCalls), d.Effects == 1 && d.RunIDs == 1)
	}
	return out
}

// PrintTable writes rep as text tables.
func PrintTable(w io.Writer, rep Report) {
	store := "Temporal and providers in memory, ledger on a file"
	if rep.Durable {
		store = "Temporal, providers and ledger on files, every commit fsynced"
	}
	where := "one embedded server in one process"
	if rep.Cluster != "" {
		where = "the Temporal cluster at " + rep.Cluster + ", workers in this process (CPU: theirs and the client's)"
		store = "ledger as given"
	}
	fmt.Fprintf(w, "agentsaga vs plain Temporal, %s (%s %s/%s, %d CPUs; %s), %d rounds, %.0f s\n",
		where, rep.Machine.GoVersion, rep.Machine.OS, rep.Machine.Arch, rep.Machine.CPUs, store, rep.Rounds, rep.DurationSec)
	for _, s := range rep.Shapes {
		fmt.Fprintf(w, "\n%s (create_ticket)\n", s.Name)
		fmt.Fprintf(w, "%5s | %-22s | %-22s | %-22s | %-16s | %s\n", "conc", "plans/s  a / p  ratio", "p50 ms  a / p  ratio", "p99 ms  a / p  ratio", "start p50 a / p", "+p99/step  cpu ms/plan a/p")
		for _, l := range s.Levels {
			fmt.Fprintf(w, "%5d | %6.1f/%6.1f  %6.3f | %6.1f/%6.1f  %6.3f | %6.1f/%6.1f  %6.3f | %6.1f/%6.1f | %6.2f ms  %5.1f/%5.1f\n",
				l.Concurrency, l.Agentsaga.PlansPerSec, l.Plain.PlansPerSec, l.Ratio.Throughput,
				l.Agentsaga.Latency.P50Ms, l.Plain.Latency.P50Ms, l.Ratio.P50,
				l.Agentsaga.Latency.P99Ms, l.Plain.Latency.P99Ms, l.Ratio.P99,
				l.Agentsaga.Start.P50Ms, l.Plain.Start.P50Ms, l.AddedP99PerStepMs,
				l.Agentsaga.CPUMsPerPlan, l.Plain.CPUMsPerPlan)
		}
	}
	if f := rep.LedgerFloor; f != nil {
		fmt.Fprintf(w, "\nledger floor (claim+complete on the worker's ledger, %d pairs): %.2f ms CPU per write step one at a time (%.2f ms of it the kernel's, %.1f context switches), %.2f ms ten at a time\n",
			f.Pairs, f.CPUMsPerStep, f.SysMsPerStep, f.SwitchesPerStep, f.CPUMsPerStepAt10)
		fmt.Fprintf(w, "agentsaga CPU per write step above plain + floor:")
		for _, s := range rep.Shapes {
			for _, l := range s.Levels {
				fmt.Fprintf(w, " %s at %d %.2f ms;", s.Name, l.Concurrency, l.CPUMsPerStepAboveFloor)
			}
		}
		fmt.Fprintln(w)
	}
	if rep.CommitSplit {
		fmt.Fprintf(w, "\nthe ledger's commits in the run (a third side, agentsaga without its commits, in the same rounds; it keeps no promise):\n")
		for _, s := range rep.Shapes {
			for _, l := range s.Levels {
				if nc := l.WithoutCommits; nc != nil {
					fmt.Fprintf(w, "  %s at %d: without commits %.1f plans/s (%.3f of plain), %.1f ms CPU per plan; commits %.2f ms CPU per write step, the rest %.2f ms above plain\n",
						s.Name, l.Concurrency, nc.PlansPerSec, l.ThroughputRatioWithoutCommits, nc.CPUMsPerPlan, l.CommitsCPUMsPerStep, l.CPUMsPerStepAboveCommits)
				}
			}
		}
	}
	if len(rep.Shapes) > 0 {
		fmt.Fprintf(w, "\nkernel CPU ms and voluntary context switches per plan, a / p:")
		for _, s := range rep.Shapes {
			for _, l := range s.Levels {
				fmt.Fprintf(w, " %s at %d %.2f / %.2f ms, %.1f / %.1f;", s.Name, l.Concurrency,
					l.Agentsaga.SysCPUMsPerPlan, l.Plain.SysCPUMsPerPlan, l.Agentsaga.SwitchesPerPlan, l.Plain.SwitchesPerPlan)
			}
		}
		fmt.Fprintf(w, "\nGo heap allocated per plan, KB and objects, a / p:")
		for _, s := range rep.Shapes {
			for _, l := range s.Levels {
				fmt.Fprintf(w, " %s at %d %.0f / %.0f KB, %.0f / %.0f;", s.Name, l.Concurrency,
					l.Agentsaga.AllocKBPerPlan, l.Plain.AllocKBPerPlan, l.Agentsaga.AllocsPerPlan, l.Plain.AllocsPerPlan)
			}
		}
		fmt.Fprintln(w)
	}
	printCPUSplit(w, rep)
	if len(rep.History) > 0 {
		fmt.Fprintf(w, "\nhistory per plan        %-10s %7s %8s %10s %10s\n", "side", "events", "bytes", "ev/step", "B/step")
		for _, h := range rep.History {
			fmt.Fprintf(w, "  %-21s %-10s %7d %8d %10.2f %10.1f\n", h.Shape, h.Side, h.Events, h.Bytes, h.EventsPerStep, h.BytesPerStep)
			fmt.Fprintf(w, "  %-32s %s\n", "", byEvent(h.BytesByEvent))
		}
	}
	for _, h := range rep.Tasks {
		fmt.Fprintf(w, "\nworkflow tasks of every %s plan (%d plans, %d tasks): %d timed out, %d failed", h.Side, h.Workflows, h.WorkflowTasks, h.TimedOut, h.Failed)
	}
	if len(rep.Tasks) > 0 {
		fmt.Fprintln(w)
	}
	if ph := rep.Phases; ph != nil {
		fmt.Fprintf(w, "\nwhere one sequential one-step plan spends its time (p50 of %d per side)\n", ph.Plans)
		for i, a := range ph.Agentsaga {
			p := ph.Plain[i]
			fmt.Fprintf(w, "  %-54s a %6.2f ms  p %6.2f ms  +%5.2f ms\n", a.Phase, a.P50Ms, p.P50Ms, a.P50Ms-p.P50Ms)
		}
	}
	if m := rep.Memory; m != nil {
		fmt.Fprintf(w, "\nmemory per waiting plan (%d plans): agentsaga heap %.1f KB, RSS %.1f KB; plain heap %.1f KB, RSS %.1f KB; heap ratio %.2f\n",
			m.Plans, m.AgentsagaHeapKBPer, m.AgentsagaRSSKBPer, m.PlainHeapKBPer, m.PlainRSSKBPer, m.HeapRatio)
	}
	if d := rep.Duplicates; d != nil {
		fmt.Fprintf(w, "\n%d concurrent starts of one send_email plan: %d start errors, %d run(s), %d call(s) reached the relay, %d email(s), %d duplicate(s), %.1f s\n",
			d.Starts, d.StartErrors, d.RunIDs, d.ProviderCalls, d.Effects, d.Duplicates, d.Sec)
	}
	for _, l := range rep.Ledger {
		fmt.Fprintf(w, "\nledger %-8s (%d fresh keys): claim p50 %.2f ms p99 %.2f ms; complete p50 %.2f ms p99 %.2f ms\n",
			l.Driver, l.Ops, l.Claim.P50Ms, l.Claim.P99Ms, l.Complete.P50Ms, l.Complete.P99Ms)
	}
	for _, g := range rep.Growth {
		fmt.Fprintf(w, "\nledger %s as it grows (%d claims per kind, one at a time): p50 / p99 ms\n", g.Driver, g.Ops)
		kinds := []string{GrowthPlain, GrowthGuarded, GrowthClash, GrowthDuplicate}
		fmt.Fprintf(w, "  %10s", "rows")
		for _, k := range kinds {
			fmt.Fprintf(w, " | %-15s", k)
		}
		fmt.Fprintln(w)
		for _, p := range g.Points {
			fmt.Fprintf(w, "  %10d", p.Rows)
			for _, k := range kinds {
				fmt.Fprintf(w, " | %6.2f / %6.2f", p.Kinds[k].P50Ms, p.Kinds[k].P99Ms)
			}
			fmt.Fprintln(w)
		}
		if len(g.RatioP50) > 0 {
			fmt.Fprintf(w, "  %10s", "p50 ratio")
			for _, k := range kinds {
				fmt.Fprintf(w, " | %15.2f", g.RatioP50[k])
			}
			fmt.Fprintln(w, "  (largest / smallest; 1 is flat)")
		}
	}
	printServerWork(w, rep.ServerWork)
	if len(rep.Targets) > 0 {
		fmt.Fprintf(w, "\ntargets (issue 10)\n")
		for _, t := range rep.Targets {
			mark := "MET    "
			if !t.Met {
				mark = "NOT MET"
			}
			fmt.Fprintf(w, "  %s %-44s want %-30s got %s\n", mark, t.Name, t.Want, t.Got)
		}
	}
}

// printCPUSplit prints where each side's CPU goes per plan, by component,
// at each shape and concurrency, with agentsaga's extra per component.
func printCPUSplit(w io.Writer, rep Report) {
	header := false
	for _, s := range rep.Shapes {
		for _, l := range s.Levels {
			a, p := l.Agentsaga.CPUMsPerPlanBy, l.Plain.CPUMsPerPlanBy
			if a == nil || p == nil {
				continue
			}
			if !header {
				fmt.Fprintf(w, "\nwhere the CPU goes, ms per plan (profiled; a / p, then agentsaga's extra)\n")
				fmt.Fprintf(w, "  %-16s %4s", "shape", "conc")
				for _, c := range Components {
					fmt.Fprintf(w, " | %-19s", c)
				}
				fmt.Fprintln(w)
				header = true
			}
			fmt.Fprintf(w, "  %-16s %4d", s.Name, l.Concurrency)
			for _, c := range Components {
				fmt.Fprintf(w, " | %5.2f/%5.2f %+6.2f", a[c], p[c], a[c]-p[c])
			}
			fmt.Fprintln(w)
		}
	}
}

// printServerWork prints the server's work per plan of each side, every
// count either side made.
func printServerWork(w io.Writer, work []ServerWork) {
	for _, s := range work {
		fmt.Fprintf(w, "\nserver work per plan, %s (%d plans per side, one at a time)   agentsaga      plain      extra\n", s.Shape, s.Plans)
		for _, k := range slices.Sorted(maps.Keys(keysOf(s.Agentsaga, s.Plain))) {
			fmt.Fprintf(w, "  %-56s %10.2f %10.2f %+10.2f\n", k, s.Agentsaga[k], s.Plain[k], s.Extra[k])
		}
	}
}

// byEvent lists bytes by event type, largest first.
func byEvent(m map[string]int) string {
	types := slices.Collect(maps.Keys(m))
	slices.SortFunc(types, func(a, b string) int {
		if c := cmp.Compare(m[b], m[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(types))
	for i, t := range types {
		parts[i] = fmt.Sprintf("%s %d", t, m[t])
	}
	return strings.Join(parts, ", ")
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devserver"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// Options configure Run. Zero values take the defaults named.
type Options struct {
	// Rounds is how many alternating rounds run per shape and concurrency
	// (default 3). Each round runs one batch per side, the order swapped
	// every round.
	Rounds int
	// Concurrency lists the numbers of plans in flight at once (default
	// 1, 10, 50).
	Concurrency []int
	// PlansPerBatch is how many plans one batch starts (default
	// max(50, 4 x concurrency)).
	PlansPerBatch int
	// Shapes are the plans' numbers of write steps (default 1 and 3).
	Shapes []int
	// WaitingPlans is how many plans wait for a human in the memory
	// measurement (default 200; negative skips it).
	WaitingPlans int
	// DuplicateStarts is how many concurrent starts of one plan are
	// counted at the provider (default 1000; negative skips it).
	DuplicateStarts int
	// LedgerOps is how many claim+complete pairs each ledger measures
	// (default 1000; negative skips it).
	LedgerOps int
	// GrowthSizes, when set, measures claims as the ledger grows to each
	// of these row counts (see LedgerGrowth), GrowthOps claims of each
	// kind per size (default 200).
	GrowthSizes []int
	GrowthOps   int
	// PhasePlans is how many sequential one-step plans per side are split
	// into phases by their event times (default 50; negative skips it).
	PhasePlans int
	// Durable records that the stack keeps Temporal and the providers on
	// files (see Report.Durable); the caller starts it so.
	Durable bool
	// Cluster names the Temporal cluster the stack connects to
	// (devstack.Options.Address), recorded in the report; empty for the
	// embedded server. On a cluster the server's CPU is spent in its own
	// processes: Side.CPUMsPerPlan is then the worker's and the client's.
	Cluster string
	// PostgresDSN, when set, measures the ledger on that PostgreSQL
	// database too (rows under keys bench:<nanos>:..., left in place).
	PostgresDSN string
	// NoCPUSplit turns off the CPU profile of each batch that splits a
	// side's CPU time by component (Side.CPUMsPerPlanBy). The profiler
	// samples 100 times a second on both sides alike.
	NoCPUSplit bool
	// ProfileDir, when set, receives each side's CPU profile at each shape
	// and concurrency, its rounds merged (agentsaga-3steps-c10.pprof,
	// plain-3steps-c10.pprof), for `go tool pprof`.
	ProfileDir string
	// CommitSplit adds a third side to every round: agentsaga's engine on
	// a worker of its own (task queue NoCommitsTaskQueue) whose ledger
	// skips the claim and completion commits (WithoutLedgerWrites). The
	// three sides run in rotated order in the same rounds, so the
	// commits' CPU is measured where they run, beside the server and the
	// worker under load (Level.CommitsCPUMsPerStep), and what agentsaga
	// costs apart from them against plain (Level.CPUMsPerStepAboveCommits).
	// The third side keeps no promise; nothing else runs on its queue.
	CommitSplit bool
	// Logger receives progress lines; nil discards them.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 10, 50}
	}
	if len(o.Shapes) == 0 {
		o.Shapes = []int{1, 3}
	}
	if o.WaitingPlans == 0 {
		o.WaitingPlans = 200
	}
	if o.DuplicateStarts == 0 {
		o.DuplicateStarts = 1000
	}
	if o.LedgerOps == 0 {
		o.LedgerOps = 1000
	}
	if o.GrowthOps <= 0 {
		o.GrowthOps = 200
	}
	if o.PhasePlans == 0 {
		o.PhasePlans = 50
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

func (o Options) batchSize(conc int) int {
	if o.PlansPerBatch > 0 {
		return o.PlansPerBatch
	}
	return max(50, 4*conc)
}

// Report is one run's figures. Latencies are in milliseconds; ratios are
// agentsaga / plain.
type Report struct {
	Machine Machine `json:"machine"`
	Rounds  int     `json:"rounds"`
	// Durable: Temporal and the sandbox providers kept on files, every
	// commit fsynced (otherwise in memory; the ledger is on a file either
	// way).
	Durable bool `json:"durable"`
	// Cluster is Options.Cluster: where the server ran ("" embedded).
	Cluster string `json:"cluster,omitempty"`
	// CommitSplit is Options.CommitSplit: each level has a third side,
	// agentsaga without its ledger commits (Level.WithoutCommits).
	CommitSplit bool          `json:"commit_split,omitempty"`
	Shapes      []ShapeResult `json:"shapes"`
	History     []History     `json:"history"`
	Phases      *Phases       `json:"phases,omitempty"`
	// Tasks counts workflow-task trouble in every plan the levels ran.
	Tasks      []TaskHealth `json:"tasks,omitempty"`
	Memory     *Memory      `json:"memory,omitempty"`
	Duplicates *Duplicates  `json:"duplicates,omitempty"`
	Ledger     []LedgerDist `json:"ledger,omitempty"`
	// LedgerFloor is the CPU of the ledger's commits of a write step,
	// measured on the worker's ledger after the levels.
	LedgerFloor *LedgerFloor `json:"ledger_floor,omitempty"`
	Growth      []Growth     `json:"ledger_growth,omitempty"`
	// ServerWork counts the server's work per plan on each side (see
	// MeasureServerWork and AddServerWork).
	ServerWork []ServerWork `json:"server_work,omitempty"`
	// ServerDynamicConfig is what the embedded server ran with.
	ServerDynamicConfig map[string]string `json:"server_dynamic_config"`
	Targets             []Target          `json:"targets"`
	DurationSec         float64           `json:"duration_sec"`
}

// Machine describes where the run happened.
type Machine struct {
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	CPUs      int    `json:"cpus"`
}

// ShapeResult is one plan shape at every concurrency.
type ShapeResult struct {
	Name   string  `json:"name"`
	Steps  int     `json:"steps"`
	Levels []Level `json:"levels"`
}

// Level is one shape at one concurrency: both sides over all rounds.
type Level struct {
	Concurrency int    `json:"concurrency"`
	Agentsaga   Side   `json:"agentsaga"`
	Plain       Side   `json:"plain"`
	Ratio       Ratios `json:"ratio"`
	// AddedP99PerStepMs is (agentsaga p99 - plain p99) / steps.
	AddedP99PerStepMs float64 `json:"added_p99_per_step_ms"`
	// RoundThroughputRatios are the per-round throughput ratios, to show
	// their spread.
	RoundThroughputRatios []float64 `json:"round_throughput_ratios"`
	// CPUMsPerStepAboveFloor is agentsaga's CPU per write step above
	// plain's and the ledger's commits (LedgerFloor.CPUMsPerStep):
	// (agentsaga - plain) / steps - floor. What agentsaga costs apart
	// from the durable commits it must make (issue 22: at most 0.3 ms).
	CPUMsPerStepAboveFloor float64 `json:"cpu_ms_per_step_above_floor"`
	// WithoutCommits is the third side of a run with Options.CommitSplit:
	// agentsaga's engine without its ledger commits, in the same rounds.
	WithoutCommits *Side `json:"without_commits,omitempty"`
	// CommitsCPUMsPerStep is (agentsaga - WithoutCommits) / steps: the
	// ledger commits' CPU per write step measured in the run, the floor
	// where it is paid (with CommitSplit only).
	CommitsCPUMsPerStep float64 `json:"commits_cpu_ms_per_step,omitempty"`
	// CPUMsPerStepAboveCommits is (WithoutCommits - plain) / steps: what
	// agentsaga's engine costs per write step apart from its commits,
	// against plain in the same rounds (issue 22: at most 0.3 ms; with
	// CommitSplit only).
	CPUMsPerStepAboveCommits float64 `json:"cpu_ms_per_step_above_commits,omitempty"`
	// ThroughputRatioWithoutCommits is WithoutCommits / plain plans per
	// second (with CommitSplit only).
	ThroughputRatioWithoutCommits float64 `json:"throughput_ratio_without_commits,omitempty"`
}

// Side is one side's figures at one level.
type Side struct {
	Plans int `json:"plans"`
	// PlansPerSec is the median over rounds of plans / batch wall time.
	PlansPerSec float64 `json:"plans_per_sec"`
	// Latency is per plan, from the start call to the result.
	Latency Dist `json:"latency"`
	// Start is the start call alone (sagaclient.Start, or
	// client.ExecuteWorkflow).
	Start Dist `json:"start"`
	// CPUMsPerPlan is the process's CPU time (user+system) per plan over
	// the side's batches: the server, the worker and the client together
	// (on a Cluster, the worker and the client only).
	CPUMsPerPlan float64 `json:"cpu_ms_per_plan"`
	// CPUMsPerPlanBy splits CPUMsPerPlan's profiled share by component
	// (see Components): the CPU profile of the side's batches, each
	// sample charged to the first component any frame of its stack
	// belongs to. Profiled time is within a few per cent of the rusage
	// figure; compare components across sides, not with CPUMsPerPlan.
	CPUMsPerPlanBy map[string]float64 `json:"cpu_ms_per_plan_by,omitempty"`
	// SysCPUMsPerPlan is the kernel's share of CPUMsPerPlan (system
	// calls such as fsync, and the scheduling of the process's threads).
	SysCPUMsPerPlan float64 `json:"sys_cpu_ms_per_plan"`
	// SwitchesPerPlan are the process's voluntary context switches per
	// plan: a thread that blocked in a system call or parked for want of
	// work, to be woken again.
	SwitchesPerPlan float64 `json:"switches_per_plan"`
	// AllocKBPerPlan and AllocsPerPlan are what the process's Go heap
	// allocated per plan (server, worker and client together, as
	// CPUMsPerPlan). Code paths decide most of them, not the machine's
	// load, so they move far less between runs than CPU time (see
	// BENCHMARKS.md): a saving or a regression in allocation shows in
	// one run.
	AllocKBPerPlan float64 `json:"alloc_kb_per_plan"`
	AllocsPerPlan  float64 `json:"allocs_per_plan"`
	Errors         int     `json:"errors"`
}

// Ratios are agentsaga / plain.
type Ratios struct {
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50"`
	P99        float64 `json:"p99"`
	StartP50   float64 `json:"start_p50"`
	StartP99   float64 `json:"start_p99"`
}

// Memory is the process's growth per plan waiting for a human. Method: run
// the GC, read the Go heap (HeapAlloc) and the resident set (VmRSS); start
// Plans plans that wait (agentsaga: create_payment above the approval
// threshold, waiting for the approval; plain: a workflow blocked on a
// signal); wait until each waits; run the GC and read again. The delta
// divided by Plans covers the server's mutable state and caches, the
// worker's cached workflow and the client, all in this one process. The
// waiting plans are terminated afterwards.
type Memory struct {
	Plans                int     `json:"plans"`
	AgentsagaHeapKBPer   float64 `json:"agentsaga_heap_kb_per_plan"`
	AgentsagaRSSKBPer    float64 `json:"agentsaga_rss_kb_per_plan"`
	PlainHeapKBPer       float64 `json:"plain_heap_kb_per_plan"`
	PlainRSSKBPer        float64 `json:"plain_rss_kb_per_plan"`
	HeapRatio            float64 `json:"heap_ratio"`
	AgentsagaSettleMs    float64 `json:"agentsaga_settle_ms"`
	PlainSettleMs        float64 `json:"plain_settle_ms"`
	AgentsagaStartErrors int     `json:"agentsaga_start_errors"`
}

// Duplicates is one plan (a send_email step: the mail relay has no key, so
// every request that reaches it is an email) started Starts times at once.
type Duplicates struct {
	Starts int `json:"starts"`
	// StartErrors are starts that returned an error (none expected: the
	// same plan attaches).
	StartErrors int `json:"start_errors"`
	// RunIDs is how many distinct runs the starts returned (1 expected).
	RunIDs int `json:"run_ids"`
	// ProviderCalls is how many requests reached the mail relay.
	ProviderCalls int `json:"provider_calls"`
	// Effects is how many emails the relay committed.
	Effects int `json:"effects"`
	// Duplicates is Effects - 1 (0 expected).
	Duplicates int     `json:"duplicates"`
	Sec        float64 `json:"sec"`
}

// Target is one of the goals of issue 10 with what this run measured.
type Target struct {
	Name string `json:"name"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// Run measures on st, which must have a worker (devstack.Start without
// NoWorker). It starts a worker of its own for the plain side on st.Client.
func Run(ctx context.Context, st *devstack.Stack, o Options) (Report, error) {
	o.defaults()
	if st.Worker == nil {
		return Report{}, errors.New("bench: the stack has no worker; start it without NoWorker")
	}
	began := time.Now()
	rep := Report{
		Machine: Machine{GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()},
		Rounds:  o.Rounds, Durable: o.Durable, Cluster: o.Cluster, CommitSplit: o.CommitSplit,
		ServerDynamicConfig: map[string]string{},
	}
	if st.Server != nil { // a cluster's own configuration is its operator's
		for k, v := range devserver.DevDynamicConfig() {
			rep.ServerDynamicConfig[k] = fmt.Sprint(v)
		}
	}
	pw, err := startPlainWorker(st.Client, st.SandboxURL)
	if err != nil {
		return rep, err
	}
	defer pw.Stop()
	r := &runner{st: st, o: o, tag: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if o.CommitSplit {
		stop, err := r.startNoCommits()
		if err != nil {
			return rep, err
		}
		defer stop()
	}

	// Warm every side up (first-use costs: caches, connections, JIT of
	// the sandbox's SQLite statements) outside the figures.
	for _, steps := range o.Shapes {
		for _, sd := range r.sides() {
			if _, err := sd.r.batch(ctx, steps, 1, 3, sd.agentsaga); err != nil {
				return rep, err
			}
		}
	}
	r.mu.Lock()
	r.all = map[bool][]sagaclient.Run{}
	r.mu.Unlock()
	for _, steps := range o.Shapes {
		sr := ShapeResult{Name: shapeName(steps), Steps: steps}
		for _, conc := range o.Concurrency {
			lv, err := r.level(ctx, steps, conc)
			if err != nil {
				return rep, err
			}
			sr.Levels = append(sr.Levels, lv)
		}
		rep.Shapes = append(rep.Shapes, sr)
		for _, agentsaga := range []bool{true, false} {
			h, err := r.history(ctx, steps, agentsaga)
			if err != nil {
				return rep, err
			}
			rep.History = append(rep.History, h)
		}
	}
	if len(rep.Shapes) > 0 && st.Ledger != nil {
		f, err := ledgerFloor(ctx, st.Ledger, floorPairs)
		if err != nil {
			return rep, err
		}
		rep.LedgerFloor = &f
		for i := range rep.Shapes {
			s := &rep.Shapes[i]
			for j := range s.Levels {
				l := &s.Levels[j]
				l.CPUMsPerStepAboveFloor = round((l.Agentsaga.CPUMsPerPlan-l.Plain.CPUMsPerPlan)/float64(s.Steps)-f.CPUMsPerStep, 2)
			}
		}
	}
	for _, agentsaga := range []bool{true, false} {
		h, err := r.taskHealth(ctx, agentsaga)
		if err != nil {
			return rep, err
		}
		rep.Tasks = append(rep.Tasks, h)
	}
	if o.PhasePlans > 0 {
		ph, err := r.phases(ctx, o.PhasePlans)
		if err != nil {
			return rep, err
		}
		rep.Phases = &ph
	}
	if o.WaitingPlans > 0 {
		m, err := r.memory(ctx, o.WaitingPlans)
		if err != nil {
			return rep, err
		}
		rep.Memory = &m
	}
	if o.DuplicateStarts > 0 {
		d, err := r.duplicates(ctx, o.DuplicateStarts)
		if err != nil {
			return rep, err
		}
		rep.Duplicates = &d
	}
	if o.LedgerOps > 0 {
		l, err := Ledgers(ctx, o.LedgerOps, o.PostgresDSN)
		if err != nil {
			return rep, err
		}
		rep.Ledger = l
	}
	if len(o.GrowthSizes) > 0 {
		g, err := LedgerGrowth(ctx, o.GrowthSizes, o.GrowthOps, o.PostgresDSN)
		if err != nil {
			return rep, err
		}
		rep.Growth = g
	}
	rep.Targets = targets(rep)
	rep.DurationSec = round(time.Since(began).Seconds(), 1)
	return rep, nil
}

func shapeName(steps int) string {
	if steps == 1 {
		return "one write step"
	}
	return strconv.Itoa(steps) + " write steps"
}

type runner struct {
	st  *devstack.Stack
	o   Options
	tag string
	seq int64
	mu  sync.Mutex
	// last finished workflow of each side and shape, for history.
	last map[string]sagaclient.Run
	// every finished workflow of the levels, per side (true: agentsaga),
	// for the workflow-task health check.
	all map[bool][]sagaclient.Run
	// profileOff is set when a batch could not start a CPU profile.
	profileOff bool
	// plans starts this runner's agentsaga plans: the no-commits
	// worker's (see nc); nil is the stack's.
	plans *sagaclient.Client
	// nc runs the third side of Options.CommitSplit (nil without it).
	nc *runner
}

// NoCommitsTaskQueue is the task queue of the third side of a run with
// Options.CommitSplit: agentsaga's engine without its ledger commits.
const NoCommitsTaskQueue = "agentsaga-bench-no-commits"

// startNoCommits starts the worker of Options.CommitSplit's third side and
// sets r.nc; stop stops it.
func (r *runner) startNoCommits() (stop func(), err error) {
	if r.st.Ledger == nil {
		return nil, errors.New("bench: CommitSplit needs the stack's ledger to wrap")
	}
	w, err := r.st.WorkerOn(NoCommitsTaskQueue, WithoutLedgerWrites(r.st.Ledger))
	if err != nil {
		return nil, fmt.Errorf("bench: the no-commits worker: %w", err)
	}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the no-commits worker: %w", err)
	}
	r.nc = &runner{st: r.st, o: r.o, tag: r.tag + "nc", plans: r.st.PlansOn(NoCommitsTaskQueue), profileOff: r.profileOff}
	return w.Stop, nil
}

// sideRun is one side of a round: who runs its batches and which kind.
type sideRun struct {
	r         *runner
	agentsaga bool
}

// sides are the sides of every round: agentsaga and plain, then the
// no-commits side of Options.CommitSplit.
func (r *runner) sides() []sideRun {
	s := []sideRun{{r, true}, {r, false}}
	if r.nc != nil {
		s = append(s, sideRun{r.nc, true})
	}
	return s
}

func (r *runner) next() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq
}

// batchResult is one batch of one side.
type batchResult struct {
	total, start []time.Duration
	wall         time.Duration
	use          usage
	errors       int
	// cpuBy is the batch's profiled CPU by component; nil when off.
	cpuBy map[string]time.Duration
	// prof is the batch's CPU profile, kept when Options.ProfileDir asks.
	prof *profile.Profile
}

func (r *runner) level(ctx context.Context, steps, conc int) (Level, error) {
	n := r.o.batchSize(conc)
	sides := r.sides()
	all := make([]batchResult, len(sides))
	perSec := make([][]float64, len(sides))
	var rounds []float64
	for round := 0; round < r.o.Rounds; round++ {
		// Rotate the order (two sides: AB, BA; three: ABC, BCA, CAB), so
		// no side always runs first or after the same one.
		tp := make([]float64, len(sides))
		for i := range sides {
			k := (round + i) % len(sides)
			b, err := sides[k].r.batch(ctx, steps, conc, n, sides[k].agentsaga)
			if err != nil {
				return Level{}, err
			}
			tp[k] = float64(n) / b.wall.Seconds()
			perSec[k] = append(perSec[k], tp[k])
			all[k] = merge(all[k], b)
		}
		rounds = append(rounds, ratio(tp[0], tp[1]))
		r.o.Logger.Info("bench round", "shape", shapeName(steps), "concurrency", conc, "round", round+1,
			"agentsaga_plans_per_sec", round2(tp[0]), "plain_plans_per_sec", round2(tp[1]))
	}
	lv := Level{Concurrency: conc, Agentsaga: side(all[0], median(perSec[0])), Plain: side(all[1], median(perSec[1])), RoundThroughputRatios: rounds}
	names := []string{profileName(true, steps, conc), profileName(false, steps, conc), noCommitsProfileName(steps, conc)}
	for k := range sides {
		if err := writeProfile(r.o.ProfileDir, names[k], all[k].prof); err != nil {
			return Level{}, err
		}
	}
	if len(sides) == 3 {
		nc := side(all[2], median(perSec[2]))
		lv.WithoutCommits = &nc
		lv.CommitsCPUMsPerStep = round((lv.Agentsaga.CPUMsPerPlan-nc.CPUMsPerPlan)/float64(steps), 2)
		lv.CPUMsPerStepAboveCommits = round((nc.CPUMsPerPlan-lv.Plain.CPUMsPerPlan)/float64(steps), 2)
		lv.ThroughputRatioWithoutCommits = ratio(nc.PlansPerSec, lv.Plain.PlansPerSec)
	}
	lv.Ratio = Ratios{
		Throughput: ratio(lv.Agentsaga.PlansPerSec, lv.Plain.PlansPerSec),
		P50:        ratio(lv.Agentsaga.Latency.P50Ms, lv.Plain.Latency.P50Ms),
		P99:        ratio(lv.Agentsaga.Latency.P99Ms, lv.Plain.Latency.P99Ms),
		StartP50:   ratio(lv.Agentsaga.Start.P50Ms, lv.Plain.Start.P50Ms),
		StartP99:   ratio(lv.Agentsaga.Start.P99Ms, lv.Plain.Start.P99Ms),
	}
	lv.AddedP99PerStepMs = round((lv.Agentsaga.Latency.P99Ms-lv.Plain.Latency.P99Ms)/float64(steps), 3)
	return lv, nil
}

func round2(v float64) float64 { return round(v, 2) }

func merge(a, b batchResult) batchResult {
	a.total = append(a.total, b.total...)
	a.start = append(a.start, b.start...)
	a.wall += b.wall
	a.use = a.use.add(b.use)
	a.errors += b.errors
	if b.cpuBy != nil {
		if a.cpuBy == nil {
			a.cpuBy = map[string]time.Duration{}
		}
		for c, d := range b.cpuBy {
			a.cpuBy[c] += d
		}
	}
	if b.prof != nil {
		m, err := mergeProfiles(a.prof, b.prof)
		if err == nil {
			a.prof = m
		}
	}
	return a
}

func side(b batchResult, perSec float64) Side {
	s := Side{Plans: len(b.total), PlansPerSec: round2(perSec), Latency: dist(b.total), Start: dist(b.start), Errors: b.errors}
	if n := len(b.total) + b.errors; n > 0 {
		s.CPUMsPerPlan = round(float64(b.use.cpu)/float64(time.Millisecond)/float64(n), 2)
		s.SysCPUMsPerPlan = round(float64(b.use.sys)/float64(time.Millisecond)/float64(n), 2)
		s.SwitchesPerPlan = round(float64(b.use.switches)/float64(n), 1)
		s.AllocKBPerPlan = round(float64(b.use.allocBytes)/1024/float64(n), 1)
		s.AllocsPerPlan = round(float64(b.use.allocObjects)/float64(n), 0)
		s.CPUMsPerPlanBy = perPlan(b.cpuBy, n)
	}
	return s
}

// batch runs n plans of one side, conc at a time.
func (r *runner) batch(ctx context.Context, steps, conc, n int, agentsaga bool) (batchResult, error) {
	var (
		mu  sync.Mutex
		out batchResult
		wg  sync.WaitGroup
		sem = make(chan struct{}, conc)
		// the first error, kept to report if every plan failed
		firstErr error
	)
	var pr profiler
	if !r.o.NoCPUSplit && !r.profileOff {
		if err := pr.start(); err != nil {
			r.profileOff = true
			r.o.Logger.Warn(err.Error())
		}
	}
	u0 := usageNow()
	t0 := time.Now()
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var start, total time.Duration
			var err error
			if agentsaga {
				start, total, err = r.onePlan(ctx, steps)
			} else {
				start, total, err = r.onePlain(ctx, steps)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out.errors++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			out.start = append(out.start, start)
			out.total = append(out.total, total)
		}()
	}
	wg.Wait()
	out.wall = time.Since(t0)
	out.use = usageNow().since(u0)
	p, err := pr.stop()
	if err != nil {
		return out, err
	}
	if p != nil {
		if out.cpuBy, err = split(p); err != nil {
			return out, err
		}
		if r.o.ProfileDir != "" {
			out.prof = p
		}
	}
	if ctx.Err() != nil {
		return out, fmt.Errorf("bench: %w", ctx.Err())
	}
	if out.errors > 0 {
		r.o.Logger.Warn("bench: plans failed", "failed", out.errors, "of", n, "agentsaga", agentsaga, "first_error", firstErr)
	}
	if len(out.total) == 0 {
		return out, fmt.Errorf("bench: every plan of a batch failed; the first: %w", firstErr)
	}
	return out, nil
}

func subjects(steps int) []string {
	s := make([]string, steps)
	for i := range s {
		s[i] = fmt.Sprintf("bench ticket %d", i+1)
	}
	return s
}

// ticketPlan is the agentsaga plan of one shape.
func ticketPlan(session string, steps int) plan.Plan {
	p := plan.Plan{SessionID: session, Turn: 1}
	for _, s := range subjects(steps) {
		args, _ := json.Marshal(map[string]string{"subject": s})
		p.Steps = append(p.Steps, plan.Step{Tool: demotools.CreateTicket, Args: args})
	}
	return p
}

func (r *runner) onePlan(ctx context.Context, steps int) (start, total time.Duration, err error) {
	p := ticketPlan(fmt.Sprintf("bench-%s-a%d", r.tag, r.next()), steps)
	t0 := time.Now()
	plans := r.plans
	if plans == nil {
		plans = r.st.Plans
	}
	run, err := plans.Start(ctx, p)
	start = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	s, err := plans.WaitRun(ctx, run)
	total = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if s.State != workflows.SagaSucceeded {
		return 0, 0, fmt.Errorf("bench: plan %s ended %s, not succeeded", run.WorkflowID, s.State)
	}
	r.remember(steps, true, run)
	return start, total, nil
}

func (r *runner) onePlain(ctx context.Context, steps int) (start, total time.Duration, err error) {
	id := fmt.Sprintf("bench-plain:%s:%d", r.tag, r.next())
	t0 := time.Now()
	wr, err := r.st.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: PlainTaskQueue},
		PlainWorkflow, PlainInput{Key: id, Subjects: subjects(steps)})
	start = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	var ids []string
	err = wr.Get(ctx, &ids)
	total = time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if len(ids) != steps {
		return 0, 0, fmt.Errorf("bench: plain workflow %s made %d tickets, want %d", id, len(ids), steps)
	}
	r.remember(steps, false, sagaclient.Run{WorkflowID: id, RunID: wr.GetRunID()})
	return start, total, nil
}

func (r *runner) remember(steps int, agentsaga bool, run sagaclient.Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last, r.all = map[string]sagaclient.Run{}, map[bool][]sagaclient.Run{}
	}
	r.last[fmt.Sprint(steps, agentsaga)] = run
	r.all[agentsaga] = append(r.all[agentsaga], run)
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration { return usageNow().cpu }

// usage is the process's resource use so far, from getrusage (all its
// threads).
type usage struct {
	cpu, sys time.Duration // user+system, and system alone
	// switches are the voluntary context switches: a thread blocked (in
	// fsync, say) or parked for want of work.
	switches int64
	// allocBytes and allocObjects are what the Go heap allocated (every
	// goroutine of the process).
	allocBytes, allocObjects uint64
}

func usageNow() usage {
	ms := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(ms)
	u := usage{allocBytes: ms[0].Value.Uint64(), allocObjects: ms[1].Value.Uint64()}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return u
	}
	u.cpu, u.sys, u.switches = time.Duration(ru.Utime.Nano()+ru.Stime.Nano()), time.Duration(ru.Stime.Nano()), ru.Nvcsw
	return u
}

func (u usage) since(u0 usage) usage {
	return usage{cpu: u.cpu - u0.cpu, sys: u.sys - u0.sys, switches: u.switches - u0.switches,
		allocBytes: u.allocBytes - u0.allocBytes, allocObjects: u.allocObjects - u0.allocObjects}
}

func (u usage) add(v usage) usage {
	return usage{cpu: u.cpu + v.cpu, sys: u.sys + v.sys, switches: u.switches + v.switches,
		allocBytes: u.allocBytes + v.allocBytes, allocObjects: u.allocObjects + v.allocObjects}
}

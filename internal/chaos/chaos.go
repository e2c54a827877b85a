// Package chaos is the chaos run: N randomized plans of the demo tools on a
// real stack (embedded Temporal on a SQLite file, the sandbox providers, a
// SQLite ledger) while every fault kind of the sandbox is injected, worker
// processes are SIGKILLed at random moments and once between a provider's
// commit and the activity's completion, the Temporal server is restarted on
// its SQLite file, one plan is started ten times at once, decisions arrive
// twice and too early, and an operator answers escalations through
// sagaclient as the CLI does. At the end the invariants are checked from
// the providers' stores and the ledger, never from the workflows' own view
// (see Check).
//
// `starter chaos` runs it; integration/chaos_test.go runs the short version.
// Every random choice comes from the seed, before anything runs (see
// NewSchedule); timing still varies from run to run.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devserver"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgerdb"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/sagaworker"
	"github.com/agentsaga/agentsaga/tool"
	"github.com/agentsaga/agentsaga/workflows"
)

// Defaults of Options.
const (
	DefaultPlans       = 200
	DefaultSeed        = 1
	DefaultWorkers     = 2
	DefaultConcurrency = 16
	DefaultSettle      = 6 * time.Minute
)

// Options configure a run.
type Options struct {
	// Plans is how many plans run (DefaultPlans when zero).
	Plans int
	// Seed makes the random choices repeatable.
	Seed uint64
	// Workers is how many worker processes poll at once (DefaultWorkers
	// when zero).
	Workers int
	// Concurrency bounds the plans in flight (DefaultConcurrency when
	// zero).
	Concurrency int
	// Short schedules one random kill and no delay past a tool's timeout:
	// the CI version.
	Short bool
	// DataDir keeps Temporal's SQLite file, the ledger and the sandbox
	// stores; empty uses a temporary directory removed at the end.
	DataDir string
	// WorkerCommand returns the command of a worker process for cfg, not
	// yet started. The process must print WorkerReady (or Options.Ready)
	// on a line once it polls and stop when its stdin closes or on
	// SIGTERM; RunWorker and the worker binary do. Required.
	WorkerCommand func(cfg WorkerConfig) *exec.Cmd
	// Ready is how the line starts that a worker process prints once it
	// polls (WorkerReady when empty): the worker binary's "agentsaga worker
	// on " does.
	Ready string
	// Settle bounds the wait for the plans to end after the last one
	// started (DefaultSettle when zero).
	Settle time.Duration
	// Logger receives progress; nil discards it.
	Logger *slog.Logger
	// Cluster, when set, runs the plans on an existing cluster, ledger and
	// sandbox instead of an embedded stack: only this run's own worker
	// processes are started and killed, and the server is not restarted.
	Cluster *Cluster
	// Inspect, when set, is called after the check while the stack still
	// runs: tests use it to break an invariant in a provider's store on
	// purpose and see Recheck catch it.
	Inspect func(ctx context.Context, in Inspection) error
}

// Cluster is an existing Temporal cluster, ledger and sandbox a chaos run
// uses (a team's staging): the plans carry this run's own tag, so its
// sessions, orders and checks stay apart from anything else there.
type Cluster struct {
	// Temporal is how to reach the cluster (address, namespace, TLS, API
	// key, codec keys); its task queue is the one the run's workers poll.
	Temporal config.Temporal
	// LedgerDSN is the ledger the run's workers share.
	LedgerDSN string
	// SandboxURL is a running sandbox (`starter sandbox serve`), with
	// SandboxToken its admin token.
	SandboxURL, SandboxToken string
	// Restart, when set, is called where the schedule restarts the
	// server (about halfway through the plans, with plans in flight): a
	// test of a cluster of its own kills a server node there and starts it
	// again, returning once it answers; it counts in Report.Restarts. Nil
	// leaves the cluster alone (`starter chaos --address`).
	Restart func(ctx context.Context) error
}

// Report is what a run counted and found.
type Report struct {
	Seed    uint64 `json:"seed"`
	Plans   int    `json:"plans"`
	Workers int    `json:"workers"`
	// Templates counts the plans by template.
	Templates map[string]int `json:"templates"`
	// Ends counts the plans by how they ended ("waiting" for those left
	// waiting for a human on purpose).
	Ends map[string]int `json:"ends"`
	// FaultsInjected and FaultsFired count faults by kind: injected into
	// the sandbox, and taken by a request (the rest were still pending at
	// the end).
	FaultsInjected map[string]int `json:"faults_injected"`
	FaultsFired    map[string]int `json:"faults_fired"`
	// Kills counts SIGKILLs of worker processes; KillsBetweenCommitAndCompletion
	// those that hit a worker whose keyed write the provider had committed
	// and whose answer the proxy withheld.
	Kills                           int `json:"kills"`
	KillsBetweenCommitAndCompletion int `json:"kills_between_commit_and_completion"`
	Restarts                        int `json:"restarts"`
	// StartedTenTimes counts plans started by ten clients at once.
	StartedTenTimes int `json:"started_ten_times"`
	// Decisions counts the operator's answers by kind (approve, reject,
	// override, leave, resolve_succeeded, resolve_failed, resolve_retry,
	// reversal_retry, reversal_failed), plus duplicate (sent again) and
	// early_refused / early_applied (sent before the question could be
	// open).
	Decisions map[string]int `json:"decisions"`
	// Escalated counts the plans that asked a human at least once.
	Escalated int `json:"escalated"`
	Findings
	// Elapsed is how long the run took.
	Elapsed time.Duration `json:"elapsed_ns"`
	OK      bool          `json:"ok"`
}

// runner is one run.
type runner struct {
	o     Options
	log   *slog.Logger
	sched *Schedule
	tag   string
	dir   string
	port  int

	sb    *sandbox.Sandbox
	admin *sandbox.Client
	st    *devstack.Stack // nil on a Cluster
	wh    *withholder

	// Where the plans run: the embedded stack's, or the Cluster's.
	plans                           *sagaclient.Client
	ledger                          ledger.Store
	sandboxURL, ledgerDSN, keysFile string
	temporal                        config.Temporal
	closeConn                       func() error

	mu        sync.Mutex
	workers   map[int]*process
	nextID    int
	rep       Report
	byID      map[string]*PlanSpec
	ends      map[string]End
	left      map[string]chan struct{}
	answering map[string]bool // question ids being or been answered
	revTries  map[string]int  // reversal questions answered retry, by key
	escalated map[string]bool
	unrevd    map[string]bool // plans a person left unreversed
	extra     []Violation
}

// Run runs the chaos run and returns its report. It returns an error only
// when the run could not be carried out (the stack did not start, a worker
// process never came up); broken invariants are in Report.Violations and
// make Report.OK false.
func Run(ctx context.Context, o Options) (rep Report, err error) {
	start := time.Now()
	if o.Plans == 0 {
		o.Plans = DefaultPlans
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.Ready == "" {
		o.Ready = WorkerReady
	}
	if o.WorkerCommand == nil {
		return Report{}, errors.New("chaos: Options.WorkerCommand is nil: give the command of a worker process (see RunWorker)")
	}
	r := &runner{
		o: o, log: o.Logger, workers: map[int]*process{}, byID: map[string]*PlanSpec{}, ends: map[string]End{},
		left: map[string]chan struct{}{}, answering: map[string]bool{}, revTries: map[string]int{},
		escalated: map[string]bool{}, unrevd: map[string]bool{}, wh: newWithholder(),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.tag = strconv.FormatUint(o.Seed, 10)
	r.dir = o.DataDir
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "agentsaga-chaos-"); err != nil {
			return Report{}, fmt.Errorf("chaos: make a temporary data directory: %w", err)
		}
		defer os.RemoveAll(r.dir)
	}
	if o.DataDir != "" || o.Cluster != nil {
		// A kept data directory or a shared cluster may hold earlier
		// runs: a new tag keeps
		// this run's sessions and orders apart (the choices stay the
		// seed's).
		r.tag += "-" + strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	}
	if r.sched, err = NewSchedule(o.Seed, o.Plans, r.tag, o.Short); err != nil {
		return Report{}, err
	}
	r.rep = Report{Seed: o.Seed, Plans: o.Plans, Workers: o.Workers, Templates: map[string]int{}, Ends: map[string]int{},
		FaultsInjected: map[string]int{}, FaultsFired: map[string]int{}, Decisions: map[string]int{}}
	for _, ps := range r.sched.Plans {
		r.byID[ps.Plan.WorkflowID()] = ps
		r.rep.Templates[ps.Template]++
	}
	defer func() {
		if cerr := r.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := r.startStack(ctx); err != nil {
		return Report{}, err
	}
	for range o.Workers {
		if _, err := r.spawn(ctx); err != nil {
			return Report{}, err
		}
	}
	if err := r.run(ctx); err != nil {
		return Report{}, err
	}
	rep, err = r.check(ctx)
	rep.Elapsed = time.Since(start)
	if err == nil && o.Inspect != nil {
		err = o.Inspect(ctx, Inspection{SandboxURL: r.sandboxURL, Schedule: r.sched, Recheck: func(ctx context.Context) (Findings, error) {
			obs, err := r.observe(ctx)
			if err != nil {
				return Findings{}, err
			}
			return Check(obs), nil
		}})
	}
	return rep, err
}

// startStack starts the sandbox, then the stack without a worker on the data
// directory, on a fixed frontend port so the server can be restarted there;
// on a Cluster it connects to what runs there instead.
func (r *runner) startStack(ctx context.Context) error {
	if c := r.o.Cluster; c != nil {
		return r.connect(ctx, c)
	}
	var err error
	if r.sb, err = sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(r.dir, "sandbox")}); err != nil {
		return fmt.Errorf("chaos: start the sandbox: %w", err)
	}
	r.admin = r.sb.Client()
	if r.port, err = freePort(); err != nil {
		return err
	}
	r.st, err = devstack.Start(ctx, devstack.Options{
		DataDir: r.dir, Port: r.port, UIPort: devserver.NoUI, SandboxURL: r.sb.BaseURL(), NoWorker: true,
	})
	if err != nil {
		return fmt.Errorf("chaos: start the stack: %w", err)
	}
	r.plans, r.ledger, r.sandboxURL, r.ledgerDSN, r.keysFile = r.st.Plans, r.st.Ledger, r.sb.BaseURL(), r.st.LedgerDSN, r.st.KeysFile
	r.temporal = config.Temporal{Address: r.st.Server.FrontendAddr(), Namespace: r.st.Server.Namespace(), TaskQueue: workflows.TaskQueue}
	return nil
}

// connect reaches the Cluster's Temporal, ledger and sandbox.
func (r *runner) connect(ctx context.Context, c *Cluster) error {
	if c.LedgerDSN == "" || c.SandboxURL == "" {
		return errors.New("chaos: a run on a cluster needs its ledger (--ledger) and a running sandbox (--sandbox-url)")
	}
	t := c.Temporal
	if t.TaskQueue == "" {
		t.TaskQueue = workflows.TaskQueue
	}
	ring, _, err := t.Keyring()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	opts, err := t.ClientOptions()
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	tc, err := client.Dial(opts)
	if err != nil {
		return fmt.Errorf("chaos: connect to Temporal at %s: %w", t.Address, err)
	}
	store, err := ledgerdb.Open(ctx, c.LedgerDSN)
	if err != nil {
		tc.Close()
		return fmt.Errorf("chaos: open the ledger: %w", err)
	}
	r.closeConn = func() error { tc.Close(); return store.Close() }
	tools, err := demotools.Registry(demotools.Config{})
	if err != nil {
		return err
	}
	r.plans = sagaclient.New(codec.DecodeMemos(tc, codec.New(ring)), sagaclient.Options{TaskQueue: t.TaskQueue, Catalog: tools})
	r.ledger, r.sandboxURL, r.ledgerDSN, r.temporal = store, c.SandboxURL, c.LedgerDSN, t
	r.admin = sandbox.NewClient(c.SandboxURL, nil)
	if c.SandboxToken != "" {
		r.admin = r.admin.WithToken(c.SandboxToken)
	}
	if ring != nil {
		// The workers read the same keys: from the file, else the
		// environment they inherit.
		r.keysFile = t.CodecKeys
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("chaos: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// spawn starts a worker process behind a proxy of its own; a worker that
// cannot connect (the server is restarting) is tried again.
func (r *runner) spawn(ctx context.Context) (*process, error) {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.mu.Unlock()
	px, err := startProxy(id, r.sandboxURL, r.wh)
	if err != nil {
		return nil, err
	}
	cfg := WorkerConfig{
		TemporalAddr: r.temporal.Address, Namespace: r.temporal.Namespace, TaskQueue: r.temporal.TaskQueue,
		LedgerDSN: r.ledgerDSN, SandboxURL: px.URL(), KeysFile: r.keysFile, TLS: tlsEnv(r.temporal),
	}
	var last error
	for attempt := 1; attempt <= 6; attempt++ {
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		p, err := startProcess(wctx, id, r.o.WorkerCommand(cfg), r.o.Ready, px)
		cancel()
		if err == nil {
			r.mu.Lock()
			r.workers[id] = p
			r.mu.Unlock()
			r.log.Info("chaos: worker started", "worker", id, "pid", p.cmd.Process.Pid)
			return p, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt) * time.Second)
	}
	px.close()
	return nil, fmt.Errorf("chaos: %w", last)
}

// kill SIGKILLs worker id (if it still runs) and starts a new one.
func (r *runner) kill(ctx context.Context, id int) (bool, error) {
	r.mu.Lock()
	p := r.workers[id]
	delete(r.workers, id)
	r.mu.Unlock()
	if p == nil {
		return false, nil
	}
	byKill, err := p.kill()
	p.proxy.close()
	if err != nil {
		return false, err
	}
	if !byKill {
		return false, fmt.Errorf("chaos: worker %d was not ended by SIGKILL: %v\n%s", id, p.waitErr, p.out.tail())
	}
	r.mu.Lock()
	r.rep.Kills++
	r.mu.Unlock()
	r.log.Info("chaos: worker killed", "worker", id)
	_, err = r.spawn(ctx)
	return true, err
}

// randomKill kills the k.Pick-th live worker after k.Wait.
func (r *runner) randomKill(ctx context.Context, k Kill) error {
	select {
	case <-time.After(k.Wait):
	case <-ctx.Done():
		return nil
	}
	r.mu.Lock()
	ids := make([]int, 0, len(r.workers))
	for id := range r.workers {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	sort.Ints(ids)
	_, err := r.kill(ctx, ids[k.Pick%len(ids)])
	return err
}

// commitKills kills the worker whose committed write the proxy withholds,
// each time the proxy is armed.
func (r *runner) commitKills(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case h := <-r.wh.hits:
			killed, err := r.kill(ctx, h.worker)
			close(h.release)
			if err != nil {
				return err
			}
			if killed {
				r.mu.Lock()
				r.rep.KillsBetweenCommitAndCompletion++
				r.mu.Unlock()
				r.log.Info("chaos: worker killed between the provider's commit and the activity's completion", "worker", h.worker, "key", h.key, "status", h.status)
			} else {
				r.wh.armed.Store(true) // the worker was gone already: try again
			}
		}
	}
}

// restart stops the embedded Temporal server and starts it again on the
// same SQLite file and port.
func (r *runner) restart(ctx context.Context) error {
	if r.st == nil {
		if r.o.Cluster.Restart == nil {
			r.log.Info("chaos: on a cluster the server is not restarted (only this run's workers are killed)")
			return nil
		}
		if err := r.o.Cluster.Restart(ctx); err != nil {
			return fmt.Errorf("chaos: restart a node of the cluster: %w", err)
		}
		r.mu.Lock()
		r.rep.Restarts++
		r.mu.Unlock()
		r.log.Info("chaos: a node of the cluster was restarted")
		return nil
	}
	if err := r.st.Server.Stop(); err != nil {
		return fmt.Errorf("chaos: stop the Temporal server: %w", err)
	}
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		var srv *devserver.Server
		srv, err = devserver.Start(ctx, devserver.Options{
			DataDir: filepath.Join(r.dir, "temporal"), Port: r.port, UIPort: devserver.NoUI, SearchAttributes: sagaworker.SearchAttributes,
		})
		if err == nil {
			r.st.Server = srv
			r.temporal.Address = srv.FrontendAddr()
			r.mu.Lock()
			r.rep.Restarts++
			r.mu.Unlock()
			r.log.Info("chaos: Temporal server restarted on its SQLite file", "addr", srv.FrontendAddr())
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("chaos: restart the Temporal server on %s: %w", filepath.Join(r.dir, "temporal"), err)
}

// run starts the plans as the schedule says and waits until each ended or
// was left waiting for a human.
func (r *runner) run(ctx context.Context) error {
	bg, stopBG := context.WithCancel(ctx)
	defer stopBG()
	var bgErr error
	var bgOnce sync.Once
	fail := func(err error) {
		if err != nil {
			bgOnce.Do(func() { bgErr = err; stopBG() })
		}
	}
	var bgWG sync.WaitGroup
	bgWG.Add(2)
	go func() { defer bgWG.Done(); fail(r.commitKills(bg)) }()
	go func() { defer bgWG.Done(); r.operate(bg) }()

	// Plans get Settle after the last start to end; then their drivers
	// give up and the plans are reported as not ended.
	pctx, cancel := context.WithCancel(bg)
	defer cancel()
	slots := make(chan struct{}, r.o.Concurrency)
	var plans, kills sync.WaitGroup
	for i, ps := range r.sched.Plans {
		if i == r.sched.RestartBefore {
			fail(r.restart(bg))
		}
		if i == r.sched.ArmBefore {
			r.wh.armed.Store(true)
		}
		select {
		case slots <- struct{}{}:
		case <-bg.Done():
		}
		if bg.Err() != nil {
			break
		}
		for _, f := range ps.Faults {
			if err := r.admin.Fault(bg, f); err != nil {
				fail(fmt.Errorf("chaos: inject %s on %s: %w", f.Fault, f.Op, err))
				break
			}
			r.mu.Lock()
			r.rep.FaultsInjected[string(f.Fault)]++
			r.mu.Unlock()
		}
		plans.Add(1)
		go func() {
			defer plans.Done()
			r.drive(pctx, ps, func() { <-slots })
		}()
		for _, k := range r.sched.Kills {
			if k.After == i {
				kills.Add(1)
				go func() { defer kills.Done(); fail(r.randomKill(bg, k)) }()
			}
		}
		if (i+1)%25 == 0 {
			r.log.Info("chaos: plans started", "started", i+1, "of", len(r.sched.Plans))
		}
	}
	settle := time.AfterFunc(r.o.Settle, cancel)
	defer settle.Stop()
	plans.Wait()
	kills.Wait()
	// The commit kill must happen: if no keyed write came through while
	// armed (a very small run), it is reported as zero.
	r.wh.armed.Store(false)
	stopBG()
	bgWG.Wait()
	if bgErr != nil && !errors.Is(bgErr, context.Canceled) {
		return bgErr
	}
	return ctx.Err()
}

// drive starts one plan (ten times at once when the schedule says so),
// sends its early decision, and waits until it ends or is left waiting for
// a human. done frees the plan's slot.
func (r *runner) drive(ctx context.Context, ps *PlanSpec, done func()) {
	defer done()
	id := ps.Plan.WorkflowID()
	end := func(e End) {
		r.mu.Lock()
		r.ends[id] = e
		r.mu.Unlock()
	}
	leftCh := r.leftChan(id)
	runs := make([]string, ps.Starts)
	errs := make([]error, ps.Starts)
	var wg sync.WaitGroup
	for i := range ps.Starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = r.startPlan(ctx, ps.Plan)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			end(End{Err: "start: " + err.Error()})
			return
		}
	}
	if ps.Starts > 1 {
		r.mu.Lock()
		r.rep.StartedTenTimes++
		for _, run := range runs[1:] {
			if run != runs[0] {
				r.extra = append(r.extra, Violation{Kind: "duplicate", Key: id, Detail: fmt.Sprintf("%d clients starting the same plan at once got two runs: %s and %s", ps.Starts, runs[0], run)})
				break
			}
		}
		r.mu.Unlock()
	}
	if ps.Early {
		r.early(ctx, ps, runs[0])
	}

	type result struct {
		st  workflows.Status
		err error
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan result, 1)
	go func() {
		for {
			s, err := r.plans.Wait(wctx, id)
			var wee *temporal.WorkflowExecutionError
			if err == nil || errors.As(err, &wee) || wctx.Err() != nil {
				res <- result{s, err}
				return
			}
			select { // the server restarting, for example
			case <-time.After(500 * time.Millisecond):
			case <-wctx.Done():
			}
		}
	}()
	select {
	case x := <-res:
		if x.err != nil {
			end(End{Err: x.err.Error()})
			return
		}
		r.mu.Lock()
		unrevd := r.unrevd[id]
		r.mu.Unlock()
		end(End{State: x.st.State, HumanLeftUnreversed: unrevd})
	case <-leftCh:
		end(End{State: workflows.SagaWaitingApproval, Waiting: true})
	}
}

// startPlan starts p through sagaclient, trying again while the server is
// away (a start is idempotent: the same plan attaches to its run).
func (r *runner) startPlan(ctx context.Context, p plan.Plan) (string, error) {
	for {
		run, err := r.plans.Start(ctx, p)
		if err == nil {
			return run.RunID, nil
		}
		var conflict *sagaclient.ConflictError
		if errors.As(err, &conflict) || ctx.Err() != nil {
			return "", err
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return "", err
		}
	}
}

// early sends the approval of the plan's first approval step under the id
// its question will have, for the run just started, before the question can
// be open: the workflow must refuse it (or, when the question opened
// already, apply it once).
func (r *runner) early(ctx context.Context, ps *PlanSpec, runID string) {
	for n := 1; n <= len(ps.Plan.Steps); n++ {
		if !approvalStep(ps.Plan, n) {
			continue
		}
		fp, err := ps.Plan.StepFingerprint(n)
		if err != nil {
			return
		}
		sig := workflows.ApproveSignal{
			Step: n, QuestionID: fmt.Sprintf("q1-step%d-approval", n), RunID: runID, Fingerprint: fp, By: "chaos-early", Approved: true, Reason: "sent before the question opened",
		}
		_, err = r.plans.Approve(ctx, ps.Plan.WorkflowID(), sig)
		var rej *sagaclient.RejectedError
		switch {
		case err == nil:
			r.count("early_applied")
			if ps.Duplicate {
				// The early decision answered the question, so no
				// operator will see it: the plan's duplicated decision
				// is this one, sent again (answered "already applied";
				// nothing happens twice, which the checks verify).
				if _, derr := r.plans.Approve(ctx, ps.Plan.WorkflowID(), sig); derr == nil || errors.As(derr, &rej) || errors.Is(derr, sagaclient.ErrNoOpenQuestion) {
					r.count("duplicate")
				}
			}
		case errors.As(err, &rej), errors.Is(err, sagaclient.ErrNoOpenQuestion):
			r.count("early_refused")
		default:
			r.count("early_error")
		}
		return
	}
}

func (r *runner) count(decision string) {
	r.mu.Lock()
	r.rep.Decisions[decision]++
	r.mu.Unlock()
}

func (r *runner) leftChan(id string) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := r.left[id]
	if ch == nil {
		ch = make(chan struct{})
		r.left[id] = ch
	}
	return ch
}

// leave marks a plan as left waiting for a human.
func (r *runner) leave(id string) {
	ch := r.leftChan(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-ch:
	default:
		close(ch)
		r.rep.Decisions["leave"]++
	}
}

// operate is the operator: it lists escalations as `starter escalations`
// does and answers each open question through sagaclient, as `starter
// approve` and `starter resolve` do.
func (r *runner) operate(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(700 * time.Millisecond):
		}
		escs, err := r.plans.Escalations(ctx)
		if err != nil {
			continue
		}
		for _, e := range escs {
			ps := r.byID[e.WorkflowID]
			if ps == nil {
				continue // another run's plan in a kept data directory
			}
			r.mu.Lock()
			r.escalated[e.WorkflowID] = true
			r.mu.Unlock()
			for _, q := range e.Questions {
				r.mu.Lock()
				busy := r.answering[q.ID+"@"+e.WorkflowID]
				r.answering[q.ID+"@"+e.WorkflowID] = true
				r.mu.Unlock()
				if busy {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if !r.answer(ctx, ps, q) {
						r.mu.Lock()
						delete(r.answering, q.ID+"@"+e.WorkflowID)
						r.mu.Unlock()
					}
				}()
			}
		}
	}
}

// answer answers one question and reports whether it is settled (answered,
// refused for good, or left open on purpose).
func (r *runner) answer(ctx context.Context, ps *PlanSpec, q workflows.Question) bool {
	id := ps.Plan.WorkflowID()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch q.Kind {
	case workflows.QuestionApproval:
		ans := ps.Approval
		if q.Card.Clash != "" {
			ans = ps.Held
		}
		if ans == AnswerLeave {
			r.leave(id)
			return true
		}
		a := workflows.ApproveSignal{Step: q.Step, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "chaos-operator",
			Approved: ans != AnswerReject, Override: ans == AnswerOverride && q.Card.Clash != "", Reason: "chaos run"}
		if a.Approved && q.Card.Clash != "" && !a.Override {
			a.Approved = false // approving a clash needs override: reject it
			ans = AnswerReject
		}
		ok := r.decide(actx, ps, func(by string) error {
			a.By = by
			_, err := r.plans.Approve(actx, id, a)
			return err
		})
		if ok {
			r.count(string(ans))
		}
		return ok
	case workflows.QuestionOutcome:
		outcome, ext, err := r.truth(actx, ps, q)
		if err != nil {
			return false
		}
		s := workflows.ResolveSignal{Step: q.Step, QuestionID: q.ID, Outcome: outcome, ExternalID: ext, By: "chaos-operator", Note: "checked the provider"}
		ok := r.decide(actx, ps, func(by string) error {
			s.By = by
			_, err := r.plans.Resolve(actx, id, s)
			return err
		})
		if ok {
			r.count("resolve_" + string(outcome))
		}
		return ok
	case workflows.QuestionReversal:
		r.mu.Lock()
		tries := r.revTries[q.Key]
		r.mu.Unlock()
		outcome := workflows.OutcomeRetry
		if tries >= 2 || !allows(q, outcome) {
			outcome = workflows.OutcomeFailed
		}
		s := workflows.ResolveSignal{Step: q.Step, QuestionID: q.ID, Outcome: outcome, By: "chaos-operator", Note: "chaos run"}
		ok := r.decide(actx, ps, func(by string) error {
			s.By = by
			_, err := r.plans.Resolve(actx, id, s)
			return err
		})
		if ok {
			r.mu.Lock()
			r.revTries[q.Key]++
			if outcome == workflows.OutcomeFailed {
				r.unrevd[id] = true
			}
			r.rep.Decisions["reversal_"+string(outcome)]++
			r.mu.Unlock()
		}
		return ok
	}
	return true
}

// decide sends a decision, twice at once and then once more by a second
// operator when the plan duplicates its decisions. It reports whether the
// decision was applied or refused for good.
func (r *runner) decide(ctx context.Context, ps *PlanSpec, send func(by string) error) bool {
	settled := func(err error) bool {
		var rej *sagaclient.RejectedError
		return err == nil || errors.As(err, &rej) || errors.Is(err, sagaclient.ErrNoOpenQuestion)
	}
	if !ps.Duplicate {
		return settled(send("chaos-operator"))
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = send("chaos-operator") }()
	}
	wg.Wait()
	ok := settled(errs[0]) || settled(errs[1])
	if ok {
		_ = send("chaos-second-operator") // the question is closed: refused
		r.mu.Lock()
		r.rep.Decisions["duplicate"] += 2
		r.mu.Unlock()
	}
	return ok
}

// truth is what an operator finds at the provider for an outcome question:
// the effect (succeeded, with its id), or none (the plan's scripted retry
// or failed).
func (r *runner) truth(ctx context.Context, ps *PlanSpec, q workflows.Question) (workflows.Outcome, string, error) {
	effects, err := r.admin.Effects(ctx, "")
	if err != nil {
		return "", "", err
	}
	st := ps.Plan.Steps[q.Step-1]
	var found []sandbox.Effect
	for _, e := range effects {
		switch {
		case st.Tool == demotools.SendEmail:
			if e.Kind == "email" && strings.HasSuffix(e.Summary, ": "+ps.Subjects[q.Step]) {
				found = append(found, e)
			}
		case e.Key == q.Key && e.Reverses == "":
			found = append(found, e)
		}
	}
	if len(found) == 1 && allows(q, workflows.OutcomeSucceeded) {
		return workflows.OutcomeSucceeded, found[0].ID, nil
	}
	if len(found) == 0 && allows(q, workflows.Outcome(ps.Absent)) {
		return workflows.Outcome(ps.Absent), "", nil
	}
	return workflows.OutcomeFailed, "", nil
}

func allows(q workflows.Question, o workflows.Outcome) bool {
	if len(q.Answers) == 0 {
		return true
	}
	for _, a := range q.Answers {
		if a == string(o) {
			return true
		}
	}
	return false
}

// check reads the providers' stores and the ledger and checks the
// invariants.
func (r *runner) check(ctx context.Context) (Report, error) {
	rep := r.rep
	// The plans left waiting must be listed by escalations.
	escs, err := r.plans.Escalations(ctx)
	if err != nil {
		return rep, fmt.Errorf("chaos: list escalations at the end: %w", err)
	}
	listed := map[string]bool{}
	for _, e := range escs {
		listed[e.WorkflowID] = true
	}
	for id, e := range r.ends {
		if e.Waiting {
			e.Listed = listed[id]
			r.ends[id] = e
		}
	}
	pending, err := r.admin.Faults(ctx)
	if err != nil {
		return rep, fmt.Errorf("chaos: read the pending faults: %w", err)
	}
	for k, n := range rep.FaultsInjected {
		rep.FaultsFired[k] = n
	}
	for _, f := range pending {
		rep.FaultsFired[string(f.Fault)] -= f.Count
	}
	if err := r.admin.ClearFaults(ctx); err != nil {
		return rep, fmt.Errorf("chaos: clear the faults: %w", err)
	}
	obs, err := r.observe(ctx)
	if err != nil {
		return rep, err
	}
	rep.Findings = Check(obs)
	rep.Violations = append(rep.Violations, r.extra...)
	for _, e := range obs.Ends {
		switch {
		case e.Err != "":
			rep.Ends["not_ended"]++
		case e.Waiting:
			rep.Ends["waiting"]++
		default:
			rep.Ends[string(e.State)]++
		}
	}
	rep.Escalated = len(r.escalated)
	rep.OK = len(rep.Violations) == 0
	return rep, nil
}

// observe reads the providers' stores and the ledger rows of the run's
// keys, beside the plans' ends.
func (r *runner) observe(ctx context.Context) (Observed, error) {
	effects, err := r.admin.Effects(ctx, "")
	if err != nil {
		return Observed{}, fmt.Errorf("chaos: read the providers' effects: %w", err)
	}
	obs := Observed{KeyPrefix: "chaos-" + r.tag + "-", Effects: effects, Ledger: map[string]ledger.Operation{}, Ends: r.ends}
	specs := demotools.Specs()
	for _, ps := range r.sched.Plans {
		id := ps.Plan.WorkflowID()
		if _, ok := obs.Ends[id]; !ok {
			obs.Ends[id] = End{Err: "the run ended before the plan did"}
		}
		for n, st := range ps.Plan.Steps {
			if !specs[st.Tool].Class.IsWrite() {
				continue
			}
			key := ps.Plan.Key(n + 1)
			obs.Intents = append(obs.Intents, Intent{WorkflowID: id, Step: n + 1, Key: key, Tool: st.Tool, Subject: ps.Subjects[n+1]})
			for _, k := range []string{key, tool.CompensationKey(key)} {
				if err := r.readRow(ctx, obs.Ledger, k); err != nil {
					return Observed{}, err
				}
			}
		}
	}
	// Later rounds of a reversal ({key}:compensate:2, ...: a person retried
	// one the provider rejected) have rows of their own.
	for _, e := range effects {
		if _, ok := obs.Ledger[e.Key]; !ok && tool.IsReversalKey(e.Key) {
			if err := r.readRow(ctx, obs.Ledger, e.Key); err != nil {
				return Observed{}, err
			}
		}
	}
	return obs, nil
}

// readRow reads the ledger row of key into rows, if there is one.
func (r *runner) readRow(ctx context.Context, rows map[string]ledger.Operation, key string) error {
	op, err := r.ledger.Get(ctx, key)
	switch {
	case err == nil:
		rows[key] = op
	case !errors.Is(err, ledger.ErrNotFound):
		return fmt.Errorf("chaos: read ledger row %s: %w", key, err)
	}
	return nil
}

// Inspection is what Options.Inspect gets after the check, while the
// stack still runs.
type Inspection struct {
	// SandboxURL is the sandbox's base URL (its providers' APIs are
	// under it, as demotools.SandboxConfig says).
	SandboxURL string
	// Schedule is the run's schedule (plans, keys, subjects).
	Schedule *Schedule
	// Recheck reads the providers' stores and the ledger again and checks
	// them.
	Recheck func(ctx context.Context) (Findings, error)
}

// close stops the workers, their proxies and the stack.
func (r *runner) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r.mu.Lock()
	procs := make([]*process, 0, len(r.workers))
	for _, p := range r.workers {
		procs = append(procs, p)
	}
	r.workers = map[int]*process{}
	r.mu.Unlock()
	for _, p := range procs {
		p.stop(ctx)
		p.proxy.close()
	}
	var errs []error
	if r.st != nil {
		errs = append(errs, r.st.Close())
	}
	if r.sb != nil {
		errs = append(errs, r.sb.Close())
	}
	if r.closeConn != nil {
		errs = append(errs, r.closeConn())
	}
	return errors.Join(errs...)
}

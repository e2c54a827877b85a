package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/sagaclient"
	"github.com/agentsaga/agentsaga/workflows"
)

// The worker deployment and the two builds of TestUpgradeAndRollbackKeepWaitingPlans.
const (
	upgradeDeployment = "agentsaga-it"
	buildA            = "it-build-a"
	buildB            = "it-build-b"
)

// TestUpgradeAndRollbackKeepWaitingPlans upgrades a worker deployment from
// build A to build B and rolls it back with plans of every waiting kind open
// (an approval, an unknown outcome a person must resolve, an outcome being
// reconciled over its window, a reversal a person must retry) and a session
// that continues as new after each turn: each plan and the session's every
// run finish on the build that started them (its versioning info says so, read
// from Temporal, not assumed), with exactly one effect at the providers,
// new plans start on the current build, `status` answers for every plan
// throughout, and `worker replay` of one build proves it replays the other's
// open plans. The two builds are the same code under two build IDs
// (-ldflags -X internal/version.Version, from which the worker takes its
// default build ID): what is tested is the routing, which is what strands
// plans when it is wrong.
func TestUpgradeAndRollbackKeepWaitingPlans(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	dir := t.TempDir()
	began := time.Now()
	phase := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	bins := buildWorkerBuilds(ctx, t, dir, buildA, buildB)
	phase("two worker builds linked")

	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	admin := sb.Client()
	st, err := devstack.Start(ctx, devstack.Options{
		NoWorker: true, UIPort: -1, SandboxURL: sb.BaseURL(), Ledger: "sqlite:" + filepath.Join(dir, "ledger.db"),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	common := []string{"--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(), "--task-queue", workflows.TaskQueue}
	workerArgs := func(build string) []string {
		return append(append([]string{}, common...), "--ledger", st.LedgerDSN, "--sandbox-url", sb.BaseURL(),
			"--data-dir", filepath.Join(dir, build), "--allow-unverified-decisions", "--deployment-name", upgradeDeployment)
	}
	u := &upgrade{t: t, ctx: ctx, st: st, sb: admin}

	a := startWorkerBinary(ctx, t, bins[buildA], buildA, workerArgs(buildA))
	require.Contains(t, a.out.String(), "versioning: deployment "+upgradeDeployment+" build "+buildA)
	u.setCurrent(buildA)
	// A session, continued as new after every turn: each new run
	// inherits its build.
	session := workflows.SessionWorkflowID("it-upgrade-session")
	u.plans = append(u.plans, session)
	u.turn(1)
	u.onBuild(session, buildA)
	onA := u.startWaiting("a")
	u.statusOfAll()
	phase("four plans waiting on A")

	// Upgrade: B polls, B becomes current. A's plans are still waiting.
	startWorkerBinary(ctx, t, bins[buildB], buildB, workerArgs(buildB))
	u.setCurrent(buildB)
	u.turn(2)
	u.onBuild(session, buildA)
	first, err := u.st.Client.GetWorkflowHistory(ctx, session, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT).Next()
	require.NoError(t, err)
	require.NotEmpty(t, first.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId(),
		"the session's latest run was continued as new (and is still on A)")
	u.statusOfAll()
	phase("B current")
	// The plan being reconciled settles first, so that the next round's
	// lookup fault is not cleared under it.
	u.settle(onA, true)
	onB := u.startWaiting("b")
	u.settle(onA, false)
	u.finished(onA, buildA)
	u.statusOfAll()
	phase("A's plans finished on A, four plans waiting on B")

	// The proof before moving plans between builds: A's binary replays
	// every plan waiting on B.
	out, err := exec.CommandContext(ctx, bins[buildA], append([]string{"replay", "--version", upgradeDeployment + ":" + buildB}, common...)...).CombinedOutput()
	require.NoError(t, err, "worker replay:\n%s", out)
	require.Contains(t, string(out), "replayed 4 open workflows with this build: 0 failed", "%s", out)
	require.Equal(t, 4, strings.Count(string(out), ", on "+upgradeDeployment+":"+buildB+")\n"), "each named with its version:\n%s", out)

	phase("A replays B's open plans")

	// Rollback: A current again while B's plans wait; B finishes them.
	u.setCurrent(buildA)
	after := u.start("rollback", u.approvalPlan("rollback"))
	u.onBuild(after, buildA)
	u.statusOfAll()
	u.settle(onB, true)
	u.settle(onB, false)
	u.finished(onB, buildB)
	u.approve(after)
	_, err = u.st.Plans.EndSession(ctx, "it-upgrade-session", "succeeded", "agent")
	require.NoError(t, err)
	u.onBuild(session, buildA)
	u.finished(map[string]string{"approval": after}, buildA)
	u.statusOfAll()
	require.Equal(t, 10, len(u.plans))
	phase("rolled back: B's plans finished on B, the new one on A")
}

// upgrade is the state of TestUpgradeAndRollbackKeepWaitingPlans.
type upgrade struct {
	t     *testing.T
	ctx   context.Context
	st    *devstack.Stack
	sb    *sandbox.Client
	plans []string             // every plan started, for statusOfAll
	keys  map[string]plan.Plan // workflow ID -> plan
	mail  map[string]string    // workflow ID -> the recipient of its email
}

// setCurrent makes build the deployment's current version, once its worker
// has polled (the server refuses a version without pollers).
func (u *upgrade) setCurrent(build string) {
	u.t.Helper()
	h := u.st.Client.WorkerDeploymentClient().GetHandle(upgradeDeployment)
	var err error
	for {
		if _, err = h.SetCurrentVersion(u.ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: build}); err == nil {
			break
		}
		select {
		case <-u.ctx.Done():
			u.t.Fatalf("set %s current: %v", build, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	d, err := h.Describe(u.ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(u.t, err)
	require.Equal(u.t, build, d.Info.RoutingConfig.CurrentVersion.BuildID, "the current version")
}

func (u *upgrade) start(kind string, p plan.Plan) string {
	u.t.Helper()
	run, err := u.st.Plans.Start(u.ctx, p)
	require.NoError(u.t, err, "start the %s plan", kind)
	u.plans = append(u.plans, run.WorkflowID)
	if u.keys == nil {
		u.keys, u.mail = map[string]plan.Plan{}, map[string]string{}
	}
	u.keys[run.WorkflowID] = p
	return run.WorkflowID
}

func (u *upgrade) approvalPlan(round string) plan.Plan {
	return newPlan("it-upgrade-approval-"+round, step(u.t, demotools.CreatePayment, map[string]any{
		"customer_id": "cus_ana", "amount_minor": demotools.PaymentApprovalAboveMinor + 100, "currency": "EUR", "payment_method": "tok_visa"}))
}

// turn sends turn n of the test's session: one read.
func (u *upgrade) turn(n int) {
	u.t.Helper()
	res, err := u.st.Plans.Turn(u.ctx, "it-upgrade-session", workflows.TurnRequest{Turn: n, Steps: []plan.Step{
		step(u.t, demotools.QueryOrder, map[string]any{"order_id": "ord_1001"})}}, sagaclient.SessionOptions{TurnsPerRun: 1})
	require.NoError(u.t, err)
	require.Equal(u.t, workflows.TurnSucceeded, res.State, "%+v", res)
}

// startWaiting starts one plan of each waiting kind on the current build
// and returns them by kind once each waits: approval, needs_human (an email
// whose request was dropped: send_email cannot look itself up),
// reconciling (a ticket committed without an answer while the CRM's search
// lags) and compensating (an invoice rejected after a payment, whose
// reversal was rejected too, waiting for a person's retry).
func (u *upgrade) startWaiting(round string) map[string]string {
	t, ctx := u.t, u.ctx
	for _, f := range []sandbox.FaultSpec{
		{Op: "mail.send", Fault: sandbox.DropBeforeCommit, Count: 1},
		{Op: "tickets.create", Fault: sandbox.CommitThenDrop, Count: 1},
		{Op: "tickets.search", Fault: sandbox.LookupLag, Count: -1},
		{Op: "invoices.create", Fault: sandbox.Reject, Count: 1},
		{Op: "payments.reverse", Fault: sandbox.Reject, Count: 1},
	} {
		require.NoError(t, u.sb.Fault(ctx, f))
	}
	to := "upgrade-" + round + "@example.com"
	ids := map[string]string{
		"approval": u.start("approval", u.approvalPlan(round)),
		"needs_human": u.start("needs_human", newPlan("it-upgrade-human-"+round, step(t, demotools.SendEmail, map[string]any{
			"to": to, "subject": "Your refund", "body": "It is on its way."}))),
		"reconciling": u.start("reconciling", newPlan("it-upgrade-reconcile-"+round, step(t, demotools.CreateTicket, map[string]any{
			"subject": "Upgrade " + round, "order_id": "ord_1001"}))),
		"compensating": u.start("compensating", newPlan("it-upgrade-compensate-"+round,
			step(t, demotools.CreatePayment, map[string]any{"customer_id": "cus_ana", "amount_minor": 1200, "currency": "EUR", "payment_method": "tok_visa"}),
			step(t, demotools.CreateInvoice, map[string]any{"customer_id": "cus_ana", "amount_minor": 1200, "currency": "EUR"}))),
	}
	u.mail[ids["needs_human"]] = to
	waitStatus(ctx, t, u.st, ids["approval"], questionOn(1, workflows.QuestionApproval))
	waitStatus(ctx, t, u.st, ids["needs_human"], questionOn(1, workflows.QuestionOutcome))
	waitStatus(ctx, t, u.st, ids["reconciling"], func(s workflows.Status) bool {
		return len(s.Steps) == 1 && s.Steps[0].State == ledger.Unknown && len(s.Questions) == 0
	})
	waitStatus(ctx, t, u.st, ids["compensating"], questionOn(1, workflows.QuestionReversal))
	build := u.current()
	for _, id := range ids {
		u.onBuild(id, build)
	}
	return ids
}

// current is the deployment's current build.
func (u *upgrade) current() string {
	d, err := u.st.Client.WorkerDeploymentClient().GetHandle(upgradeDeployment).Describe(u.ctx, client.WorkerDeploymentDescribeOptions{})
	require.NoError(u.t, err)
	return d.Info.RoutingConfig.CurrentVersion.BuildID
}

// onBuild requires Temporal's versioning info of workflow id to say it is
// pinned to build of the deployment.
func (u *upgrade) onBuild(id, build string) {
	u.t.Helper()
	var last string
	for {
		d, err := u.st.Client.DescribeWorkflowExecution(u.ctx, id, "")
		require.NoError(u.t, err)
		vi := d.GetWorkflowExecutionInfo().GetVersioningInfo()
		if v := vi.GetDeploymentVersion(); v != nil { // set once its first workflow task completed
			require.Equal(u.t, enumspb.VERSIONING_BEHAVIOR_PINNED, vi.GetBehavior(), "plan %s is pinned", id)
			require.Equal(u.t, upgradeDeployment+":"+build, v.GetDeploymentName()+":"+v.GetBuildId(),
				"plan %s runs on the build that started it (versioning info %v)", id, vi)
			return
		}
		last = vi.String()
		select {
		case <-u.ctx.Done():
			u.t.Fatalf("plan %s never reported a version: %s", id, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// settle decides the waiting plans: with reconciling, only the plan being
// reconciled (the CRM's search catches up), else the others.
func (u *upgrade) settle(ids map[string]string, reconciling bool) {
	t, ctx := u.t, u.ctx
	if reconciling {
		require.NoError(t, u.sb.ClearFaults(ctx))
		s, err := u.st.Plans.Wait(ctx, ids["reconciling"])
		require.NoError(t, err)
		require.Equal(t, workflows.SagaSucceeded, s.State, "the reconciled plan: %s", s.Error)
		return
	}
	u.approve(ids["approval"])
	for _, kind := range []string{"needs_human", "compensating"} {
		s, err := u.st.Plans.Status(ctx, ids[kind])
		require.NoError(t, err)
		require.Len(t, s.Questions, 1, "%s: %+v", kind, s)
		q := s.Questions[0]
		_, err = u.st.Plans.Resolve(ctx, ids[kind], workflows.ResolveSignal{Step: q.Step, QuestionID: q.ID, Outcome: workflows.OutcomeRetry,
			By: "olga", Note: "upgrade test: the provider holds nothing"})
		require.NoError(t, err, "resolve %s", kind)
	}
}

func (u *upgrade) approve(id string) {
	s, err := u.st.Plans.Status(u.ctx, id)
	require.NoError(u.t, err)
	require.Len(u.t, s.Questions, 1, "%+v", s)
	q := s.Questions[0]
	_, err = u.st.Plans.Approve(u.ctx, id, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "olga", Approved: true})
	require.NoError(u.t, err)
}

// finished waits for every plan of ids to end, requires it ended on build
// and counts its effects at the providers: one each.
func (u *upgrade) finished(ids map[string]string, build string) {
	t, ctx := u.t, u.ctx
	var effects []sandbox.Effect
	for kind, id := range ids {
		s, err := u.st.Plans.Wait(ctx, id)
		require.NoError(t, err, kind)
		u.onBuild(id, build)
		p := u.keys[id]
		switch kind {
		case "approval", "reconciling":
			require.Equal(t, workflows.SagaSucceeded, s.State, "%s: %s", kind, s.Error)
			effects = allEffects(ctx, t, u.sb)
			require.Len(t, keyed(effects, p.Key(1)), 1, "%s: one effect under %s", kind, p.Key(1))
		case "needs_human":
			require.Equal(t, workflows.SagaSucceeded, s.State, "%s: %s", kind, s.Error)
			effects = allEffects(ctx, t, u.sb)
			n := 0
			for _, e := range effects {
				if e.Kind == "email" && strings.HasPrefix(e.Summary, u.mail[id]+":") {
					n++
				}
			}
			require.Equal(t, 1, n, "one email to %s", u.mail[id])
		case "compensating":
			require.Equal(t, ledger.Compensated, s.Steps[0].State, "%s: %s %+v", kind, s.Error, s.Steps[0])
			effects = allEffects(ctx, t, u.sb)
			pay := keyed(effects, p.Key(1))
			require.Len(t, pay, 1, "one payment")
			reversals := 0
			for _, e := range effects {
				if e.Reverses == pay[0].ID {
					reversals++
				}
			}
			require.Equal(t, 1, reversals, "one reversal of %s", pay[0].ID)
			require.Empty(t, keyed(effects, p.Key(2)), "no invoice: it was rejected")
		default:
			t.Fatalf("unknown kind %s", kind)
		}
	}
}

func keyed(effects []sandbox.Effect, key string) []sandbox.Effect {
	var out []sandbox.Effect
	for _, e := range effects {
		if e.Key == key {
			out = append(out, e)
		}
	}
	return out
}

// statusOfAll requires the status query to answer for every plan started,
// open or closed: each is answered by a worker of its own build.
func (u *upgrade) statusOfAll() {
	u.t.Helper()
	for _, id := range u.plans {
		_, err := u.st.Plans.Status(u.ctx, id)
		require.NoError(u.t, err, "status of %s", id)
	}
}

// buildWorkerBuilds builds ./worker once per build ID, in parallel, each
// with its version set at link time (the worker's default build ID).
func buildWorkerBuilds(ctx context.Context, t *testing.T, dir string, builds ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	errs := make([]error, len(builds))
	var wg sync.WaitGroup
	for i, b := range builds {
		path := filepath.Join(dir, "worker-"+b)
		out[b] = path
		wg.Go(func() {
			errs[i] = buildWorker(ctx, path, "-ldflags", "-X github.com/agentsaga/agentsaga/internal/version.Version="+b)
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "build %s", builds[i])
	}
	return out
}

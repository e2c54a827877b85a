// Package ledgertest is the conformance suite every ledger driver must pass,
// run from each driver's own tests with the driver's Harness:
//
//	func TestConformance(t *testing.T) { ledgertest.Run(t, harness) }
//
// Each test opens its own fresh ledger, drives time with a fake clock (no
// sleeps) and reads the raw table with SQL where a promise is about what is
// stored.
package ledgertest

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// Harness tells the suite how to make ledgers of one driver.
type Harness struct {
	// New prepares a fresh, empty ledger location (a file path, a DSN with
	// its own schema) and removes it when the test ends. It does not open
	// it: the first Open applies the migrations.
	New func(t testing.TB) string
	// Open opens the ledger at loc reading the time from clock; nil means
	// the driver's own clock (the database's, on PostgreSQL). The suite
	// closes it.
	Open func(t testing.TB, loc string, clock func() time.Time) ledger.Store
	// DB opens raw SQL access to the ledger at loc, for audit reads. The
	// suite closes it.
	DB func(t testing.TB, loc string) *sql.DB
}

// Clock is a fake clock for tests: it moves only when told.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one test's ledger.
type env struct {
	t     *testing.T
	h     Harness
	loc   string
	clock *Clock
	store ledger.Store
	ctx   context.Context
}

func newEnv(t *testing.T, h Harness) *env {
	e := &env{t: t, h: h, loc: h.New(t), clock: NewClock(), ctx: context.Background()}
	e.store = h.Open(t, e.loc, e.clock.Now)
	t.Cleanup(func() { _ = e.store.Close() })
	return e
}

func (e *env) db() *sql.DB {
	db := e.h.DB(e.t, e.loc)
	e.t.Cleanup(func() { _ = db.Close() })
	return db
}

// req is a claim of key with hash "h1" by executor "w1", a one-minute lease.
func req(key string) ledger.ClaimRequest {
	return ledger.ClaimRequest{
		Key: key, ActionType: "apply_refund", RequestHash: "h1", Executor: "w1", Lease: time.Minute,
		WorkflowID: "agent-plan:s1:1", RunID: "run-1", RequestID: "req-1",
	}
}

func (e *env) claim(r ledger.ClaimRequest) ledger.Claim {
	e.t.Helper()
	c, err := e.store.Claim(e.ctx, r)
	require.NoError(e.t, err)
	return c
}

func (e *env) complete(key, executor string, st ledger.Status, result string) ledger.Operation {
	e.t.Helper()
	var raw json.RawMessage
	if result != "" {
		raw = json.RawMessage(result)
	}
	op, err := e.store.Complete(e.ctx, ledger.Completion{Key: key, Executor: executor, Status: st, Result: raw, ExternalID: "ext-" + key})
	require.NoError(e.t, err)
	return op
}

// noDuplicateKeys runs the seeds' audit query on the raw table.
func (e *env) noDuplicateKeys() {
	e.t.Helper()
	rows, err := e.db().QueryContext(e.ctx, `SELECT operation_key, COUNT(*) FROM operations GROUP BY 1 HAVING COUNT(*) > 1`)
	require.NoError(e.t, err)
	defer rows.Close()
	for rows.Next() {
		var key string
		var n int
		require.NoError(e.t, rows.Scan(&key, &n))
		e.t.Errorf("audit: operation key %q has %d rows", key, n)
	}
	require.NoError(e.t, rows.Err())
}

// Run runs the conformance suite against the driver h describes.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"ExecuteThenReplay", testExecuteThenReplay},
		{"ConcurrentClaims", testConcurrentClaims},
		{"TwoProcesses", testTwoProcesses},
		{"ConcurrentOpen", testConcurrentOpen},
		{"ExpiredLeaseReconcileFirst", testExpiredLease},
		{"UnknownReconcileFirst", testUnknown},
		{"SameExecutorReconcileFirst", testSameExecutor},
		{"PendingReleasesLease", testPending},
		{"SentAtMarksOnlySends", testSentAt},
		{"ConflictInEveryState", testConflictEveryState},
		{"FinalStates", testFinalStates},
		{"CompleteOnlyByLeaseOwner", testCompleteOwner},
		{"SecretsNeverStored", testSecrets},
		{"GuardRefusesSecondSession", testGuardRefuses},
		{"GuardHoldsOtherUnits", testGuardHolds},
		{"ConcurrentGuard", testConcurrentGuard},
		{"SuspectedDuplicateHeld", testDuplicate},
		{"Exceptions", testExceptions},
		{"PermitSingleUse", testPermitSingleUse},
		{"PermitRace", testPermitRace},
		{"PermitOverride", testPermitOverride},
		{"GrantPermit", testGrantPermit},
		{"OverrideSeesHolders", testOverrideSeesHolders},
		{"UsedPermitRefused", testUsedPermitRefused},
		{"TransitionKeepsResolver", testTransition},
		{"GivenUpReleasesGuard", testGivenUpReleasesGuard},
		{"GuardOutlivesPurge", testGuardOutlivesPurge},
		{"Decisions", testDecisions},
		{"DecisionLog", testDecisionLog},
		{"TextNeverRefused", testTextNeverRefused},
		{"InScope", testInScope},
		{"SummaryKeptAndRedacted", testSummary},
		{"Resolve", testResolve},
		{"PurgeOnlyFinal", testPurge},
		{"StatusCheckConstraint", testStatusCheck},
		{"InvalidRequests", testInvalid},
		{"Report", testReport},
		{"AmountIn", testAmountIn},
		{"KeylessCalls", testKeylessCalls},
		{"QuestionClaims", testQuestionClaims},
	}
	if os.Getenv(helperEnv) != "" {
		// A child process of TwoProcesses runs only that test.
		tests = tests[2:3]
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func testExecuteThenReplay(t *testing.T, h Harness) {
	e := newEnv(t, h)
	now := e.clock.Now().Truncate(time.Microsecond)
	c := e.claim(req("k1"))
	require.Equal(t, ledger.Execute, c.Verdict)
	require.Equal(t, ledger.InProgress, c.Operation.Status)
	require.Equal(t, 1, c.Operation.AttemptCount)
	require.Equal(t, "w1", c.Operation.LeaseOwner)
	require.True(t, now.Add(time.Minute).Equal(c.Operation.LeaseUntil), "lease until %s", c.Operation.LeaseUntil)

	got, err := e.store.Get(e.ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, ledger.InProgress, got.Status)
	require.Equal(t, "agent-plan:s1:1", got.WorkflowID)
	require.Equal(t, "run-1", got.RunID)
	require.Equal(t, "req-1", got.RequestID)
	require.True(t, now.Equal(got.CreatedAt), "created %s, want %s", got.CreatedAt, now)
	require.True(t, now.Add(time.Minute).Equal(got.LeaseUntil))

	e.clock.Advance(time.Second)
	op := e.complete("k1", "w1", ledger.Succeeded, `{"refund_id":"re_1","amount_minor":12900}`)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Empty(t, op.LeaseOwner)
	require.True(t, op.LeaseUntil.IsZero())
	require.True(t, now.Add(time.Second).Equal(op.CompletedAt))
	require.Equal(t, "ext-k1", op.ExternalID)

	// Replay to anyone, even after the lease would have expired.
	e.clock.Advance(time.Hour)
	r := req("k1")
	r.Executor = "w2"
	c = e.claim(r)
	require.Equal(t, ledger.Replay, c.Verdict)
	require.JSONEq(t, `{"refund_id":"re_1","amount_minor":12900}`, string(c.Operation.Result))
	require.Equal(t, 1, c.Operation.AttemptCount)
	require.Equal(t, "ext-k1", c.Operation.ExternalID)

	_, err = e.store.Get(e.ctx, "nope")
	require.ErrorIs(t, err, ledger.ErrNotFound)
	e.noDuplicateKeys()
}

// raceClaims starts n claims at the same instant, claim i made by
// request(i), and returns every verdict (failing the test on any error).
func (e *env) raceClaims(n int, request func(i int) ledger.ClaimRequest) []ledger.Verdict {
	e.t.Helper()
	verdicts := make([]ledger.Verdict, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := e.store.Claim(e.ctx, request(i))
			verdicts[i], errs[i] = c.Verdict, err
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(e.t, errs[i], "claim %d", i)
	}
	return verdicts
}

// tally counts verdicts.
func tally(verdicts []ledger.Verdict) map[ledger.Verdict]int {
	count := map[ledger.Verdict]int{}
	for _, v := range verdicts {
		count[v]++
	}
	return count
}

// testConcurrentClaims races 200 executors for one key: on the insert of a
// fresh key, on the conditional update of a pending row, of an unknown row
// and of an expired lease. Each time exactly one gets the lease.
func testConcurrentClaims(t *testing.T, h Harness) {
	e := newEnv(t, h)
	const n = 200
	race := func(phase string) (winner string, _ map[ledger.Verdict]int) {
		verdicts := e.raceClaims(n, func(i int) ledger.ClaimRequest {
			r := req("same")
			r.Executor = fmt.Sprintf("%s-w%d", phase, i)
			return r
		})
		for i, v := range verdicts {
			if v == ledger.Execute || v == ledger.ReconcileFirst {
				winner = fmt.Sprintf("%s-w%d", phase, i)
			}
		}
		return winner, tally(verdicts)
	}
	w, count := race("fresh")
	require.Equal(t, map[ledger.Verdict]int{ledger.Execute: 1, ledger.InFlight: n - 1}, count)

	e.complete("same", w, ledger.Pending, "")
	w, count = race("pending")
	require.Equal(t, map[ledger.Verdict]int{ledger.Execute: 1, ledger.InFlight: n - 1}, count)

	e.complete("same", w, ledger.Unknown, "")
	w, count = race("unknown")
	require.Equal(t, map[ledger.Verdict]int{ledger.ReconcileFirst: 1, ledger.InFlight: n - 1}, count)

	e.clock.Advance(time.Minute)
	_, count = race("expired")
	require.Equal(t, map[ledger.Verdict]int{ledger.ReconcileFirst: 1, ledger.InFlight: n - 1}, count)

	op, err := e.store.Get(e.ctx, "same")
	require.NoError(t, err)
	require.Equal(t, 4, op.AttemptCount, "one attempt per race")
	require.NotEqual(t, w, op.LeaseOwner)
	e.noDuplicateKeys()
}

const (
	helperEnv  = "AGENTSAGA_LEDGERTEST_LOC"
	helperKeys = 60
	helperLine = "LEDGERTEST "
)

// testTwoProcesses re-executes the test binary twice; both children open the
// same ledger (racing on the migrations too), wait on a barrier the parent
// releases, and claim the same keys from several goroutines each.
func testTwoProcesses(t *testing.T, h Harness) {
	if loc := os.Getenv(helperEnv); loc != "" {
		twoProcessesChild(t, h, loc)
		return
	}
	loc := h.New(t)
	var pattern []string
	for _, part := range strings.Split(t.Name(), "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		lines  chan string
		output strings.Builder
	}
	children := make([]*child, 2)
	for i := range children {
		cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(pattern, "/"), "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+loc)
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		c := &child{cmd: cmd, stdin: stdin, lines: make(chan string)}
		children[i] = c
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
			close(c.lines)
		}()
	}
	// Barrier: both children have opened the ledger before either claims.
	for _, c := range children {
		for line := range c.lines {
			c.output.WriteString(line + "\n")
			if line == helperLine+"ready" {
				break
			}
		}
	}
	for _, c := range children {
		require.NoError(t, c.stdin.Close())
	}
	executes := map[string]int{}
	total := 0
	for i, c := range children {
		for line := range c.lines {
			c.output.WriteString(line + "\n")
			f := strings.Fields(strings.TrimPrefix(line, helperLine))
			if !strings.HasPrefix(line, helperLine) || len(f) != 2 {
				continue
			}
			total++
			if ledger.Verdict(f[1]) == ledger.Execute {
				executes[f[0]]++
			}
		}
		require.NoError(t, c.cmd.Wait(), "child %d failed:\n%s", i, c.output.String())
	}
	require.Equal(t, 2*4*helperKeys, total, "children reported too few claims:\n%s\n%s", children[0].output.String(), children[1].output.String())
	for k := range helperKeys {
		key := fmt.Sprintf("proc-%d", k)
		require.Equal(t, 1, executes[key], "key %s executed %d times across two processes", key, executes[key])
	}
	e := &env{t: t, h: h, loc: loc, ctx: context.Background()}
	e.noDuplicateKeys()
}

func twoProcessesChild(t *testing.T, h Harness, loc string) {
	store := h.Open(t, loc, nil)
	defer store.Close()
	fmt.Println(helperLine + "ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes stdin to start both
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range helperKeys {
				r := req(fmt.Sprintf("proc-%d", k))
				r.Executor = fmt.Sprintf("pid%d-g%d", os.Getpid(), g)
				c, err := store.Claim(context.Background(), r)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				mu.Lock()
				fmt.Printf("%s%s %s\n", helperLine, r.Key, c.Verdict)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func testConcurrentOpen(t *testing.T, h Harness) {
	loc := h.New(t)
	var wg sync.WaitGroup
	stores := make([]ledger.Store, 4)
	for i := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); stores[i] = h.Open(t, loc, nil) }()
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			require.NoError(t, s.Close())
		}
	}
	db := h.DB(t, loc)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM ledger_migrations`).Scan(&n))
	var files int
	require.NoError(t, db.QueryRow(`SELECT COUNT(DISTINCT version) FROM ledger_migrations`).Scan(&files))
	require.Equal(t, files, n, "a migration was recorded twice")
	require.Positive(t, n)
}

func testExpiredLease(t *testing.T, h Harness) {
	e := newEnv(t, h)
	require.Equal(t, ledger.Execute, e.claim(req("k")).Verdict)
	other := req("k")
	other.Executor = "w2"
	other.Lease = 2 * time.Minute

	e.clock.Advance(time.Minute - time.Microsecond)
	c := e.claim(other)
	require.Equal(t, ledger.InFlight, c.Verdict, "the lease is live one microsecond before it ends")
	require.Contains(t, c.Reason, "w1")

	e.clock.Advance(time.Microsecond)
	c = e.claim(other)
	require.Equal(t, ledger.ReconcileFirst, c.Verdict, "an expired lease is taken over only to reconcile first")
	require.Equal(t, "w2", c.Operation.LeaseOwner)
	require.Equal(t, 2, c.Operation.AttemptCount)
	require.True(t, e.clock.Now().Add(2*time.Minute).Equal(c.Operation.LeaseUntil), "lease follows ClaimRequest.Lease")

	// The first executor woke up late: its result must not land.
	_, err := e.store.Complete(e.ctx, ledger.Completion{Key: "k", Executor: "w1", Status: ledger.Succeeded})
	require.ErrorIs(t, err, ledger.ErrLeaseLost)
	// A third executor sees the new lease as live.
	third := req("k")
	third.Executor = "w3"
	require.Equal(t, ledger.InFlight, e.claim(third).Verdict)

	op := e.complete("k", "w2", ledger.Succeeded, `{"ok":true}`)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, ledger.Replay, e.claim(third).Verdict)
}

func testUnknown(t *testing.T, h Harness) {
	e := newEnv(t, h)
	require.Equal(t, ledger.Execute, e.claim(req("k")).Verdict)
	op := e.complete("k", "w1", ledger.Unknown, "")
	require.Equal(t, ledger.Unknown, op.Status)
	require.Empty(t, op.LeaseOwner)
	require.True(t, op.CompletedAt.IsZero(), "unknown is not final")

	r := req("k")
	r.Executor = "w2"
	c := e.claim(r)
	require.Equal(t, ledger.ReconcileFirst, c.Verdict)
	require.Equal(t, ledger.InProgress, c.Operation.Status)
	require.Equal(t, 2, c.Operation.AttemptCount)
	require.Equal(t, "w2", c.Operation.LeaseOwner)
	r.Executor = "w3"
	require.Equal(t, ledger.InFlight, e.claim(r).Verdict)
}

func testSameExecutor(t *testing.T, h Harness) {
	e := newEnv(t, h)
	require.Equal(t, ledger.Execute, e.claim(req("k")).Verdict)
	e.clock.Advance(10 * time.Second)
	c := e.claim(req("k"))
	require.Equal(t, ledger.ReconcileFirst, c.Verdict, "the same executor may already have called")
	require.Equal(t, 1, c.Operation.AttemptCount)
	require.True(t, e.clock.Now().Add(time.Minute).Equal(c.Operation.LeaseUntil), "the lease is renewed")
}

func testPending(t *testing.T, h Harness) {
	e := newEnv(t, h)
	require.Equal(t, ledger.Execute, e.claim(req("k")).Verdict)
	op := e.complete("k", "w1", ledger.Pending, "")
	require.Equal(t, ledger.Pending, op.Status)
	require.Empty(t, op.LeaseOwner, "pending releases the lease")
	require.True(t, op.LeaseUntil.IsZero())

	r := req("k")
	r.Executor = "w2"
	c := e.claim(r) // no clock advance: the lease was released, not expired
	require.Equal(t, ledger.Execute, c.Verdict, "provably not sent: run again")
	require.Equal(t, 2, c.Operation.AttemptCount)
	require.Equal(t, "w2", c.Operation.LeaseOwner)
}

// testSentAt: SentAt, the start of the in-flight horizon, is the time of
// the last claim that let a call go (Execute); a claim that must reconcile
// first, or one that only looks (LookOnly), never moves it.
func testSentAt(t *testing.T, h Harness) {
	e := newEnv(t, h)
	c := e.claim(req("k"))
	require.Equal(t, ledger.Execute, c.Verdict)
	sent := e.clock.Now()
	require.True(t, sent.Equal(c.Operation.SentAt), "a fresh claim marks the send: got %s, want %s", c.Operation.SentAt, sent)
	e.complete("k", "w1", ledger.Unknown, "")

	e.clock.Advance(30 * time.Second)
	r := req("k")
	r.Executor = "w2"
	c = e.claim(r)
	require.Equal(t, ledger.ReconcileFirst, c.Verdict)
	require.True(t, sent.Equal(c.Operation.SentAt), "reconcile first sends nothing: SentAt stays %s, got %s", sent, c.Operation.SentAt)
	got, err := e.store.Get(e.ctx, "k")
	require.NoError(t, err)
	require.True(t, sent.Equal(got.SentAt), "Get reads SentAt back")

	// Found absent past the horizon: pending, then a new send.
	e.complete("k", "w2", ledger.Pending, "")
	e.clock.Advance(10 * time.Second)
	look := req("k")
	look.Executor, look.LookOnly = "w3", true
	c = e.claim(look)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.True(t, sent.Equal(c.Operation.SentAt), "a claim that only looks sends nothing: SentAt stays %s, got %s", sent, c.Operation.SentAt)
	e.complete("k", "w3", ledger.Pending, "")
	e.clock.Advance(10 * time.Second)
	r.Executor = "w4"
	c = e.claim(r)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.True(t, e.clock.Now().Equal(c.Operation.SentAt), "a send after pending moves SentAt to now")

	// A fresh key claimed only to look has sent nothing.
	fresh := req("k2")
	fresh.LookOnly = true
	c = e.claim(fresh)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.True(t, c.Operation.SentAt.IsZero(), "a look-only claim of a fresh key has no send: got %s", c.Operation.SentAt)
}

// reach puts key into state st, reached the way a worker (or a human) would.
func (e *env) reach(key string, st ledger.Status) {
	e.t.Helper()
	if st == "held" {
		first := req(key + "-holder")
		first.GuardScope = "scope-" + key
		require.Equal(e.t, ledger.Execute, e.claim(first).Verdict)
		r := req(key)
		r.GuardScope, r.GuardHold = "scope-"+key, true
		require.Equal(e.t, ledger.Held, e.claim(r).Verdict)
		return
	}
	require.Equal(e.t, ledger.Execute, e.claim(req(key)).Verdict)
	if st != ledger.InProgress {
		e.complete(key, "w1", st, `{"n":1}`)
	}
}

var allStates = []ledger.Status{ledger.Pending, ledger.InProgress, ledger.Succeeded, ledger.FailedFinal, ledger.Unknown,
	ledger.NeedsHuman, ledger.Compensating, ledger.Compensated, ledger.CompensationFailed, "held"}

func testConflictEveryState(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for _, st := range allStates {
		key := "k-" + string(st)
		e.reach(key, st)
		before, err := e.store.Get(e.ctx, key)
		require.NoError(t, err)
		for _, approved := range []bool{false, true} {
			r := req(key)
			r.RequestHash, r.Executor = "h2", "w2"
			if approved {
				r.PermitID = "p-test"
			}
			e.clock.Advance(time.Hour) // even with every lease expired
			c := e.claim(r)
			require.Equal(t, ledger.Conflict, c.Verdict, "state %s", st)
			require.Contains(t, c.Reason, "h1", "state %s", st)
			require.Contains(t, c.Reason, "h2", "state %s", st)
		}
		after, err := e.store.Get(e.ctx, key)
		require.NoError(t, err)
		require.Equal(t, before, after, "a conflict changes nothing (state %s)", st)
	}
	e.noDuplicateKeys()
}

func testFinalStates(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for _, st := range []ledger.Status{ledger.FailedFinal, ledger.Compensated, ledger.NeedsHuman, ledger.CompensationFailed, ledger.Compensating} {
		key := "k-" + string(st)
		e.reach(key, st)
		r := req(key)
		r.Executor, r.PermitID = "w2", "p-test" // approval is for held calls, not for these
		e.clock.Advance(time.Hour)
		c := e.claim(r)
		require.Equal(t, ledger.Final, c.Verdict, "state %s", st)
		require.Equal(t, st, c.Operation.Status)
		require.Equal(t, 1, c.Operation.AttemptCount, "state %s: no new attempt", st)
	}
	e.reach("k-succeeded", ledger.Succeeded)
	for _, st := range []ledger.Status{ledger.Succeeded, ledger.FailedFinal, ledger.Compensated} {
		op, err := e.store.Get(e.ctx, "k-"+string(st))
		require.NoError(t, err)
		require.False(t, op.CompletedAt.IsZero(), "final state %s has completed_at", st)
	}
}

func testCompleteOwner(t *testing.T, h Harness) {
	e := newEnv(t, h)
	require.Equal(t, ledger.Execute, e.claim(req("k")).Verdict)
	_, err := e.store.Complete(e.ctx, ledger.Completion{Key: "k", Executor: "intruder", Status: ledger.Succeeded})
	require.ErrorIs(t, err, ledger.ErrLeaseLost)
	op, err := e.store.Get(e.ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ledger.InProgress, op.Status)

	// The owner may still complete after its lease ran out, as long as no
	// one took over.
	e.clock.Advance(time.Hour)
	e.complete("k", "w1", ledger.FailedFinal, "")
	_, err = e.store.Complete(e.ctx, ledger.Completion{Key: "k", Executor: "w1", Status: ledger.Succeeded})
	require.ErrorIs(t, err, ledger.ErrLeaseLost, "a completed operation is not completed twice")
	op, err = e.store.Get(e.ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ledger.FailedFinal, op.Status)

	_, err = e.store.Complete(e.ctx, ledger.Completion{Key: "missing", Executor: "w1", Status: ledger.Succeeded})
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = e.store.Complete(e.ctx, ledger.Completion{Key: "k", Executor: "w1", Status: ledger.InProgress})
	require.Error(t, err)
}

const (
	card  = "4111111111111111"
	token = "tok_live_9f8e7d6c5b4a"
)

func testSecrets(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := req("k")
	r.NormalizedArgs = `{"card_number":"` + card + `","token":"` + token + `","order_id":"o-1"}`
	r.DuplicateWindow = time.Hour
	r.Entity = "o-1"
	require.Equal(t, ledger.Execute, e.claim(r).Verdict)
	op, err := e.store.Complete(e.ctx, ledger.Completion{Key: "k", Executor: "w1", Status: ledger.Succeeded,
		ErrorCode: "declined " + card,
		Result: json.RawMessage(`{"refund_id":"re_1","card":{"number":"` + card + `"},"access_token":"` + token +
			`","note":"refunded to 4111 1111 1111 1111","pan":` + card + `}`)})
	require.NoError(t, err)
	require.NotContains(t, string(op.Result), card)
	require.NotContains(t, string(op.Result), token)
	require.Contains(t, string(op.Result), "re_1")
	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: "k", Status: ledger.Succeeded, By: "ops", Note: "card " + card + " checked"})
	require.NoError(t, err)

	rows, err := e.db().QueryContext(e.ctx, `SELECT * FROM operations`)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var raw strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				v = string(b)
			}
			fmt.Fprintf(&raw, "%s=%v\n", cols[i], v)
		}
	}
	require.NoError(t, rows.Err())
	dump := raw.String()
	require.Contains(t, dump, "re_1", "the dump reads the stored result")
	for _, secret := range []string{card, "4111 1111 1111 1111", token} {
		require.NotContains(t, dump, secret, "raw table:\n%s", dump)
	}
}

func testGuardRefuses(t *testing.T, h Harness) {
	e := newEnv(t, h)
	first := req("s1:1:0:apply_refund")
	first.GuardScope = "refund-per-order:o-1"
	first.NormalizedArgs = `{"amount_minor":12900,"order_id":"o-1"}`
	require.Equal(t, ledger.Execute, e.claim(first).Verdict)

	second := req("s2:1:0:apply_refund") // another session, same order
	second.GuardScope = first.GuardScope
	second.RequestHash = "h-other"
	second.Executor = "w2"
	c := e.claim(second)
	require.Equal(t, ledger.GuardRefused, c.Verdict)
	require.Contains(t, c.Reason, "s1:1:0:apply_refund")
	require.Contains(t, c.Reason, first.GuardScope)
	_, err := e.store.Get(e.ctx, second.Key)
	require.ErrorIs(t, err, ledger.ErrNotFound, "a refused call leaves no row")

	// Still refused after the first succeeded: one refund per order.
	e.complete(first.Key, "w1", ledger.Succeeded, `{"refund_id":"re_1"}`)
	require.Equal(t, ledger.GuardRefused, e.claim(second).Verdict)
	// Another order is free.
	third := req("s2:1:1:apply_refund")
	third.GuardScope = "refund-per-order:o-2"
	require.Equal(t, ledger.Execute, e.claim(third).Verdict)

	// Once the first is compensated the scope is free again.
	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: first.Key, Status: ledger.Compensated, By: "ops", Note: "reversed"})
	require.NoError(t, err)
	require.Equal(t, ledger.Execute, e.claim(second).Verdict)
	e.noDuplicateKeys()
}

// testConcurrentGuard races many sessions for one guard scope, each with its
// own key: exactly one runs, and with GuardHold exactly one runs and the rest
// are held.
func testConcurrentGuard(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for _, hold := range []bool{false, true} {
		const n = 50
		scope := fmt.Sprintf("refund-per-order:o-%t", hold)
		count := tally(e.raceClaims(n, func(i int) ledger.ClaimRequest {
			r := req(fmt.Sprintf("s%d:1:0:apply_refund:%t", i, hold))
			r.Executor, r.RequestHash = fmt.Sprintf("w%d", i), fmt.Sprintf("h%d", i)
			r.GuardScope, r.GuardHold = scope, hold
			return r
		}))
		others := ledger.GuardRefused
		if hold {
			others = ledger.Held
		}
		require.Equal(t, map[ledger.Verdict]int{ledger.Execute: 1, others: n - 1}, count, "hold=%t", hold)
	}
	e.noDuplicateKeys()
}

func testGuardHolds(t *testing.T, h Harness) {
	e := newEnv(t, h)
	first := req("s1:1:0:apply_refund")
	first.GuardScope, first.GuardHold = "refund-per-order:o-1", true
	first.NormalizedArgs = `{"amount_minor":12900,"order_id":"o-1"}`
	require.Equal(t, ledger.Execute, e.claim(first).Verdict)
	e.complete(first.Key, "w1", ledger.Succeeded, `{"refund_id":"re_1"}`)

	// The model re-sends 129.00 as 129: another hash, another session.
	e.clock.Advance(time.Minute)
	second := req("s2:4:0:apply_refund")
	second.GuardScope, second.GuardHold = first.GuardScope, true
	second.NormalizedArgs = `{"amount_minor":129,"order_id":"o-1"}`
	second.RequestHash, second.Executor = "h-129", "w2"
	c := e.claim(second)
	require.Equal(t, ledger.Held, c.Verdict)
	require.Contains(t, c.Reason, first.Key)
	require.Equal(t, ledger.NeedsHuman, c.Operation.Status)
	require.Equal(t, c.Reason, c.Operation.HoldReason)
	require.Zero(t, c.Operation.AttemptCount)
	require.Empty(t, c.Operation.LeaseOwner)

	exc, err := e.store.Exceptions(e.ctx, ledger.ExceptionFilter{})
	require.NoError(t, err)
	require.Len(t, exc, 1)
	require.Equal(t, second.Key, exc[0].Key)
	require.Equal(t, c.Reason, exc[0].HoldReason)

	// Held again on retry, until a human approves.
	e.clock.Advance(time.Hour)
	require.Equal(t, ledger.Held, e.claim(second).Verdict)
	second.PermitID = e.grant("q-second", second, true)
	c = e.claim(second)
	require.Equal(t, ledger.Execute, c.Verdict)
	require.Equal(t, 1, c.Operation.AttemptCount)
	exc, err = e.store.Exceptions(e.ctx, ledger.ExceptionFilter{})
	require.NoError(t, err)
	require.Empty(t, exc)
	// Both now hold the scope: a third is held too.
	third := req("s3:1:0:apply_refund")
	third.GuardScope, third.GuardHold = first.GuardScope, true
	require.Equal(t, ledger.Held, e.claim(third).Verdict)
	e.noDuplicateKeys()
}

func testDuplicate(t *testing.T, h Harness) {
	e := newEnv(t, h)
	dup := func(key string) ledger.ClaimRequest {
		r := req(key)
		r.Entity, r.NormalizedArgs, r.DuplicateWindow = "order:o-1", `{"amount_minor":12900,"order_id":"o-1"}`, 10*time.Minute
		return r
	}
	require.Equal(t, ledger.Execute, e.claim(dup("s1:1:0:apply_refund")).Verdict)
	e.clock.Advance(5 * time.Minute)
	c := e.claim(dup("s2:1:0:apply_refund"))
	require.Equal(t, ledger.Held, c.Verdict)
	require.Contains(t, c.Reason, "duplicate")
	require.Contains(t, c.Reason, "s1:1:0:apply_refund")
	require.Contains(t, c.Reason, "order:o-1")
	require.Equal(t, c.Reason, c.Operation.HoldReason)

	// Other arguments, another entity or another tool are not duplicates.
	other := dup("s3:1:0:apply_refund")
	other.NormalizedArgs = `{"amount_minor":500,"order_id":"o-1"}`
	require.Equal(t, ledger.Execute, e.claim(other).Verdict)
	other = dup("s3:1:1:apply_refund")
	other.Entity = "order:o-2"
	require.Equal(t, ledger.Execute, e.claim(other).Verdict)
	other = dup("s3:1:2:send_email")
	other.ActionType = "send_email"
	require.Equal(t, ledger.Execute, e.claim(other).Verdict)

	// Approved with override, it runs.
	approved := dup("s4:1:0:apply_refund")
	approved.PermitID = e.grant("q-s4", approved, true)
	require.Equal(t, ledger.Execute, e.claim(approved).Verdict)

	// Outside the window it is not a duplicate any more.
	e.clock.Advance(6 * time.Minute) // s1 is 11 minutes old, s4 6
	require.Equal(t, ledger.Held, e.claim(dup("s5:1:0:apply_refund")).Verdict, "s4 is inside the window")
	e.clock.Advance(5 * time.Minute)
	require.Equal(t, ledger.Execute, e.claim(dup("s6:1:0:apply_refund")).Verdict)
}

func testExceptions(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.reach("old-unknown", ledger.Unknown)
	e.clock.Advance(time.Minute)
	e.reach("human", ledger.NeedsHuman)
	e.clock.Advance(time.Minute)
	e.reach("held", "held") // also makes held-holder, in progress
	e.clock.Advance(time.Minute)
	e.reach("comp-failed", ledger.CompensationFailed)
	e.clock.Advance(time.Minute)
	for _, st := range []ledger.Status{ledger.Succeeded, ledger.FailedFinal, ledger.Pending, ledger.Compensated, ledger.Compensating} {
		e.reach("fine-"+string(st), st)
	}
	e.clock.Advance(9 * time.Minute)
	e.reach("new-unknown", ledger.Unknown)
	live := req("live")
	live.Lease = time.Hour
	require.Equal(t, ledger.Execute, e.claim(live).Verdict)
	e.clock.Advance(time.Minute)
	// held-holder's lease ended 11 minutes ago: its executor is stuck.

	keys := func(f ledger.ExceptionFilter) []string {
		ops, err := e.store.Exceptions(e.ctx, f)
		require.NoError(t, err)
		var ks []string
		for i, op := range ops {
			ks = append(ks, op.Key)
			if i > 0 {
				require.False(t, op.CreatedAt.Before(ops[i-1].CreatedAt), "oldest first")
			}
		}
		return ks
	}
	// old-unknown has been unknown for 14 minutes, new-unknown for 1.
	require.Equal(t, []string{"old-unknown", "human", "held", "held-holder", "comp-failed"},
		keys(ledger.ExceptionFilter{UnknownOlderThan: 10 * time.Minute}))
	require.Equal(t, []string{"old-unknown", "human", "held", "held-holder", "comp-failed", "new-unknown"},
		keys(ledger.ExceptionFilter{UnknownOlderThan: time.Minute}))
	require.Equal(t, []string{"human", "held", "comp-failed"},
		keys(ledger.ExceptionFilter{UnknownOlderThan: time.Hour, StuckFor: time.Hour}), "stuck for 11 minutes only")
	require.Equal(t, []string{"human", "held", "held-holder", "comp-failed"},
		keys(ledger.ExceptionFilter{UnknownOlderThan: time.Hour, StuckFor: 11 * time.Minute}))
	// The live lease runs for 59 more minutes: not stuck. When it ends, it is.
	e.clock.Advance(59*time.Minute - time.Microsecond)
	require.NotContains(t, keys(ledger.ExceptionFilter{}), "live")
	e.clock.Advance(time.Microsecond)
	require.Equal(t, []string{"old-unknown", "human", "held", "held-holder", "comp-failed", "live", "new-unknown"},
		keys(ledger.ExceptionFilter{}))
}

func testResolve(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.reach("k", ledger.Unknown)
	e.clock.Advance(time.Hour)
	op, err := e.store.Resolve(e.ctx, ledger.Resolution{Key: "k", Status: ledger.Succeeded, ExternalID: "re_77", By: "alice", Note: "found in the provider dashboard"})
	require.NoError(t, err)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, "re_77", op.ExternalID)
	require.Equal(t, "alice", op.ResolvedBy)
	require.Equal(t, "found in the provider dashboard", op.ResolveNote)
	require.True(t, e.clock.Now().Equal(op.ResolvedAt))
	require.True(t, e.clock.Now().Equal(op.CompletedAt))
	got, err := e.store.Get(e.ctx, "k")
	require.NoError(t, err)
	require.Equal(t, op, got)
	require.Equal(t, ledger.Replay, e.claim(req("k")).Verdict)

	// A human overrides a live lease: the executor's late result is refused.
	e.reach("live", ledger.InProgress)
	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: "live", Status: ledger.FailedFinal, By: "bob", Note: "stop it"})
	require.NoError(t, err)
	_, err = e.store.Complete(e.ctx, ledger.Completion{Key: "live", Executor: "w1", Status: ledger.Succeeded})
	require.ErrorIs(t, err, ledger.ErrLeaseLost)

	// A held call resolved as pending runs on its next claim.
	e.reach("held", "held")
	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: "held", Status: ledger.Pending, By: "carol", Note: "approved"})
	require.NoError(t, err)
	r := req("held")
	r.GuardScope, r.GuardHold = "scope-held", true
	require.Equal(t, ledger.Execute, e.claim(r).Verdict)

	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: "missing", Status: ledger.FailedFinal, By: "x"})
	require.ErrorIs(t, err, ledger.ErrNotFound)
	_, err = e.store.Resolve(e.ctx, ledger.Resolution{Key: "k", Status: ledger.FailedFinal})
	require.Error(t, err, "who decided is required")
}

func testPurge(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for _, st := range allStates {
		e.reach("old-"+string(st), st)
	}
	cutoff := e.clock.Now().Add(time.Minute)
	e.clock.Advance(2 * time.Minute)
	for _, st := range allStates {
		e.reach("new-"+string(st), st)
	}
	e.clock.Advance(365 * 24 * time.Hour)

	n, err := e.store.Purge(e.ctx, cutoff)
	require.NoError(t, err)
	require.Equal(t, 3, n, "old succeeded, failed_final and compensated")
	for _, prefix := range []string{"old-", "new-"} {
		for _, st := range allStates {
			_, err := e.store.Get(e.ctx, prefix+string(st))
			if prefix == "old-" && st.Final() {
				require.ErrorIs(t, err, ledger.ErrNotFound, "%s%s", prefix, st)
			} else {
				require.NoError(t, err, "%s%s must stay", prefix, st)
			}
		}
	}
	// Even a cutoff in the far future keeps what is not final.
	n, err = e.store.Purge(e.ctx, e.clock.Now().Add(100*365*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	var left int
	require.NoError(t, e.db().QueryRowContext(e.ctx, `SELECT COUNT(*) FROM operations`).Scan(&left))
	require.Equal(t, 2*len(allStates)-6+2, left, "every non-final row (and the held rows' holders) stays")
}

func testStatusCheck(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.reach("k", ledger.Succeeded)
	db := e.db()
	_, err := db.ExecContext(e.ctx, `UPDATE operations SET status = 'done' WHERE operation_key = 'k'`)
	require.Error(t, err, "status is checked against the state names")
	for _, st := range allStates[:len(allStates)-1] {
		_, err := db.ExecContext(e.ctx, `UPDATE operations SET status = '`+string(st)+`' WHERE operation_key = 'k'`)
		require.NoError(t, err, "state %s", st)
	}
}

func testInvalid(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for name, mutate := range map[string]func(*ledger.ClaimRequest){
		"Key":         func(r *ledger.ClaimRequest) { r.Key = "" },
		"RequestHash": func(r *ledger.ClaimRequest) { r.RequestHash = "" },
		"Executor":    func(r *ledger.ClaimRequest) { r.Executor = "" },
		"Lease":       func(r *ledger.ClaimRequest) { r.Lease = 0 },
		"ActionType":  func(r *ledger.ClaimRequest) { r.ActionType = "" },
	} {
		r := req("k")
		mutate(&r)
		_, err := e.store.Claim(e.ctx, r)
		require.Error(t, err, name)
		require.Contains(t, err.Error(), name)
	}
	_, err := e.store.Purge(e.ctx, time.Time{})
	require.Error(t, err)
	_, err = e.store.Get(e.ctx, "k")
	require.True(t, errors.Is(err, ledger.ErrNotFound), "invalid claims store nothing")
}

// Benchmark measures Claim followed by Complete on fresh keys, and the
// replay of a succeeded key, on the driver h describes.
func Benchmark(b *testing.B, h Harness) {
	ctx := context.Background()
	loc := h.New(b)
	store := h.Open(b, loc, nil)
	b.Cleanup(func() { _ = store.Close() })
	result := json.RawMessage(`{"refund_id":"re_1","amount_minor":12900}`)
	// -count reruns the sub-benchmarks on the same ledger: each run has
	// keys of its own.
	runs := 0
	b.Run("Fresh", func(b *testing.B) {
		runs++
		i := 0
		for b.Loop() {
			r := req(fmt.Sprintf("bench:%d:%d", runs, i))
			i++
			c, err := store.Claim(ctx, r)
			if err != nil || c.Verdict != ledger.Execute {
				b.Fatalf("claim of fresh key %s: verdict %q (want execute), error %v", r.Key, c.Verdict, err)
			}
			if _, err := store.Complete(ctx, ledger.Completion{Key: r.Key, Executor: r.Executor, Status: ledger.Succeeded, Result: result}); err != nil {
				b.Fatal(err)
			}
		}
	})
	// Ten claims at once on fresh keys, as ten plans in flight make them;
	// cpu-ms/op is the process's CPU per claim+complete pair (fsyncs and
	// waits for the write lock included), so contention shows.
	b.Run("FreshConcurrent10", func(b *testing.B) {
		runs++
		run := runs
		var n atomic.Int64
		b.SetParallelism(max(1, 10/runtime.GOMAXPROCS(0)))
		cpu0 := processCPU()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r := req(fmt.Sprintf("bench:%d:c%d", run, n.Add(1)))
				c, err := store.Claim(ctx, r)
				if err != nil || c.Verdict != ledger.Execute {
					b.Errorf("claim of fresh key %s: verdict %q (want execute), error %v", r.Key, c.Verdict, err)
					return
				}
				if _, err := store.Complete(ctx, ledger.Completion{Key: r.Key, Executor: r.Executor, Status: ledger.Succeeded, Result: result}); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	})
	b.Run("Replay", func(b *testing.B) {
		runs++
		r := req(fmt.Sprintf("bench:replay:%d", runs))
		if c, err := store.Claim(ctx, r); err != nil || c.Verdict != ledger.Execute {
			b.Fatalf("first claim of the replayed key: verdict %q (want execute), error %v", c.Verdict, err)
		}
		if _, err := store.Complete(ctx, ledger.Completion{Key: r.Key, Executor: r.Executor, Status: ledger.Succeeded, Result: result}); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			c, err := store.Claim(ctx, r)
			if err != nil || c.Verdict != ledger.Replay {
				b.Fatalf("claim of succeeded key %s: verdict %q (want replay), error %v", r.Key, c.Verdict, err)
			}
		}
	})
}

// testSummary: the one-line summary of a claim is stored, listed by InScope
// for other plans' cards, and never holds a card number.
func testSummary(t *testing.T, h Harness) {
	e := newEnv(t, h)
	r := req("s1:1:1:apply_refund")
	r.GuardScope = "refund-per-order:ord_1002"
	r.Summary = "apply_refund order_id ord_1002 1,500.00 EUR card 4111 1111 1111 1111"
	require.Equal(t, ledger.Execute, e.claim(r).Verdict)
	op, err := e.store.Get(e.ctx, r.Key)
	require.NoError(t, err)
	require.Contains(t, op.Summary, "apply_refund order_id ord_1002 1,500.00 EUR")
	require.NotContains(t, op.Summary, "4111 1111 1111 1111")
	ops, err := e.store.InScope(e.ctx, r.GuardScope, 5)
	require.NoError(t, err)
	require.Len(t, ops, 1)
	require.Equal(t, op.Summary, ops[0].Summary)
}

// processCPU is the process's user+system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

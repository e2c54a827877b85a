package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// ---- a fake tool that counts its calls ----

type fakeTool struct {
	spec tool.Spec

	mu        sync.Mutex
	executed  int
	looked    int
	execute   func(n int, call tool.Call) (tool.Result, error) // n counts from 1
	reconcile func(n int) (tool.Lookup, error)
}

func (f *fakeTool) Spec() tool.Spec { return f.spec }

func (f *fakeTool) Execute(_ context.Context, call tool.Call) (tool.Result, error) {
	f.mu.Lock()
	f.executed++
	n := f.executed
	f.mu.Unlock()
	if f.execute == nil {
		return tool.Result{ExternalID: fmt.Sprintf("ext-%d", n), Data: call.Args}, nil
	}
	return f.execute(n, call)
}

func (f *fakeTool) Reconcile(context.Context, string) (tool.Lookup, error) {
	f.mu.Lock()
	f.looked++
	n := f.looked
	f.mu.Unlock()
	if f.reconcile == nil {
		return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
	}
	return f.reconcile(n)
}

func (f *fakeTool) calls() (executed, looked int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.executed, f.looked
}

var amountArgs = tool.Schema{Fields: []tool.Field{
	{Name: "order_id", Type: tool.String, Required: true},
	{Name: "amount_minor", Type: tool.Money, Required: true},
}}

func writeTool(name string, class tool.Class) *fakeTool {
	return &fakeTool{spec: tool.Spec{Name: name, Class: class, Args: amountArgs, Timeout: 5 * time.Second,
		Match: []tool.MatchField{{Arg: "amount_minor", Result: "amount_minor"}}}}
}

// ---- the environment: the SDK's activity test environment, a real SQLite
// ledger in a temporary directory ----

type env struct {
	t     *testing.T
	te    *testsuite.TestActivityEnvironment
	a     *activities.Activities
	store *ledgersqlite.Store
}

func newEnv(t *testing.T, store func(ledger.Store) ledger.Store, tools ...tool.Tool) *env {
	t.Helper()
	st, err := ledgersqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ledger.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	reg, err := tool.NewRegistry(tools...)
	require.NoError(t, err)
	var l ledger.Store = st
	if store != nil {
		l = store(st)
	}
	a := &activities.Activities{Tools: reg, Ledger: l}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	te := suite.NewTestActivityEnvironment()
	te.RegisterActivity(a)
	return &env{t: t, te: te, a: a, store: st}
}

func request(t *testing.T, key, toolName, args string) activities.Request {
	t.Helper()
	fp, err := plan.Fingerprint(toolName, json.RawMessage(args))
	require.NoError(t, err)
	return activities.Request{Key: key, Tool: toolName, Args: json.RawMessage(args), Fingerprint: fp}
}

// execute runs one ExecuteTool activity. Each call is a new activity task of
// the same workflow, as a retry attempt is.
func (e *env) execute(req activities.Request) (activities.Output, error) {
	e.t.Helper()
	v, err := e.te.ExecuteActivity(e.a.ExecuteTool, req)
	if err != nil {
		return activities.Output{}, err
	}
	var out activities.Output
	require.NoError(e.t, v.Get(&out))
	return out, nil
}

// result runs activity fn with req, which must succeed, and returns its
// result.
func result[T any](e *env, fn any, req activities.Request) T {
	e.t.Helper()
	v, err := e.te.ExecuteActivity(fn, req)
	require.NoError(e.t, err)
	var out T
	require.NoError(e.t, v.Get(&out))
	return out
}

func (e *env) reconcile(req activities.Request) tool.Lookup {
	e.t.Helper()
	return result[tool.Lookup](e, e.a.ReconcileTool, req)
}

func (e *env) lookup(req activities.Request) tool.Lookup {
	e.t.Helper()
	return result[tool.Lookup](e, e.a.LookupTool, req)
}

func (e *env) checkGuard(req activities.Request) activities.GuardReport {
	e.t.Helper()
	return result[activities.GuardReport](e, e.a.CheckGuard, req)
}

func (e *env) row(key string) ledger.Operation {
	e.t.Helper()
	op, err := e.store.Get(context.Background(), key)
	require.NoError(e.t, err, "ledger row %s", key)
	return op
}

func appErr(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an ApplicationError, got %T: %v", err, err)
	return ae
}

// ---- tests ----

// A 5xx of a write may have committed: the ledger records unknown (not
// pending), and the next attempt reconciles by key before sending, finds the
// effect and does not call again.
func TestServerErrorIsReconciledBeforeTheRetry(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(n int, call tool.Call) (tool.Result, error) {
		return tool.Result{}, tool.Fail(tool.KindUnavailable, "http_503", errors.New("provider answered 503"))
	}
	ft.reconcile = func(int) (tool.Lookup, error) {
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: "pay_1", Data: json.RawMessage(`{"id":"pay_1","amount_minor":100}`)}}, nil
	}
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)

	_, err := e.execute(req)
	ae := appErr(t, err)
	require.Equal(t, string(tool.KindUnavailable), ae.Type())
	require.False(t, ae.NonRetryable(), "an idempotent write retries a 5xx")
	require.Equal(t, ledger.Unknown, e.row(req.Key).Status, "a 5xx may have committed: never pending")

	out, err := e.execute(req)
	require.NoError(t, err)
	require.True(t, out.Reconciled)
	require.Equal(t, "pay_1", out.ExternalID)
	executed, looked := ft.calls()
	require.Equal(t, 1, executed, "the retry must not call the provider again")
	require.Equal(t, 1, looked)
	op := e.row(req.Key)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, "pay_1", op.ExternalID)

	// And once succeeded, the ledger replays without calling anyone.
	out, err = e.execute(req)
	require.NoError(t, err)
	require.True(t, out.Replayed)
	executed, looked = ft.calls()
	require.Equal(t, []int{1, 1}, []int{executed, looked})
}

// A request that provably never left is pending: the next attempt sends it
// without a lookup.
func TestNotSentIsSentAgainWithoutLookup(t *testing.T) {
	ft := writeTool("pay", tool.NonIdempotentWrite)
	ft.execute = func(n int, call tool.Call) (tool.Result, error) {
		if n == 1 {
			return tool.Result{}, tool.Fail(tool.KindNotSent, "not_sent", errors.New("dial refused"))
		}
		return tool.Result{ExternalID: "pay_2"}, nil
	}
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	_, err := e.execute(req)
	require.False(t, appErr(t, err).NonRetryable())
	require.False(t, activities.IsUnknown(err))
	require.Equal(t, ledger.Pending, e.row(req.Key).Status)
	out, err := e.execute(req)
	require.NoError(t, err)
	require.Equal(t, "pay_2", out.ExternalID)
	executed, looked := ft.calls()
	require.Equal(t, []int{2, 0}, []int{executed, looked})
}

// A lookup that is not authoritative (a lagging index) settles nothing: the
// step stays unknown and nothing is sent; an authoritative absent lets the
// same key be sent again.
func TestNonAuthoritativeAbsentIsNotAbsent(t *testing.T) {
	ft := writeTool("ticket", tool.ConditionalWrite)
	ft.execute = func(n int, call tool.Call) (tool.Result, error) {
		if n == 1 {
			return tool.Result{}, context.DeadlineExceeded // the request left, no answer
		}
		return tool.Result{ExternalID: "tkt_1", Data: json.RawMessage(`{"amount_minor":100}`)}, nil
	}
	ft.reconcile = func(n int) (tool.Lookup, error) {
		return tool.Lookup{Status: tool.Absent, Authoritative: n > 1}, nil
	}
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:2:ticket", "ticket", `{"order_id":"o-1","amount_minor":100}`)

	_, err := e.execute(req)
	require.True(t, activities.IsUnknown(err))
	require.Equal(t, ledger.Unknown, e.row(req.Key).Status)

	_, err = e.execute(req)
	ae := appErr(t, err)
	require.Equal(t, activities.ErrUnknown, ae.Type(), "a lagging absent is not an answer")
	require.True(t, ae.NonRetryable())
	executed, looked := ft.calls()
	require.Equal(t, []int{1, 1}, []int{executed, looked}, "nothing sent on a non-authoritative absent")
	require.Equal(t, ledger.Unknown, e.row(req.Key).Status)

	// ReconcileTool agrees: a non-authoritative absent keeps it unknown.
	ft.reconcile = func(int) (tool.Lookup, error) { return tool.Lookup{Status: tool.Absent}, nil }
	l := e.reconcile(req)
	require.Equal(t, tool.Absent, l.Status)
	require.False(t, l.Authoritative)
	require.Equal(t, ledger.Unknown, e.row(req.Key).Status)

	ft.reconcile = func(int) (tool.Lookup, error) { return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil }
	out, err := e.execute(req)
	require.NoError(t, err)
	require.Equal(t, "tkt_1", out.ExternalID)
	executed, _ = ft.calls()
	require.Equal(t, 2, executed)
}

// A timeout of a write is UNKNOWN, never an ordinary failure: not retried
// blindly, and IsUnknown says so. A read's timeout is retried.
func TestTimeoutOfAWriteIsUnknown(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, errors.New("connection reset"),
		tool.Fail(tool.KindUnknown, "no_response", context.DeadlineExceeded)} {
		for _, c := range []tool.Class{tool.IdempotentWrite, tool.ConditionalWrite, tool.NonIdempotentWrite} {
			got := activities.Classify(c, 1, err)
			ae := appErr(t, got)
			require.Equal(t, activities.ErrUnknown, ae.Type(), "%s %v", c, err)
			require.True(t, ae.NonRetryable(), "%s %v: an unknown write is reconciled, never resent blindly", c, err)
			require.True(t, activities.IsUnknown(got))
		}
		require.False(t, appErr(t, activities.Classify(tool.Read, 1, err)).NonRetryable(), "a read's timeout is retried")
	}
	for _, final := range []string{activities.ErrRejected, activities.ErrConflict, activities.ErrNoPermit, activities.ErrHeld,
		activities.ErrGuardRefused, activities.ErrRecordRefused} {
		require.False(t, activities.IsUnknown(temporal.NewNonRetryableApplicationError("x", final, nil)), final)
	}
	require.True(t, activities.IsUnknown(temporal.NewTimeoutError(0, nil)))

	// Through the activity: the ledger keeps it unknown.
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(int, tool.Call) (tool.Result, error) { return tool.Result{}, context.DeadlineExceeded }
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	_, err := e.execute(req)
	require.Equal(t, activities.ErrUnknown, appErr(t, err).Type())
	require.Equal(t, ledger.Unknown, e.row(req.Key).Status)
}

// Retry-After from the provider becomes the next retry's delay for a
// retryable kind, and rides in Detail for the workflow.
func TestRetryAfterBecomesTheNextRetryDelay(t *testing.T) {
	busy := tool.Fail(tool.KindUnavailable, "http_503", errors.New("down"))
	busy.(*tool.Error).RetryAfter = 30 * time.Second
	ae := appErr(t, activities.Classify(tool.IdempotentWrite, 2, busy))
	require.False(t, ae.NonRetryable())
	require.Equal(t, 30*time.Second, ae.NextRetryDelay())
	require.Equal(t, activities.Detail{Code: "http_503", Attempt: 2, RetryAfter: 30 * time.Second}, activities.DetailOf(ae))

	ae = appErr(t, activities.Classify(tool.NonIdempotentWrite, 1, busy))
	require.True(t, ae.NonRetryable())
	require.Zero(t, ae.NextRetryDelay(), "no retry, no delay")

	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(int, tool.Call) (tool.Result, error) { return tool.Result{}, busy }
	e := newEnv(t, nil, ft)
	_, err := e.execute(request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`))
	require.Equal(t, 30*time.Second, activities.DetailOf(err).RetryAfter)
}

func guarded(name string, hold bool) *fakeTool {
	ft := writeTool(name, tool.NonIdempotentWrite)
	ft.spec.Guard = &tool.Guard{Scope: "refund-per-order", Fields: []string{"order_id"}, Hold: hold}
	return ft
}

// The guard's entity is normalised: "o-16 " and "O-16" are one order, so a
// second refund is refused (or held) and never sent. CheckGuard names the
// holder.
func TestGuardScopeIsNormalised(t *testing.T) {
	ft := guarded("refund", false)
	e := newEnv(t, nil, ft, writeTool("pay", tool.IdempotentWrite))
	first := request(t, "a:1:1:refund", "refund", `{"order_id":"o-16 ","amount_minor":100}`)
	_, err := e.execute(first)
	require.NoError(t, err)
	require.Equal(t, `refund-per-order:["o-16"]`, e.row(first.Key).GuardScope)

	second := request(t, "b:1:1:refund", "refund", `{"order_id":"O-16","amount_minor":100}`)
	rep := e.checkGuard(second)
	require.Equal(t, `refund-per-order:["o-16"]`, rep.Scope)
	require.Contains(t, rep.Clash, first.Key)
	require.Contains(t, rep.Clash, "succeeded")
	require.Len(t, rep.Others, 1)
	require.Equal(t, first.Key, rep.Others[0].Key)
	own := e.checkGuard(first)
	require.Empty(t, own.Clash, "its own row is no clash")
	require.Empty(t, own.Others)
	require.Equal(t, activities.GuardReport{}, e.checkGuard(request(t, "c:1:1:pay", "pay", `{"order_id":"o-16","amount_minor":1}`)), "no guard, empty report")

	_, err = e.execute(second)
	require.Equal(t, activities.ErrGuardRefused, appErr(t, err).Type())
	require.False(t, activities.IsUnknown(err))
	executed, _ := ft.calls()
	require.Equal(t, 1, executed, "the second refund of the same order was sent")
}

// A held call is not run: the ledger stores it for a human.
func TestHeldCallIsNotRun(t *testing.T) {
	ft := guarded("refund", true)
	e := newEnv(t, nil, ft)
	_, err := e.execute(request(t, "a:1:1:refund", "refund", `{"order_id":"o-16","amount_minor":100}`))
	require.NoError(t, err)
	held := request(t, "b:1:1:refund", "refund", `{"order_id":" o-16","amount_minor":100}`)
	_, err = e.execute(held)
	ae := appErr(t, err)
	require.Equal(t, activities.ErrHeld, ae.Type())
	require.True(t, ae.NonRetryable())
	executed, _ := ft.calls()
	require.Equal(t, 1, executed, "a held call was sent")
	op := e.row(held.Key)
	require.Equal(t, ledger.NeedsHuman, op.Status)
	require.NotEmpty(t, op.HoldReason)
}

// A call that needs approval never runs without a permit, and the ledger's
// permit check is honoured.
func TestApprovalNeedsAPermit(t *testing.T) {
	ft := writeTool("refund", tool.NonIdempotentWrite)
	ft.spec.Approval = &tool.Approval{Field: "amount_minor", AboveMinor: 500}
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:1:refund", "refund", `{"order_id":"o-1","amount_minor":900}`)

	_, err := e.execute(req)
	ae := appErr(t, err)
	require.Equal(t, activities.ErrNoPermit, ae.Type())
	require.True(t, ae.NonRetryable())
	require.False(t, activities.IsUnknown(err))
	_, gerr := e.store.Get(context.Background(), req.Key)
	require.ErrorIs(t, gerr, ledger.ErrNotFound, "refused before any claim")

	req.PermitID = "q-nobody-granted"
	_, err = e.execute(req)
	require.Equal(t, activities.ErrNoPermit, appErr(t, err).Type(), "the ledger's NoPermit verdict")

	_, err = e.te.ExecuteActivity(e.a.GrantPermit, ledger.Permit{ID: "q-1", Key: req.Key, RequestHash: req.Fingerprint, Policy: "amount_minor > 500", By: "ana"})
	require.NoError(t, err)
	req.PermitID = "q-1"
	out, err := e.execute(req)
	require.NoError(t, err)
	require.Equal(t, "ext-1", out.ExternalID)
	executed, _ := ft.calls()
	require.Equal(t, 1, executed)

	_, err = e.te.ExecuteActivity(e.a.GrantPermit, ledger.Permit{ID: "q-2"})
	require.Equal(t, activities.ErrRecordRefused, appErr(t, err).Type())

	// Under the threshold no permit is needed.
	_, err = e.execute(request(t, "s:1:2:refund", "refund", `{"order_id":"o-2","amount_minor":400}`))
	require.NoError(t, err)
}

// failingLedger fails Complete a number of times, as PostgreSQL refusing a
// NUL byte in a result would.
type failingLedger struct {
	ledger.Store
	mu       sync.Mutex
	failures int
	seen     []ledger.Completion
}

func (f *failingLedger) Complete(ctx context.Context, c ledger.Completion) (ledger.Operation, error) {
	f.mu.Lock()
	f.seen = append(f.seen, c)
	fail := f.failures > 0
	if fail {
		f.failures--
	}
	f.mu.Unlock()
	if fail {
		return ledger.Operation{}, errors.New("invalid byte sequence for encoding UTF8: 0x00")
	}
	return f.Store.Complete(ctx, c)
}

// The provider committed but the ledger refused the completion: one retry
// without the result records it.
func TestCompletionRetriedWithoutTheResult(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(int, tool.Call) (tool.Result, error) {
		return tool.Result{ExternalID: "pay_9", Data: json.RawMessage(`{"amount_minor":100,"note":"a\u0000b"}`)}, nil
	}
	fl := &failingLedger{failures: 1}
	e := newEnv(t, func(s ledger.Store) ledger.Store { fl.Store = s; return fl }, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	out, err := e.execute(req)
	require.NoError(t, err)
	require.Equal(t, "pay_9", out.ExternalID)
	require.JSONEq(t, `{"amount_minor":100,"note":"a\u0000b"}`, string(out.Result), "the workflow still gets the result")
	require.Len(t, fl.seen, 2)
	require.Empty(t, fl.seen[1].Result, "the second completion is minimal")
	require.Empty(t, fl.seen[1].ErrorCode)
	op := e.row(req.Key)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, "pay_9", op.ExternalID)
}

// If the minimal completion fails too, the error names the cause and the
// external id at once and is UNKNOWN (the workflow reconciles by key once the
// attempt's lease expires); the row stays in_progress under that lease, so a
// zombie attempt never shares it with a retry.
func TestCompletionFailureIsUnknownWithItsCause(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(int, tool.Call) (tool.Result, error) {
		return tool.Result{ExternalID: "pay_9", Data: json.RawMessage(`{"amount_minor":100}`)}, nil
	}
	ft.reconcile = func(int) (tool.Lookup, error) {
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: "pay_9", Data: json.RawMessage(`{"amount_minor":100}`)}}, nil
	}
	fl := &failingLedger{failures: 2}
	e := newEnv(t, func(s ledger.Store) ledger.Store { fl.Store = s; return fl }, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)

	_, err := e.execute(req)
	ae := appErr(t, err)
	require.Equal(t, activities.ErrUnknown, ae.Type(), "the cause reaches the workflow at once, as UNKNOWN")
	require.True(t, ae.NonRetryable(), "no blind retry: the workflow reconciles")
	require.True(t, activities.IsUnknown(err))
	require.Contains(t, ae.Error(), "pay_9")
	require.Contains(t, ae.Error(), "0x00")
	op := e.row(req.Key)
	require.Equal(t, ledger.InProgress, op.Status)
	require.True(t, op.LeaseUntil.After(time.Now()), "the lease is still live")
	executed, _ := ft.calls()
	require.Equal(t, 1, executed)
}

// RecordOutcome: a human's decision is a Resolve; the saga's own change is a
// Transition that keeps who resolved; permanent refusals are not retried.
func TestRecordOutcome(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.execute = func(int, tool.Call) (tool.Result, error) { return tool.Result{}, context.DeadlineExceeded }
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	_, err := e.execute(req)
	require.Error(t, err)

	_, err = e.te.ExecuteActivity(e.a.RecordOutcome, activities.Record{Key: req.Key, Status: ledger.Succeeded, ExternalID: "pay_5", By: "ana", Note: "seen in the acquirer's portal"})
	require.NoError(t, err)
	op := e.row(req.Key)
	require.Equal(t, ledger.Succeeded, op.Status)
	require.Equal(t, "ana", op.ResolvedBy)

	_, err = e.te.ExecuteActivity(e.a.RecordOutcome, activities.Record{Key: req.Key, Status: ledger.Compensated, Machine: true, From: []ledger.Status{ledger.Unknown}})
	ae := appErr(t, err)
	require.Equal(t, activities.ErrRecordRefused, ae.Type())
	require.True(t, ae.NonRetryable(), "a row in another state is permanent: do not wedge the workflow")

	_, err = e.te.ExecuteActivity(e.a.RecordOutcome, activities.Record{Key: req.Key, Status: ledger.Compensated, Machine: true, From: []ledger.Status{ledger.Succeeded, ledger.Compensating}})
	require.NoError(t, err)
	op = e.row(req.Key)
	require.Equal(t, ledger.Compensated, op.Status)
	require.Equal(t, "ana", op.ResolvedBy, "a machine transition keeps the human's name")

	_, err = e.te.ExecuteActivity(e.a.RecordOutcome, activities.Record{Key: req.Key, Status: "done"})
	require.True(t, appErr(t, err).NonRetryable())
	_, err = e.te.ExecuteActivity(e.a.RecordOutcome, activities.Record{Key: "never:1:1:x", Status: ledger.Succeeded, Machine: true})
	require.NoError(t, err, "a key the ledger never saw (a read) is skipped")

	v, err := e.te.ExecuteActivity(e.a.RecordDecision, ledger.DecisionRecord{QuestionID: "q-1", Key: req.Key, Kind: "resolve", By: "ana", Outcome: "succeeded"})
	require.NoError(t, err)
	var id int64
	require.NoError(t, v.Get(&id))
	require.Positive(t, id)
}

// The sandbox payments provider holds a payment made under the key with
// another amount (the key was reused after a ledger purge). Nothing adopts
// it: not ExecuteTool's reconcile, not ReconcileTool after the provider's
// 422, not LookupTool.
func TestKeyReusedWithAnotherAmountIsNeverAdopted(t *testing.T) {
	sb, err := sandbox.Start(context.Background(), sandbox.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Close() })
	reg, err := demotools.Registry(demotools.SandboxConfig(sb.BaseURL()))
	require.NoError(t, err)
	var tools []tool.Tool
	for _, name := range reg.Names() {
		tl, _ := reg.Tool(name)
		tools = append(tools, tl)
	}
	e := newEnv(t, nil, tools...)
	ctx := context.Background()
	pay, _ := reg.Tool(demotools.CreatePayment)
	const older = `{"customer_id":"cus_ana","amount_minor":12900,"currency":"EUR","payment_method":"tok_visa"}`
	const mine = `{"customer_id":"cus_ana","amount_minor":15000,"currency":"EUR","payment_method":"tok_visa"}`

	payments := func() []sandbox.Effect {
		ef, err := sb.Client().Effects(ctx, sandbox.Payments)
		require.NoError(t, err)
		return ef
	}

	t.Run("provider 422, then the failed step's reconcile", func(t *testing.T) {
		key := "purged:1:1:create_payment"
		_, err := pay.Execute(ctx, tool.Call{Key: key, Args: json.RawMessage(older), Attempt: 1})
		require.NoError(t, err)
		req := request(t, key, demotools.CreatePayment, mine)
		_, err = e.execute(req)
		ae := appErr(t, err)
		require.Equal(t, activities.ErrConflict, ae.Type())
		require.Equal(t, ledger.FailedFinal, e.row(key).Status)

		l := e.reconcile(req)
		require.Equal(t, tool.Mismatch, l.Status, "the older payment is not this step's")
		require.Len(t, l.Differences, 1)
		require.Contains(t, l.Differences[0], "amount_minor")
		op := e.row(key)
		require.Equal(t, ledger.NeedsHuman, op.Status)
		require.Equal(t, activities.CodeReconcileMismatch, op.ErrorCode)

		lk := e.lookup(req)
		require.Equal(t, tool.Mismatch, lk.Status)
		require.NotEmpty(t, lk.Result.ExternalID)
		// The lookup of the right arguments finds it.
		require.Equal(t, tool.Found, e.lookup(request(t, key, demotools.CreatePayment, older)).Status)
	})

	t.Run("reconcile before retry", func(t *testing.T) {
		key := "purged:1:2:create_payment"
		_, err := pay.Execute(ctx, tool.Call{Key: key, Args: json.RawMessage(older), Attempt: 1})
		require.NoError(t, err)
		req := request(t, key, demotools.CreatePayment, mine)
		// An earlier attempt of this step left it unknown.
		spec := pay.Spec()
		c, err := e.store.Claim(ctx, ledger.ClaimRequest{Key: key, ActionType: spec.Name, RequestHash: req.Fingerprint, Executor: "earlier", Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, ledger.Execute, c.Verdict)
		_, err = e.store.Complete(ctx, ledger.Completion{Key: key, Executor: "earlier", Status: ledger.Unknown})
		require.NoError(t, err)
		before := len(payments())

		_, err = e.execute(req)
		ae := appErr(t, err)
		require.Equal(t, activities.ErrConflict, ae.Type())
		require.True(t, ae.NonRetryable())
		require.Contains(t, ae.Error(), "amount_minor")
		require.Contains(t, ae.Error(), "15000")
		op := e.row(key)
		require.Equal(t, ledger.NeedsHuman, op.Status)
		require.Equal(t, activities.CodeReconcileMismatch, op.ErrorCode)
		require.Len(t, payments(), before, "nothing was sent")
	})
}

// LookupTool is read-only: it never claims, never writes the ledger.
func TestLookupToolIsReadOnly(t *testing.T) {
	ft := writeTool("pay", tool.IdempotentWrite)
	ft.reconcile = func(int) (tool.Lookup, error) {
		return tool.Lookup{Status: tool.Found, Authoritative: true, Result: tool.Result{ExternalID: "pay_1", Data: json.RawMessage(`{"amount_minor":100}`)}}, nil
	}
	e := newEnv(t, nil, ft)
	req := request(t, "s:1:1:pay", "pay", `{"order_id":"o-1","amount_minor":100}`)
	l := e.lookup(req)
	require.Equal(t, tool.Found, l.Status)
	require.Equal(t, "pay_1", l.Result.ExternalID)
	_, err := e.store.Get(context.Background(), req.Key)
	require.ErrorIs(t, err, ledger.ErrNotFound)
	ft.reconcile = func(int) (tool.Lookup, error) { return tool.Lookup{}, errors.New("lookup down") }
	require.Equal(t, tool.Unknown, e.lookup(req).Status)
	executed, _ := ft.calls()
	require.Zero(t, executed)
	_, err = e.te.ExecuteActivity(e.a.LookupTool, request(t, "k", "nope", `{}`))
	require.Equal(t, activities.ErrNotRegistered, appErr(t, err).Type())
	require.True(t, strings.Contains(err.Error(), "not registered"))
}

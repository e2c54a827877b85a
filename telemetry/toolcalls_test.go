package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger/ledgersqlite"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// fakeTool answers each key as told; it counts nothing.
type fakeTool struct {
	spec   tool.Spec
	answer func(key string) (tool.Result, error)
}

func (f *fakeTool) Spec() tool.Spec { return f.spec }
func (f *fakeTool) Execute(_ context.Context, c tool.Call) (tool.Result, error) {
	if f.answer == nil {
		return tool.Result{ExternalID: "ext-" + c.Key}, nil
	}
	return f.answer(c.Key)
}
func (f *fakeTool) Reconcile(context.Context, string) (tool.Lookup, error) {
	return tool.Lookup{Status: tool.Absent, Authoritative: true}, nil
}

// secretArg and secretAmount are argument values that must never reach a span.
const (
	secretArg    = "SECRET-ARG-VALUE"
	secretAmount = 424242
)

type toolEnv struct {
	t     *testing.T
	tel   *Telemetry
	te    *testsuite.TestActivityEnvironment
	acts  *activities.Activities
	spans *tracetest.InMemoryExporter
}

func newToolEnv(t *testing.T) *toolEnv {
	t.Helper()
	pay := &fakeTool{spec: tool.Spec{Name: "pay", Class: tool.IdempotentWrite, Timeout: 5 * time.Second}, answer: func(key string) (tool.Result, error) {
		switch {
		case strings.HasSuffix(key, ":rejected"):
			return tool.Result{}, tool.Fail(tool.KindRejected, "card_declined", errors.New("declined"))
		case strings.HasSuffix(key, ":leaky"):
			// A provider's message that names what the call was about.
			return tool.Result{}, tool.Fail(tool.KindRejected, "declined", errors.New("refund of "+secretArg+" declined"))
		case strings.HasSuffix(key, ":lost"):
			return tool.Result{}, errors.New("connection reset after the request was sent")
		}
		return tool.Result{ExternalID: "pay-" + key}, nil
	}}
	lookup := &fakeTool{spec: tool.Spec{Name: "lookup", Class: tool.Read, Timeout: time.Second}}
	reg, err := tool.NewRegistry(pay, lookup)
	require.NoError(t, err)
	store, err := ledgersqlite.Open(context.Background(), ledgersqlite.Memory)
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tel, err := New(context.Background(), Options{Tools: reg, Ledger: store, TracerProvider: tp})
	require.NoError(t, err)
	require.True(t, tel.Tracing)

	acts := &activities.Activities{Tools: reg, Ledger: store}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	te := suite.NewTestActivityEnvironment()
	// The SDK's tracing interceptor first (as the client puts it), ours
	// inside it.
	te.SetWorkerOptions(worker.Options{Interceptors: append([]interceptor.WorkerInterceptor{tel.sdkTracing}, tel.WorkerInterceptors()...)})
	te.RegisterActivity(acts)
	return &toolEnv{t: t, tel: tel, te: te, acts: acts, spans: spans}
}

func (e *toolEnv) request(key, toolName string) activities.Request {
	args := json.RawMessage(fmt.Sprintf(`{"to":%q,"amount_minor":%d}`, secretArg, secretAmount))
	fp, err := plan.Fingerprint(toolName, args)
	require.NoError(e.t, err)
	return activities.Request{Key: key, Tool: toolName, Args: args, Fingerprint: fp, Summary: "pay " + key}
}

func (e *toolEnv) execute(req activities.Request) error {
	_, err := e.te.ExecuteActivity(activities.ExecuteToolName, req)
	return err
}

// counter returns the value of name with labels, 0 when absent.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, reg, name, labels)
	switch {
	case m == nil:
		return 0
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func find(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// TestToolCallSpansAndMetrics: one execute_tool span per tool call, with the
// GenAI attributes and no argument values, a child of the SDK's activity
// span; and the call counted by tool, class and outcome.
func TestToolCallSpansAndMetrics(t *testing.T) {
	e := newToolEnv(t)
	calls := []struct {
		req     activities.Request
		outcome string
		class   string
		tool    string
	}{
		{e.request("s:1:1:pay", "pay"), OutcomeFirstAttempt, "IDEMPOTENT_WRITE", "pay"},
		{e.request("s:1:1:pay", "pay"), OutcomeReplayed, "IDEMPOTENT_WRITE", "pay"},
		{e.request("s:1:2:pay:rejected", "pay"), OutcomeRejected, "IDEMPOTENT_WRITE", "pay"},
		{e.request("s:1:3:pay:lost", "pay"), OutcomeUnknown, "IDEMPOTENT_WRITE", "pay"},
		{e.request("s:1:4:lookup", "lookup"), OutcomeFirstAttempt, "READ", "lookup"},
		{e.request("s:1:5:teleport", "teleport"), OutcomeFailed, "", unregistered},
	}
	for _, c := range calls {
		err := e.execute(c.req)
		if strings.HasPrefix(c.outcome, "first") || c.outcome == OutcomeReplayed {
			require.NoError(t, err, c.req.Key)
		} else {
			require.Error(t, err, c.req.Key)
		}
	}

	var tools []string
	byID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range e.spans.GetSpans().Snapshots() {
		byID[s.SpanContext().SpanID().String()] = s
	}
	n := 0
	for _, s := range e.spans.GetSpans().Snapshots() {
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			v := a.Value.String()
			require.NotContains(t, v, secretArg, "span %s attribute %s carries an argument value", s.Name(), a.Key)
			require.NotContains(t, v, fmt.Sprint(secretAmount), "span %s attribute %s carries an argument value", s.Name(), a.Key)
			attrs[string(a.Key)] = v
		}
		for _, ev := range s.Events() {
			for _, a := range ev.Attributes {
				require.NotContains(t, a.Value.String(), secretArg)
			}
		}
		if attrs[AttrOperationName] != OperationExecuteTool {
			continue
		}
		c := calls[n]
		n++
		require.Equal(t, "execute_tool "+c.tool, s.Name())
		require.Equal(t, c.tool, attrs[AttrToolName])
		require.Equal(t, c.req.Key, attrs[AttrToolCallID], "gen_ai.tool.call.id is the operation key")
		require.Equal(t, c.class, attrs[AttrClass])
		require.Equal(t, c.outcome, attrs[AttrOutcome])
		require.Equal(t, "1", attrs[AttrAttempt])
		parent, ok := byID[s.Parent().SpanID().String()]
		require.True(t, ok, "the execute_tool span has the SDK's activity span as parent")
		require.Equal(t, "RunActivity:ExecuteTool", parent.Name())
		tools = append(tools, c.tool)
	}
	require.Equal(t, len(calls), n, "one execute_tool span per tool call: %v", tools)

	reg := e.tel.Registry
	for outcome, want := range map[string]float64{OutcomeFirstAttempt: 1, OutcomeReplayed: 1, OutcomeRejected: 1, OutcomeUnknown: 1} {
		require.Equal(t, want, counter(t, reg, MetricToolCalls, map[string]string{"tool": "pay", "class": "IDEMPOTENT_WRITE", "outcome": outcome}), outcome)
	}
	require.Equal(t, 1.0, counter(t, reg, MetricToolCalls, map[string]string{"tool": "lookup", "class": "READ", "outcome": OutcomeFirstAttempt}))
	require.Equal(t, 1.0, counter(t, reg, MetricToolCalls, map[string]string{"tool": unregistered, "outcome": OutcomeFailed}))
	require.Equal(t, 4.0, counter(t, reg, MetricToolCallSeconds, map[string]string{"tool": "pay"}), "one duration per attempt")

	// A reconcile is counted by its result, with no span of its own.
	_, err := e.te.ExecuteActivity(activities.ReconcileToolName, e.request("s:1:3:pay:lost", "pay"))
	require.NoError(t, err)
	require.Equal(t, 1.0, counter(t, reg, MetricReconciles, map[string]string{"tool": "pay", "result": "absent"}))

	// The ledger gauges read the exception queue at scrape: the lost
	// payment was unknown, then reconciled absent (pending, not listed).
	require.Equal(t, 1.0, counter(t, reg, MetricLedgerUp, nil))
	require.Equal(t, 0.0, counter(t, reg, MetricExceptions, map[string]string{"kind": "unknown"}))
	require.NotNil(t, find(t, reg, MetricExceptions, map[string]string{"kind": "stuck"}), "every kind is reported, empty ones as 0")
}

// TestOutcomeOfEveryErrorType: each ApplicationError type of activities
// maps to its own outcome label; anything else is failed.
func TestOutcomeOfEveryErrorType(t *testing.T) {
	appErr := func(typ string) error {
		return fmt.Errorf("activity error: %w", temporal.NewApplicationError("x", typ))
	}
	for typ, want := range map[string]string{
		activities.ErrUnknown: OutcomeUnknown, activities.ErrRejected: OutcomeRejected, activities.ErrConflict: OutcomeConflict,
		activities.ErrGuardRefused: OutcomeGuardRefused, activities.ErrHeld: OutcomeHeld, activities.ErrClashUnseen: OutcomeHeld, activities.ErrAlreadyFinal: OutcomeAlreadyFinal,
		activities.ErrNoPermit: OutcomeNoPermit, string(tool.KindNotSent): OutcomeNotSent, string(tool.KindThrottled): OutcomeNotSent,
		string(tool.KindInFlight): OutcomeInFlight, activities.ErrLedger: OutcomeFailed, activities.ErrNotRegistered: OutcomeFailed,
	} {
		require.Equal(t, want, Outcome(nil, appErr(typ), 1), typ)
	}
	require.Equal(t, OutcomeFailed, Outcome(nil, errors.New("boom"), 1))
	require.Equal(t, OutcomeRetried, Outcome(activities.Output{Attempt: 2}, nil, 2))
	require.Equal(t, OutcomeReconciled, Outcome(activities.Output{Reconciled: true, Attempt: 2}, nil, 2))
	require.Equal(t, OutcomeFirstAttempt, Outcome(activities.Output{Attempt: 1}, nil, 1))
	for _, o := range []string{OutcomeFirstAttempt, OutcomeRetried, OutcomeReplayed, OutcomeReconciled, OutcomeUnknown, OutcomeRejected,
		OutcomeConflict, OutcomeGuardRefused, OutcomeHeld, OutcomeNotSent, OutcomeFailed} {
		require.Contains(t, Outcomes, o)
	}
}

// TestErrorSpansCarryNoArgumentValue: a failed call whose error text names an
// argument value leaves that value in no span the exporter sees (attributes,
// events, status), the SDK's activity span included; the spans still say
// that it failed and of which type.
func TestErrorSpansCarryNoArgumentValue(t *testing.T) {
	e := newToolEnv(t)
	err := e.execute(e.request("s:1:1:pay:leaky", "pay"))
	require.Error(t, err)
	require.Contains(t, err.Error(), secretArg, "the test's provider names the value in its error")
	spans := e.spans.GetSpans()
	require.NotEmpty(t, spans)
	failed := 0
	for _, s := range spans {
		require.NotContains(t, s.Status.Description, secretArg, "span %s status", s.Name)
		if s.Status.Code == codes.Error {
			failed++
			require.NotEmpty(t, s.Status.Description, "span %s says which type failed", s.Name)
		}
		for _, a := range s.Attributes {
			require.NotContains(t, a.Value.String(), secretArg, "span %s attribute %s", s.Name, a.Key)
		}
		for _, ev := range s.Events {
			require.NotContains(t, ev.Name, secretArg)
			for _, a := range ev.Attributes {
				require.NotContains(t, a.Value.String(), secretArg, "span %s event %s attribute %s", s.Name, ev.Name, a.Key)
			}
		}
	}
	require.Positive(t, failed, "the failed call shows as an error span")
}

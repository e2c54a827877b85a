package telemetry

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/tool"
)

// The product's metric names recorded by the tool-call interceptor.
const (
	// MetricToolCalls counts ExecuteTool attempts by tool, class and
	// outcome (one of Outcomes).
	MetricToolCalls = "agentsaga_tool_calls_total"
	// MetricToolCallSeconds is the duration of one ExecuteTool attempt.
	MetricToolCallSeconds = "agentsaga_tool_call_seconds"
	// MetricReconciles counts ReconcileTool lookups by tool, class and
	// result: found, absent (authoritative), mismatch, unknown, failed.
	MetricReconciles = "agentsaga_reconciles_total"
)

// Outcomes of one ExecuteTool attempt, the values of the outcome label.
const (
	OutcomeFirstAttempt = "first_attempt_success" // succeeded on attempt 1
	OutcomeRetried      = "retried_success"       // succeeded on a later attempt
	OutcomeReplayed     = "replayed"              // the ledger held the success; nothing called
	OutcomeReconciled   = "reconciled_found"      // an earlier attempt's effect was found by key
	OutcomeUnknown      = "unknown"               // may have reached the provider; the workflow reconciles
	OutcomeRejected     = "rejected"              // the provider refused for good
	OutcomeConflict     = "conflict"              // the key was used with other arguments
	OutcomeGuardRefused = "guard_refused"         // another active effect holds the guard scope
	OutcomeHeld         = "held"                  // a guard or the duplicate check holds it for a person
	OutcomeNotSent      = "not_sent"              // provably never processed (not sent, throttled)
	OutcomeInFlight     = "in_flight"             // another executor holds the lease; retried
	OutcomeAlreadyFinal = "already_final"         // the ledger holds a final or human-owned state
	OutcomeNoPermit     = "no_permit"             // needs an approval permit it lacks
	OutcomeFailed       = "failed"                // anything else (ledger down, unregistered tool, ...)
)

// Outcomes lists every value of the outcome label.
var Outcomes = []string{OutcomeFirstAttempt, OutcomeRetried, OutcomeReplayed, OutcomeReconciled, OutcomeUnknown,
	OutcomeRejected, OutcomeConflict, OutcomeGuardRefused, OutcomeHeld, OutcomeNotSent, OutcomeInFlight,
	OutcomeAlreadyFinal, OutcomeNoPermit, OutcomeFailed}

// unregistered is the tool label of a call naming no registered tool, so the
// label stays bounded whatever a request names.
const unregistered = "unregistered"

// Span attributes of a tool call (OpenTelemetry GenAI conventions, plus the
// product's own). No argument value is ever put on a span.
const (
	AttrOperationName = "gen_ai.operation.name" // always "execute_tool"
	AttrToolName      = "gen_ai.tool.name"
	AttrToolCallID    = "gen_ai.tool.call.id" // the operation key
	AttrToolType      = "gen_ai.tool.type"    // "extension": the agent's side calls a provider's API
	AttrClass         = "agentsaga.class"
	AttrOutcome       = "agentsaga.outcome"
	AttrAttempt       = "agentsaga.attempt"
	AttrErrorType     = "error.type"
	// OperationExecuteTool is the gen_ai.operation.name of a tool call.
	OperationExecuteTool = "execute_tool"
)

// ToolCalls records every tool call: metrics by tool, class and outcome, and
// one span per ExecuteTool attempt. Add Interceptor() to the worker's
// interceptors after the SDK's tracing interceptor, so the span is a child of
// the activity's.
type ToolCalls struct {
	tools     tool.Catalog
	tracer    trace.Tracer
	calls     *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	reconcile *prometheus.CounterVec
}

// NewToolCalls registers the tool-call metrics on reg and returns the
// recorder. tools names each tool's class (a call of a tool it does not know
// is labelled tool="unregistered"); tracer starts the spans (nil: none).
func NewToolCalls(reg prometheus.Registerer, tools tool.Catalog, tracer trace.Tracer) (*ToolCalls, error) {
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	tc := &ToolCalls{
		tools:  tools,
		tracer: tracer,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricToolCalls,
			Help: "ExecuteTool attempts by tool, side-effect class and outcome."}, []string{"tool", "class", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricToolCallSeconds,
			Help: "Duration of one ExecuteTool attempt, in seconds.", Buckets: SecondsBuckets}, []string{"tool", "class"}),
		reconcile: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReconciles,
			Help: "ReconcileTool lookups by tool, side-effect class and result (found, absent, mismatch, unknown, failed)."},
			[]string{"tool", "class", "result"}),
	}
	for _, c := range []prometheus.Collector{tc.calls, tc.seconds, tc.reconcile} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the tool-call metrics: %w (use one ToolCalls per registry)", err)
		}
	}
	return tc, nil
}

// Interceptor returns the worker interceptor that records the calls.
func (tc *ToolCalls) Interceptor() interceptor.WorkerInterceptor { return &workerInterceptor{tc: tc} }

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	tc *ToolCalls
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityInterceptor{tc: w.tc}
	a.Next = next
	return a
}

type activityInterceptor struct {
	interceptor.ActivityInboundInterceptorBase
	tc *ToolCalls
}

func (a *activityInterceptor) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	info := activity.GetInfo(ctx)
	var req activities.Request
	if len(in.Args) > 0 {
		req, _ = in.Args[0].(activities.Request)
	}
	switch info.ActivityType.Name {
	case activities.ExecuteToolName:
		return a.tc.execute(ctx, info, req, func(ctx context.Context) (any, error) { return a.Next.ExecuteActivity(ctx, in) })
	case activities.ReconcileToolName:
		out, err := a.Next.ExecuteActivity(ctx, in)
		name, class := a.tc.labels(req.Tool)
		a.tc.reconcile.WithLabelValues(name, class, reconcileResult(out, err)).Inc()
		return out, err
	}
	return a.Next.ExecuteActivity(ctx, in)
}

// labels are the bounded tool and class labels of a tool name.
func (tc *ToolCalls) labels(name string) (string, string) {
	if tc.tools != nil {
		if spec, ok := tc.tools.Spec(name); ok {
			return spec.Name, string(spec.Class)
		}
	}
	return unregistered, ""
}

func (tc *ToolCalls) execute(ctx context.Context, info activity.Info, req activities.Request, next func(context.Context) (any, error)) (any, error) {
	name, class := tc.labels(req.Tool)
	spanName := OperationExecuteTool + " " + name
	ctx, span := tc.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String(AttrOperationName, OperationExecuteTool),
		attribute.String(AttrToolName, name),
		attribute.String(AttrToolCallID, req.Key),
		attribute.String(AttrToolType, "extension"),
		attribute.String(AttrClass, class),
		attribute.Int(AttrAttempt, int(info.Attempt)),
	))
	start := time.Now()
	out, err := next(ctx)
	tc.seconds.WithLabelValues(name, class).Observe(time.Since(start).Seconds())
	outcome := Outcome(out, err, info.Attempt)
	if outcome == OutcomeUnknown && class == string(tool.Read) {
		outcome = OutcomeFailed // a read has no effect whose outcome could be unknown
	}
	tc.calls.WithLabelValues(name, class, outcome).Inc()
	span.SetAttributes(attribute.String(AttrOutcome, outcome))
	if err != nil {
		typ := activities.ErrorType(err)
		if typ == "" {
			typ = outcome
		}
		span.SetAttributes(attribute.String(AttrErrorType, typ))
		if failure(outcome) {
			// The message names keys and provider codes, never arguments.
			span.SetStatus(codes.Error, typ)
		}
	}
	span.End()
	return out, err
}

// failure reports whether an outcome is an error of the call, as opposed to
// a guard or the ledger doing its job.
func failure(outcome string) bool {
	switch outcome {
	case OutcomeUnknown, OutcomeRejected, OutcomeConflict, OutcomeNotSent, OutcomeFailed:
		return true
	}
	return false
}

// Outcome names what one ExecuteTool attempt came to, from its result (an
// activities.Output) or its error and the attempt number.
func Outcome(result any, err error, attempt int32) string {
	if err == nil {
		var out activities.Output
		switch v := result.(type) {
		case activities.Output:
			out = v
		case *activities.Output:
			if v != nil {
				out = *v
			}
		}
		if out.Attempt > 0 {
			attempt = out.Attempt
		}
		switch {
		case out.Replayed:
			return OutcomeReplayed
		case out.Reconciled:
			return OutcomeReconciled
		case attempt > 1:
			return OutcomeRetried
		}
		return OutcomeFirstAttempt
	}
	switch activities.ErrorType(err) {
	case activities.ErrUnknown:
		return OutcomeUnknown
	case activities.ErrRejected:
		return OutcomeRejected
	case activities.ErrConflict:
		return OutcomeConflict
	case activities.ErrGuardRefused:
		return OutcomeGuardRefused
	case activities.ErrHeld, activities.ErrClashUnseen:
		return OutcomeHeld
	case activities.ErrAlreadyFinal:
		return OutcomeAlreadyFinal
	case activities.ErrNoPermit:
		return OutcomeNoPermit
	case string(tool.KindNotSent), string(tool.KindThrottled):
		return OutcomeNotSent
	case string(tool.KindInFlight):
		return OutcomeInFlight
	case string(tool.KindUnavailable):
		// A transient failure of a call that may be retried; if it was
		// the last attempt of a write the workflow treats it as unknown.
		return OutcomeUnknown
	}
	return OutcomeFailed
}

// reconcileResult is the result label of a ReconcileTool lookup.
func reconcileResult(result any, err error) string {
	if err != nil {
		return "failed"
	}
	var l tool.Lookup
	switch v := result.(type) {
	case tool.Lookup:
		l = v
	case *tool.Lookup:
		if v != nil {
			l = *v
		}
	}
	switch l.Status {
	case tool.Found, tool.Mismatch:
		return string(l.Status)
	case tool.Absent:
		if l.Authoritative {
			return string(tool.Absent)
		}
	}
	return string(tool.Unknown)
}

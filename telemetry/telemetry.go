package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/agentsaga/agentsaga/internal/loopback"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/tool"
)

// EnvMetricsAddr is the environment variable of the worker's --metrics-addr.
const EnvMetricsAddr = "AGENTSAGA_METRICS_ADDR"

// DefaultDevMetricsAddr is where `worker --dev` serves /metrics unless told
// otherwise (the port OpenTelemetry's Prometheus exporters use by default).
const DefaultDevMetricsAddr = "127.0.0.1:9464"

// DefaultServiceName is the OpenTelemetry service.name of the worker's spans
// unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names another.
const DefaultServiceName = "agentsaga-worker"

// Options configure New.
type Options struct {
	// Tools names each tool's class for the tool-call metrics and spans.
	Tools tool.Catalog
	// Ledger, when set, adds the exception-queue gauges read at scrape.
	Ledger ledger.Store
	// LedgerTimeout bounds a scrape's ledger query (zero: DefaultLedgerTimeout).
	LedgerTimeout time.Duration
	// Logger receives telemetry's own warnings; nil discards them.
	Logger *slog.Logger
	// TracerProvider, when set, receives the spans instead of the OTLP
	// exporter the environment configures (tests use an in-memory one).
	TracerProvider trace.TracerProvider
}

// Telemetry is one worker's metrics registry and tracing.
type Telemetry struct {
	// Registry holds every metric served at /metrics.
	Registry *prometheus.Registry
	// Metrics is the Temporal SDK metrics handler on Registry.
	Metrics client.MetricsHandler
	// ToolCalls records tool calls (metrics and spans).
	ToolCalls *ToolCalls
	// Tracing reports whether spans are exported (an OTLP endpoint is
	// configured, or Options.TracerProvider was given).
	Tracing bool

	sdkTracing interceptor.Interceptor // nil without tracing
	shutdown   func(context.Context) error
}

// New builds a worker's telemetry: a fresh registry with the Go and process
// collectors, the SDK handler, the tool-call recorder, the ledger gauges, and
// tracing when an OTLP endpoint is configured by the standard environment
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; the
// protocol from OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL, grpc or http/protobuf,
// the default). OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn
// tracing off. Call Shutdown to flush the spans.
func New(ctx context.Context, o Options) (*Telemetry, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	t := &Telemetry{Registry: reg, shutdown: func(context.Context) error { return nil }}
	h := NewMetrics(reg).(*handler)
	h.root.log = log
	t.Metrics = h

	tp := o.TracerProvider
	if tp == nil && TracingConfigured() {
		sdkTP, err := otlpProvider(ctx)
		if err != nil {
			return nil, err
		}
		tp, t.shutdown = sdkTP, sdkTP.Shutdown
	}
	var tracer trace.Tracer
	if tp != nil {
		t.Tracing = true
		tracer = tp.Tracer("github.com/agentsaga/agentsaga/telemetry")
		var err error
		t.sdkTracing, err = temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer("temporal-sdk-go"), SpanStarter: maskedSpanStarter})
		if err != nil {
			_ = t.shutdown(ctx)
			return nil, fmt.Errorf("telemetry: the Temporal SDK's tracing interceptor: %w", err)
		}
	}
	var err error
	if t.ToolCalls, err = NewToolCalls(reg, o.Tools, tracer); err != nil {
		_ = t.shutdown(ctx)
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if o.Ledger != nil {
		reg.MustRegister(NewLedgerCollector(o.Ledger, o.LedgerTimeout, nil, log))
	}
	return t, nil
}

// TracingConfigured reports whether the environment asks for spans to be
// exported over OTLP.
func TracingConfigured() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp != "" && !strings.Contains(exp, "otlp") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

func otlpProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch proto {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx) // endpoint, headers, TLS from OTEL_EXPORTER_OTLP_*
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTLP protocol %q is not supported: set OTEL_EXPORTER_OTLP_PROTOCOL to grpc or http/protobuf", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w (check OTEL_EXPORTER_OTLP_ENDPOINT)", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource from OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// ClientOptions sets opts' MetricsHandler and, with tracing, adds the SDK's
// tracing interceptor (which workers made from the client use too, before
// their own interceptors).
func (t *Telemetry) ClientOptions(opts *client.Options) {
	opts.MetricsHandler = t.Metrics
	if t.sdkTracing != nil {
		opts.Interceptors = append(opts.Interceptors, t.sdkTracing)
	}
}

// WorkerInterceptors are the interceptors for worker.Options.Interceptors.
func (t *Telemetry) WorkerInterceptors() []interceptor.WorkerInterceptor {
	return []interceptor.WorkerInterceptor{t.ToolCalls.Interceptor()}
}

// Handler serves the registry in the Prometheus exposition format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.Registry, promhttp.HandlerOpts{Registry: t.Registry})
}

// Shutdown flushes and stops the span exporter, if any.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flush spans: %w", err)
	}
	return nil
}

// Server serves /metrics.
type Server struct {
	srv *http.Server
	url string
}

// Serve listens on addr (host:port; port 0 picks a free one) and serves
// /metrics until Close.
func (t *Telemetry) Serve(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w (choose another --metrics-addr)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", t.Handler())
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		_, _ = fmt.Fprintln(w, "agentsaga worker metrics: /metrics")
	})
	s := &Server{srv: &http.Server{Handler: loopback.Guard(mux), ReadHeaderTimeout: 10 * time.Second}, url: "http://" + ln.Addr().String() + "/metrics"}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL is the address of /metrics.
func (s *Server) URL() string { return s.url }

// Close stops serving.
func (s *Server) Close() error {
	if err := s.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: close: %w", err)
	}
	return nil
}

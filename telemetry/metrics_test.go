package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/ledger"
)

// TestMetricsHandlerMapsTheSDKKinds: a Counter is a counter named _total, a
// Timer a histogram in seconds named _seconds, a Gauge a gauge; the label
// names are fixed by the first use (missing ones "", unknown ones dropped).
func TestMetricsHandlerMapsTheSDKKinds(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewMetrics(reg)
	base := h.WithTags(map[string]string{"namespace": "default", "task_queue": "agent-saga"})
	base.WithTags(map[string]string{"state": "succeeded"}).Counter("agentsaga_plans_completed_total").Inc(2)
	base.WithTags(map[string]string{"state": "compensated", "workflow_id": "unbounded"}).Counter("agentsaga_plans_completed_total").Inc(1)
	h.Counter("agentsaga_plans_completed_total").Inc(1) // no tags at all
	base.Counter("temporal_request").Inc(3)
	base.WithTags(map[string]string{"settled_by": "human"}).Timer("agentsaga_unknown_settle_seconds").Record(90 * time.Second)
	base.Timer("temporal_activity_execution_latency").Record(250 * time.Millisecond)
	base.Gauge("temporal_num_pollers").Update(4)

	require.Equal(t, 2.0, counter(t, reg, "agentsaga_plans_completed_total", map[string]string{"state": "succeeded", "namespace": "default"}))
	require.Equal(t, 1.0, counter(t, reg, "agentsaga_plans_completed_total", map[string]string{"state": "compensated"}))
	require.Equal(t, 1.0, counter(t, reg, "agentsaga_plans_completed_total", map[string]string{"state": "", "namespace": ""}))
	m := find(t, reg, "agentsaga_plans_completed_total", map[string]string{"state": "compensated"})
	for _, l := range m.GetLabel() {
		require.NotEqual(t, "workflow_id", l.GetName(), "a label unknown to the metric is dropped")
	}
	require.Equal(t, 3.0, counter(t, reg, "temporal_request_total", nil))
	settle := find(t, reg, "agentsaga_unknown_settle_seconds", map[string]string{"settled_by": "human"})
	require.NotNil(t, settle)
	require.Equal(t, 90.0, settle.GetHistogram().GetSampleSum(), "timers are recorded in seconds")
	require.Equal(t, 0.25, find(t, reg, "temporal_activity_execution_latency_seconds", nil).GetHistogram().GetSampleSum())
	require.Equal(t, 4.0, counter(t, reg, "temporal_num_pollers", nil))
}

// TestMetricsHandlerNeverPanics: a second handler on the same registry
// shares its metrics; a name used as two kinds, or taken by another
// collector, drops values instead of panicking.
func TestMetricsHandlerNeverPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	taken := prometheus.NewGauge(prometheus.GaugeOpts{Name: "taken_total", Help: "someone else's"})
	reg.MustRegister(taken)
	a, b := NewMetrics(reg), NewMetrics(reg)
	require.NotPanics(t, func() {
		a.WithTags(map[string]string{"k": "1"}).Counter("shared").Inc(1)
		b.WithTags(map[string]string{"k": "1"}).Counter("shared").Inc(1)
		b.WithTags(map[string]string{"other": "x"}).Counter("shared").Inc(5) // other label names: dropped
		a.Counter("mixed").Inc(1)
		a.Gauge("mixed_total").Update(1) // the counter's name as a gauge: dropped
		a.Counter("taken").Inc(1)        // taken_total is someone else's gauge
		a.Counter("negative").Inc(-1)
	})
	require.Equal(t, 2.0, counter(t, reg, "shared_total", map[string]string{"k": "1"}))
	require.Equal(t, 1.0, counter(t, reg, "mixed_total", nil))
	require.Equal(t, 0.0, counter(t, reg, "taken_total", nil))
	_, err := reg.Gather()
	require.NoError(t, err, "the registry stays consistent")
}

// failingStore fails every Exceptions call; the rest of ledger.Store panics.
type failingStore struct{ ledger.Store }

func (failingStore) Exceptions(ctx context.Context, _ ledger.ExceptionFilter) ([]ledger.Operation, error) {
	<-ctx.Done() // a ledger that hangs: the scrape's timeout ends it
	return nil, errors.New("ledger down")
}

type queueStore struct {
	ledger.Store
	ops []ledger.Operation
}

func (s queueStore) Exceptions(context.Context, ledger.ExceptionFilter) ([]ledger.Operation, error) {
	return s.ops, nil
}

// TestLedgerCollector: the queue by kind with the age of the oldest entry;
// a ledger that hangs gives agentsaga_ledger_up 0 within the timeout.
func TestLedgerCollector(t *testing.T) {
	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewLedgerCollector(queueStore{ops: []ledger.Operation{
		{Key: "a", Status: ledger.NeedsHuman, CreatedAt: at.Add(-time.Hour)},
		{Key: "b", Status: ledger.NeedsHuman, CreatedAt: at.Add(-time.Minute)},
		{Key: "c", Status: ledger.InProgress, CreatedAt: at.Add(-10 * time.Second)},
		{Key: "d", Status: ledger.CompensationFailed, CreatedAt: at.Add(-2 * time.Hour)},
	}}, time.Second, func() time.Time { return at }, nil))
	require.Equal(t, 1.0, counter(t, reg, MetricLedgerUp, nil))
	for kind, want := range map[string][2]float64{
		ledger.KindNeedsHuman: {2, 3600}, ledger.KindStuck: {1, 10}, ledger.KindCompensationFailed: {1, 7200}, ledger.KindUnknown: {0, 0},
	} {
		require.Equal(t, want[0], counter(t, reg, MetricExceptions, map[string]string{"kind": kind}), kind)
		require.Equal(t, want[1], counter(t, reg, MetricExceptionOldest, map[string]string{"kind": kind}), kind)
	}

	down := prometheus.NewRegistry()
	down.MustRegister(NewLedgerCollector(failingStore{}, 50*time.Millisecond, nil, nil))
	start := time.Now()
	require.Equal(t, 0.0, counter(t, down, MetricLedgerUp, nil))
	require.Less(t, time.Since(start), 5*time.Second, "the scrape does not wait for a hung ledger")
	require.Nil(t, find(t, down, MetricExceptions, nil), "no queue figures when the ledger was not read")
}

// TestServe: /metrics serves the registry on the address given; port 0
// picks a free one.
func TestServe(t *testing.T) {
	tel, err := New(context.Background(), Options{})
	require.NoError(t, err)
	tel.Metrics.Counter("agentsaga_probe").Inc(1)
	srv, err := tel.Serve("127.0.0.1:0")
	require.NoError(t, err)
	defer srv.Close()
	require.True(t, strings.HasSuffix(srv.URL(), "/metrics"))
	resp, err := http.Get(srv.URL())
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "agentsaga_probe_total 1")
	require.Contains(t, string(body), "go_goroutines", "the Go collector is registered")
}

// TestTracingOnlyWithAnEndpoint: spans are exported only when the standard
// environment names an OTLP endpoint.
func TestTracingOnlyWithAnEndpoint(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		t.Setenv(v, "")
	}
	require.False(t, TracingConfigured())
	tel, err := New(context.Background(), Options{})
	require.NoError(t, err)
	require.False(t, tel.Tracing)
	require.Nil(t, tel.sdkTracing)

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	require.True(t, TracingConfigured())
	tel, err = New(context.Background(), Options{})
	require.NoError(t, err)
	require.True(t, tel.Tracing)
	require.NotNil(t, tel.sdkTracing)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = tel.Shutdown(ctx) // nothing listens there; flushing an empty batch may fail

	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	require.False(t, TracingConfigured())
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
	_, err = New(context.Background(), Options{})
	require.ErrorContains(t, err, "grpc or http/protobuf")
}

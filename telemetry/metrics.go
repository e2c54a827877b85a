// Package telemetry makes agentsaga observable: Prometheus metrics (the
// Temporal SDK's own and the product's), OpenTelemetry traces of workflows,
// activities and every tool call, and gauges of the ledger's exception
// queue read at scrape time.
//
// Metric names follow Prometheus conventions and carry no unbounded label
// values (no keys, ids or amounts). The product's metrics:
//
//	agentsaga_tool_calls_total{tool,class,outcome}     one per ExecuteTool attempt (see Outcomes)
//	agentsaga_tool_call_seconds{tool,class}            duration of one ExecuteTool attempt
//	agentsaga_reconciles_total{tool,class,result}      ReconcileTool lookups: found, absent, mismatch, unknown, failed
//	agentsaga_exceptions{kind}                         exception queue size by kind (ledger, at scrape)
//	agentsaga_exception_oldest_age_seconds{kind}       age of the oldest entry by kind (ledger, at scrape)
//	agentsaga_ledger_up                                1 when the last scrape read the ledger
//
// and, emitted by the workflow through the SDK's handler (package workflows):
// agentsaga_plans_completed_total{state}, agentsaga_questions_opened_total{kind},
// agentsaga_decisions_total{kind,outcome}, agentsaga_compensations_total{result},
// agentsaga_unknown_settle_seconds{settled_by}.
package telemetry

import (
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// SecondsBuckets are the histogram buckets of every timer, in seconds: from
// a fast provider call (5 ms) to a person answering the next day.
var SecondsBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// NewMetrics returns a Temporal SDK metrics handler that records into reg:
// a Counter becomes a CounterVec (named with "_total" unless it ends so), a
// Gauge a GaugeVec, a Timer a HistogramVec in seconds (named with
// "_seconds" unless it ends so). Use it as client.Options.MetricsHandler:
// the SDK's metrics and the workflow's own (workflow.GetMetricsHandler,
// silent on replay) then reach reg.
//
// A metric's label names are fixed by its first use: a later use that lacks
// one records it as "", and one that brings a label unknown to the metric
// drops that label. Nothing here panics: a name that reg refuses (taken by
// another kind of collector) is logged once and its values are dropped.
func NewMetrics(reg prometheus.Registerer) client.MetricsHandler {
	return &handler{root: &metricsRoot{reg: reg, vecs: map[string]*vec{}, log: slog.Default()}}
}

type metricsRoot struct {
	reg  prometheus.Registerer
	log  *slog.Logger
	mu   sync.Mutex
	vecs map[string]*vec
}

type kind int

const (
	counterKind kind = iota
	gaugeKind
	timerKind
)

func (k kind) String() string {
	return [...]string{"counter", "gauge", "timer"}[k]
}

// vec is one registered metric: its collector and fixed label names.
type vec struct {
	kind   kind
	labels []string
	known  map[string]bool
	c      *prometheus.CounterVec
	g      *prometheus.GaugeVec
	h      *prometheus.HistogramVec
	broken bool // refused by the registry: values are dropped
	warned sync.Once
}

type handler struct {
	root *metricsRoot
	tags map[string]string
}

// WithTags implements client.MetricsHandler.
func (h *handler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[sanitize(k)] = v
	}
	for k, v := range tags {
		merged[sanitize(k)] = v
	}
	return &handler{root: h.root, tags: merged}
}

// Counter implements client.MetricsHandler.
func (h *handler) Counter(name string) client.MetricsCounter {
	v := h.root.get(suffixed(name, "_total"), counterKind, h.tags)
	labels := v.values(h.tags)
	return counterFunc(func(d int64) {
		if v.broken || d < 0 {
			return
		}
		if m, err := v.c.GetMetricWithLabelValues(labels...); err == nil {
			m.Add(float64(d))
		} else {
			v.warn(h.root.log, name, err)
		}
	})
}

// Gauge implements client.MetricsHandler.
func (h *handler) Gauge(name string) client.MetricsGauge {
	v := h.root.get(sanitize(name), gaugeKind, h.tags)
	labels := v.values(h.tags)
	return gaugeFunc(func(f float64) {
		if v.broken {
			return
		}
		if m, err := v.g.GetMetricWithLabelValues(labels...); err == nil {
			m.Set(f)
		} else {
			v.warn(h.root.log, name, err)
		}
	})
}

// Timer implements client.MetricsHandler.
func (h *handler) Timer(name string) client.MetricsTimer {
	v := h.root.get(suffixed(name, "_seconds"), timerKind, h.tags)
	labels := v.values(h.tags)
	return timerFunc(func(d time.Duration) {
		if v.broken {
			return
		}
		if m, err := v.h.GetMetricWithLabelValues(labels...); err == nil {
			m.Observe(d.Seconds())
		} else {
			v.warn(h.root.log, name, err)
		}
	})
}

// get returns the metric name of kind k, registering it with the label
// names of tags on first use.
func (r *metricsRoot) get(name string, k kind, tags map[string]string) *vec {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := name
	if v, ok := r.vecs[key]; ok {
		if v.kind == k {
			return v
		}
		// The same name used as another kind: keep the first, drop these.
		key = name + "\x00" + k.String()
		if v, ok := r.vecs[key]; ok {
			return v
		}
		v := &vec{kind: k, broken: true}
		v.warn(r.log, name, errKindClash{name: name, first: r.vecs[name].kind, then: k})
		r.vecs[key] = v
		return v
	}
	labels := make([]string, 0, len(tags))
	for t := range tags {
		labels = append(labels, t)
	}
	slices.Sort(labels)
	v := &vec{kind: k, labels: labels, known: map[string]bool{}}
	for _, l := range labels {
		v.known[l] = true
	}
	help := "Temporal SDK metric " + name
	if strings.HasPrefix(name, "agentsaga_") {
		help = "agentsaga metric " + name + " (see package telemetry)"
	}
	var c prometheus.Collector
	switch k {
	case counterKind:
		v.c = prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		c = v.c
	case gaugeKind:
		v.g = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
		c = v.g
	case timerKind:
		v.h = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: SecondsBuckets}, labels)
		c = v.h
	}
	if err := r.reg.Register(c); err != nil {
		v.adopt(err)
		if v.broken {
			v.warn(r.log, name, err)
		}
	}
	r.vecs[key] = v
	return v
}

// adopt uses the collector already registered under the name when it is of
// the same kind (a second handler on one registry); label values that do not
// fit it are then refused by GetMetricWithLabelValues, never a panic.
func (v *vec) adopt(err error) {
	are, ok := err.(prometheus.AlreadyRegisteredError)
	if !ok {
		v.broken = true
		return
	}
	switch existing := are.ExistingCollector.(type) {
	case *prometheus.CounterVec:
		if v.kind == counterKind {
			v.c = existing
			return
		}
	case *prometheus.GaugeVec:
		if v.kind == gaugeKind {
			v.g = existing
			return
		}
	case *prometheus.HistogramVec:
		if v.kind == timerKind {
			v.h = existing
			return
		}
	}
	v.broken = true
}

// values are the label values of tags in v's label order: missing ones "",
// unknown ones dropped.
func (v *vec) values(tags map[string]string) []string {
	out := make([]string, len(v.labels))
	for i, l := range v.labels {
		out[i] = tags[l]
	}
	return out
}

func (v *vec) warn(log *slog.Logger, name string, err error) {
	v.warned.Do(func() {
		log.Warn("metric values dropped", "metric", name, "error", err)
	})
}

type (
	counterFunc func(int64)
	gaugeFunc   func(float64)
	timerFunc   func(time.Duration)
)

func (f counterFunc) Inc(d int64)          { f(d) }
func (f gaugeFunc) Update(v float64)       { f(v) }
func (f timerFunc) Record(d time.Duration) { f(d) }

type errKindClash struct {
	name        string
	first, then kind
}

func (e errKindClash) Error() string {
	return "metric " + e.name + " was first used as a " + e.first.String() + " and now as a " + e.then.String() + ": rename one of them"
}

// suffixed returns the sanitized name ending in suffix.
func suffixed(name, suffix string) string {
	name = sanitize(name)
	if strings.HasSuffix(name, suffix) {
		return name
	}
	return name + suffix
}

// sanitize makes s a valid Prometheus metric or label name: every character
// outside [a-zA-Z0-9_] becomes '_', and a leading digit gets a '_' before it.
func sanitize(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if i == 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

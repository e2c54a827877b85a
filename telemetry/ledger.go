package telemetry

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentsaga/agentsaga/ledger"
)

// The ledger gauges, read at scrape time.
const (
	// MetricExceptions is the exception queue's size by kind (needs_human,
	// compensation_failed, unknown, stuck).
	MetricExceptions = "agentsaga_exceptions"
	// MetricExceptionOldest is the age of the oldest entry by kind, since
	// its operation was created; 0 when the kind is empty.
	MetricExceptionOldest = "agentsaga_exception_oldest_age_seconds"
	// MetricLedgerUp is 1 when the last scrape read the ledger, else 0 (and
	// the two gauges above are then left out, not reported as zero).
	MetricLedgerUp = "agentsaga_ledger_up"
)

// DefaultLedgerTimeout bounds one scrape's ledger query.
const DefaultLedgerTimeout = 5 * time.Second

// LedgerCollector reports the exception queue from the ledger at each scrape.
type LedgerCollector struct {
	store   ledger.Store
	timeout time.Duration
	now     func() time.Time
	log     *slog.Logger

	size, oldest, up *prometheus.Desc
}

// NewLedgerCollector returns a collector of the exception queue of store. A
// query that fails or outlives timeout (zero: DefaultLedgerTimeout) gives
// agentsaga_ledger_up 0 and is logged to log (nil: discarded). now is the
// clock of the ages (nil: time.Now). Register it on a registry.
func NewLedgerCollector(store ledger.Store, timeout time.Duration, now func() time.Time, log *slog.Logger) *LedgerCollector {
	if timeout <= 0 {
		timeout = DefaultLedgerTimeout
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LedgerCollector{
		store: store, timeout: timeout, now: now, log: log,
		size:   prometheus.NewDesc(MetricExceptions, "Operations in the ledger's exception queue, by kind.", []string{"kind"}, nil),
		oldest: prometheus.NewDesc(MetricExceptionOldest, "Age of the oldest operation in the exception queue, by kind, in seconds.", []string{"kind"}, nil),
		up:     prometheus.NewDesc(MetricLedgerUp, "1 when the last scrape read the ledger's exception queue.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *LedgerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.size
	ch <- c.oldest
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *LedgerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ops, err := c.store.Exceptions(ctx, ledger.ExceptionFilter{})
	if err != nil {
		c.log.Warn("metrics: the ledger's exception queue could not be read", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, q := range ledger.SummarizeQueue(ops, c.now()) {
		ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(q.Count), q.Kind)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, q.OldestAgeSeconds, q.Kind)
	}
}

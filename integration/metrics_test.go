package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/telemetry"
	"github.com/agentsaga/agentsaga/workflows"
)

// metrics is one scrape of /metrics.
type metrics map[string]*dto.MetricFamily

func scrape(ctx context.Context, t *testing.T, url string) metrics {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "parse /metrics")
	return fams
}

// value sums the series of name whose labels include labels: a counter's or
// gauge's value, a histogram's sample count.
func (m metrics) value(name string, labels map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	sum := 0.0
series:
	for _, s := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range s.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue series
			}
		}
		switch {
		case s.Counter != nil:
			sum += s.Counter.GetValue()
		case s.Gauge != nil:
			sum += s.Gauge.GetValue()
		case s.Histogram != nil:
			sum += float64(s.Histogram.GetSampleCount())
		}
	}
	return sum
}

// TestMetricsAfterTheStories runs three stories on a stack with metrics on
// and finds each product metric with the values the stories imply, as
// deltas of two scrapes: a refund whose response is lost, reconciled by key
// (found); an email whose response is lost, settled by a person; a saga
// whose last step is rejected, compensated twice. The ledger's report over
// the same stack gives the same figures.
func TestMetricsAfterTheStories(t *testing.T) {
	ctx := testContext(t, time.Minute)
	st, err := devstack.Start(ctx, devstack.Options{UIPort: -1, MetricsAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	require.NotEmpty(t, st.MetricsURL)
	sb := sandbox.NewClient(st.SandboxURL, nil)
	before := scrape(ctx, t, st.MetricsURL)
	require.Equal(t, 1.0, before.value(telemetry.MetricLedgerUp, nil))
	start := time.Now()

	// a: the refund is committed, the answer lost: UNKNOWN, reconciled by key.
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "refunds.create", Fault: sandbox.CommitThenDrop, Count: 1}))
	run, err := st.Plans.Start(ctx, refundPlan(t, "it-metrics-refund", "ord_1001", 12900))
	require.NoError(t, err)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)

	// c: the email is sent, the answer lost; mail has no lookup: a person
	// settles it.
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "mail.send", Fault: sandbox.CommitThenDrop, Count: 1}))
	mail := newPlan("it-metrics-email",
		step(t, "query_order", map[string]any{"order_id": "ord_1001"}),
		step(t, "send_email", map[string]any{"to": "ana@example.com", "subject": "Your refund", "body": "We refunded 129.00 EUR."}))
	run, err = st.Plans.Start(ctx, mail)
	require.NoError(t, err)
	waiting := waitStatus(ctx, t, st, run.WorkflowID, questionOn(2, workflows.QuestionOutcome))
	during := scrape(ctx, t, st.MetricsURL)
	require.Equal(t, 1.0, during.value(telemetry.MetricExceptions, map[string]string{"kind": ledger.KindNeedsHuman}),
		"the email waits in the ledger's exception queue")
	require.Greater(t, during.value(telemetry.MetricExceptionOldest, map[string]string{"kind": ledger.KindNeedsHuman}), 0.0)
	emails, err := sb.Effects(ctx, sandbox.Mail)
	require.NoError(t, err)
	require.Len(t, emails, 1)
	_, err = st.Plans.Resolve(ctx, run.WorkflowID, workflows.ResolveSignal{Step: 2, QuestionID: waiting.Questions[0].ID,
		Outcome: workflows.OutcomeSucceeded, ExternalID: emails[0].ID, By: "it-operator", Note: "found in the relay log"})
	require.NoError(t, err)
	final, err = st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, "plan error: %s", final.Error)

	// b: invoice -> payment -> ticket rejected for good: two reversals.
	require.NoError(t, sb.Fault(ctx, sandbox.FaultSpec{Op: "tickets.create", Fault: sandbox.Reject, Count: 1, Status: 403, Code: "crm_queue_closed", Message: "closed"}))
	saga := newPlan("it-metrics-saga",
		step(t, "create_invoice", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1002", "amount_minor": 4900, "currency": "EUR", "description": "express delivery"}),
		step(t, "create_payment", map[string]any{"customer_id": "cus_ana", "order_id": "ord_1002", "amount_minor": 4900, "currency": "EUR", "payment_method": "tok_visa"}),
		step(t, "create_ticket", map[string]any{"subject": "Schedule express delivery", "order_id": "ord_1002", "priority": "high"}))
	run, err = st.Plans.Start(ctx, saga)
	require.NoError(t, err)
	final, err = st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaCompensated, final.State, "plan error: %s", final.Error)

	after := scrape(ctx, t, st.MetricsURL)
	delta := func(name string, labels map[string]string) float64 {
		return after.value(name, labels) - before.value(name, labels)
	}
	calls := func(tool, outcome string) float64 {
		return delta(telemetry.MetricToolCalls, map[string]string{"tool": tool, "outcome": outcome})
	}
	for _, c := range []struct {
		what string
		got  float64
		want float64
	}{
		{"refund attempt unknown", calls("apply_refund", telemetry.OutcomeUnknown), 1},
		{"refund reconciled found", delta(telemetry.MetricReconciles, map[string]string{"tool": "apply_refund", "result": "found"}), 1},
		{"email attempt unknown", calls("send_email", telemetry.OutcomeUnknown), 1},
		{"ticket rejected", calls("create_ticket", telemetry.OutcomeRejected), 1},
		{"reads done on the first attempt", calls("query_order", telemetry.OutcomeFirstAttempt), 2},
		{"invoice and payment on the first attempt", calls("create_invoice", telemetry.OutcomeFirstAttempt) + calls("create_payment", telemetry.OutcomeFirstAttempt), 2},
		{"reversals on the first attempt", calls("void_payment", telemetry.OutcomeFirstAttempt) + calls("storno_invoice", telemetry.OutcomeFirstAttempt), 2},
		{"class label of the refund", delta(telemetry.MetricToolCalls, map[string]string{"tool": "apply_refund", "class": "NON_IDEMPOTENT_WRITE"}), 1},
		{"settled by reconcile", delta(workflows.MetricUnknownSettle, map[string]string{"settled_by": "reconcile"}), 1},
		{"settled by a person", delta(workflows.MetricUnknownSettle, map[string]string{"settled_by": "human"}), 1},
		{"outcome questions opened", delta(workflows.MetricQuestionsOpened, map[string]string{"kind": workflows.QuestionOutcome}), 1},
		{"questions opened", delta(workflows.MetricQuestionsOpened, nil), 1},
		{"person resolved succeeded", delta(workflows.MetricDecisions, map[string]string{"kind": "resolve", "outcome": "succeeded"}), 1},
		{"compensations succeeded", delta(workflows.MetricCompensations, map[string]string{"result": "succeeded"}), 2},
		{"compensations failed", delta(workflows.MetricCompensations, map[string]string{"result": "failed"}), 0},
		{"plans succeeded", delta(workflows.MetricPlansCompleted, map[string]string{"state": string(workflows.SagaSucceeded)}), 2},
		{"plans compensated", delta(workflows.MetricPlansCompleted, map[string]string{"state": string(workflows.SagaCompensated)}), 1},
		{"tool-call durations", delta(telemetry.MetricToolCallSeconds, nil), sumCalls(before, after)},
		{"needs_human after the decision", after.value(telemetry.MetricExceptions, map[string]string{"kind": ledger.KindNeedsHuman}), 0},
	} {
		require.Equal(t, c.want, c.got, c.what)
	}
	require.Greater(t, after.value("temporal_request_total", nil), 0.0, "the SDK's own metrics reach /metrics")

	// The ledger's report over the same stack says the same.
	rep, err := st.Ledger.Report(ctx, start.Add(-time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, rep.Unknown.Total, "the refund and the email")
	require.Equal(t, 1, rep.Unknown.ByReconcile)
	require.Equal(t, 1, rep.Unknown.ByHuman)
	require.Equal(t, 2, rep.Totals.Compensated, "invoice and payment")
	require.Equal(t, map[string]int{"outcome": 1}, rep.Humans.Why)
	require.Equal(t, 1, rep.Humans.Measured, "the resolve is measured from the moment the email became unknown")
	require.Less(t, time.Since(start), 20*time.Second, "the stories run fast")
}

// sumCalls is the number of ExecuteTool attempts between two scrapes (every
// attempt records one duration).
func sumCalls(before, after metrics) float64 {
	return after.value(telemetry.MetricToolCalls, nil) - before.value(telemetry.MetricToolCalls, nil)
}

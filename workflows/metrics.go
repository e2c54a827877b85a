package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// Metric names the workflow emits through the SDK's metrics handler (so
// they are not emitted again on replay). Labels are bounded: no keys, ids
// or amounts.
const (
	// MetricPlansCompleted counts finished plans by final state.
	MetricPlansCompleted = "agentsaga_plans_completed_total"
	// MetricQuestionsOpened counts questions opened, by kind.
	MetricQuestionsOpened = "agentsaga_questions_opened_total"
	// MetricDecisions counts human decisions (and expiries and refusals),
	// by kind and outcome.
	MetricDecisions = "agentsaga_decisions_total"
	// MetricCompensations counts reversals run, by result.
	MetricCompensations = "agentsaga_compensations_total"
	// MetricUnknownSettle is the time from an UNKNOWN outcome to its
	// settling, by how it settled (reconcile or human).
	MetricUnknownSettle = "agentsaga_unknown_settle_seconds"
)

func (r *run) count(ctx workflow.Context, name string, tags map[string]string) {
	workflow.GetMetricsHandler(ctx).WithTags(tags).Counter(name).Inc(1)
}

func (r *run) settled(ctx workflow.Context, since time.Time, by string) {
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"settled_by": by}).Timer(MetricUnknownSettle).Record(workflow.Now(ctx).Sub(since))
}

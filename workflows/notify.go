package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentsaga/agentsaga/activities"
)

// versionNotify: questions are announced to the worker's webhook (opened,
// aged, decided, expired), each by an activity the plan does not wait on.
const versionNotify = "notify-webhook"

// notifyDrain bounds how long a finished plan waits for its notifications
// still in flight: a dead webhook never holds a plan longer.
const notifyDrain = time.Minute

// notifyOptions send one notification: a few tries over about a minute for
// a webhook not reached (nothing sent); a post that may have arrived is not
// sent again (activities.Notify).
var notifyOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 20 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval: 2 * time.Second, BackoffCoefficient: 2, MaximumInterval: 20 * time.Second, MaximumAttempts: 5,
	},
}

// notifyOn reports whether this run announces its questions.
func (r *run) notifyOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionNotify, workflow.DefaultVersion, 1) >= 1
}

// announce tells the webhook that q opened, and, when the worker asks it,
// again if q is still open past the worker's threshold. It returns at once.
func (r *run) announce(ctx workflow.Context, q *question) {
	if !r.notifyOn(ctx) {
		return
	}
	q.notified = true
	r.notifying++
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { r.notifying-- }()
		res, err := r.notify(gctx, q, activities.NotifyOpened, "")
		if err != nil || !res.On || res.After <= 0 {
			return
		}
		tctx, cancel := workflow.WithCancel(gctx)
		defer cancel()
		timer := workflow.NewTimerWithOptions(tctx, res.After, workflow.TimerOptions{Summary: "notify if " + q.ID + " is still open"})
		aged := false
		_ = workflow.Await(gctx, func() bool {
			aged = timer.IsReady()
			return aged || q.decision != nil || r.qs[q.Step] != q
		})
		if aged && q.decision == nil && r.qs[q.Step] == q {
			_, _ = r.notify(gctx, q, activities.NotifyAged, "")
		}
	})
}

// announceClosed tells the webhook that q was decided (or expired).
func (r *run) announceClosed(ctx workflow.Context, q *question, d Decision) {
	if !q.notified {
		return
	}
	event, by := activities.NotifyDecided, d.By
	if d.Kind == "expire" {
		event, by = activities.NotifyExpired, ""
	}
	r.notifying++
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { r.notifying-- }()
		_, _ = r.notify(gctx, q, event, by)
	})
}

// notify runs one Notify activity; its failure is logged, never the plan's.
func (r *run) notify(ctx workflow.Context, q *question, event, by string) (activities.NotifyResult, error) {
	opts := notifyOptions
	opts.Summary = "notify " + event + " " + q.ID
	req := activities.NotifyRequest{
		Key:   fmt.Sprintf("%s:%s:%s", r.st.WorkflowID, q.ID, event),
		Event: event, WorkflowID: r.st.WorkflowID, QuestionID: q.ID, Kind: q.Kind, Step: q.Step,
		Summary: q.Card.OneLine(), By: by,
	}
	var res activities.NotifyResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activities.NotifyName, req).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Warn("notification not delivered", "question", q.ID, "event", event, "error", err)
	}
	return res, err
}

// drainNotifications lets notifications in flight finish, for at most
// notifyDrain.
func (r *run) drainNotifications(ctx workflow.Context) {
	if r.notifying == 0 {
		return
	}
	_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: notifyDrain, TimerOptions: workflow.TimerOptions{Summary: "notifications in flight"}},
		func() bool { return r.notifying == 0 })
}

// OneLine is the card in one line, for a notification: the change, the
// object, the amount and the rule.
func (c Card) OneLine() string {
	out := c.Change
	for _, p := range []string{c.Object, c.Amount, c.Rule} {
		if p != "" {
			out += " · " + p
		}
	}
	if c.Clash != "" {
		out += " · clash: " + c.Clash
	}
	return out
}

package workflows

import (
	"fmt"
	"math"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
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

// NotifyWorkflowName is the workflow that delivers one question's
// notifications (AgentNotify): a child of the plan or session that asked,
// abandoned when its parent closes, so delivery outlives the plan.
const NotifyWorkflowName = "AgentNotify"

// NotifyClosedSignal tells an AgentNotify workflow that its question was
// decided or expired (payload NotifyClosed).
const NotifyClosedSignal = "question-closed"

// NotifyWorkflowID is the workflow ID of the AgentNotify workflow of
// question questionID of workflowID.
func NotifyWorkflowID(workflowID, questionID string) string {
	return "agent-notify:" + workflowID + ":" + questionID
}

// NotifyInput starts an AgentNotify workflow: the question (Request
// without event and key) and the worker's settings.
type NotifyInput struct {
	Request  activities.NotifyRequest `json:"request"`
	Settings activities.NotifyResult  `json:"settings"`
}

// NotifyClosed is the payload of NotifyClosedSignal.
type NotifyClosed struct {
	Event    string `json:"event"` // decided or expired
	By       string `json:"by,omitempty"`
	Decision string `json:"decision,omitempty"`
}

// notifyCloseWait bounds how long AgentNotify waits for its question to
// close: longer than any question stays open.
const notifyCloseWait = 30 * 24 * time.Hour

// notifySettingsOptions read the worker's notification settings.
var notifySettingsOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second, MaximumAttempts: 5},
	Summary:             "notification settings",
}

// notifyOn reports whether this run announces its questions.
func (r *run) notifyOn(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionNotify, workflow.DefaultVersion, 1) >= 1
}

// delivered reports whether this run's notifications are delivered by
// AgentNotify workflows (at least once, for the worker's retry period)
// rather than by activities of its own (at most once).
func (r *run) delivered(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionNotifyDelivery, workflow.DefaultVersion, 1) >= 1
}

// announce tells the webhook that q opened, and, when the worker asks it,
// again if q is still open past the worker's threshold. It returns at once.
func (r *run) announce(ctx workflow.Context, q *question) {
	if !r.notifyOn(ctx) {
		return
	}
	q.notified = true
	if r.delivered(ctx) {
		r.announceByChild(ctx, q)
		return
	}
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
	if q.notify != nil {
		r.closeChild(ctx, q, NotifyClosed{Event: event, By: by, Decision: decided(d)})
		return
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

// announceByChild starts q's AgentNotify workflow, when the worker
// notifies. The settings are read once per run.
func (r *run) announceByChild(ctx workflow.Context, q *question) {
	r.notifying++
	q.notify = &notifyChild{}
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { r.notifying--; q.notify.ready = true }()
		if r.notifySettings == nil {
			var set activities.NotifyResult
			if err := workflow.ExecuteActivity(workflow.WithActivityOptions(gctx, notifySettingsOptions), activities.NotifySettingsName).Get(gctx, &set); err != nil {
				workflow.GetLogger(gctx).Warn("notification settings not read: this question is not announced", "question", q.ID, "error", err)
				return
			}
			if r.notifySettings == nil {
				r.notifySettings = &set
			}
		}
		if !r.notifySettings.On {
			return
		}
		in := NotifyInput{Settings: *r.notifySettings, Request: activities.NotifyRequest{
			WorkflowID: r.st.WorkflowID, QuestionID: q.ID, Kind: q.Kind, Step: q.Step, Summary: q.Card.OneLine(),
		}}
		cctx := workflow.WithChildOptions(gctx, workflow.ChildWorkflowOptions{
			WorkflowID:        NotifyWorkflowID(r.st.WorkflowID, q.ID),
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
			StaticSummary:     "notifications of " + q.ID,
		})
		f := workflow.ExecuteChildWorkflow(cctx, NotifyWorkflowName, in)
		if err := f.GetChildWorkflowExecution().Get(gctx, nil); err != nil {
			workflow.GetLogger(gctx).Warn("notifications not started", "question", q.ID, "error", err)
			return
		}
		q.notify.child = f
	})
}

// closeChild tells q's AgentNotify workflow that q closed, once it started.
func (r *run) closeChild(ctx workflow.Context, q *question, c NotifyClosed) {
	r.notifying++
	workflow.Go(ctx, func(gctx workflow.Context) {
		defer func() { r.notifying-- }()
		_ = workflow.Await(gctx, func() bool { return q.notify.ready })
		if q.notify.child == nil {
			return
		}
		if err := q.notify.child.SignalChildWorkflow(gctx, NotifyClosedSignal, c).Get(gctx, nil); err != nil {
			workflow.GetLogger(gctx).Warn("notifications not told the question closed", "question", q.ID, "error", err)
		}
	})
}

// notifyChild is a question's AgentNotify workflow as its parent knows it.
type notifyChild struct {
	ready bool                         // the start finished (or was skipped)
	child workflow.ChildWorkflowFuture // nil when not started
}

// decided says in a word what d decided, for the "decided" event.
func decided(d Decision) string {
	switch {
	case d.Kind == "resolve":
		return string(d.Outcome)
	case d.Override && d.Approved:
		return "override"
	case d.Approved:
		return "approve"
	}
	return "reject"
}

// AgentNotify delivers the notifications of one question: "opened" at
// once, "aged" when the question is still open after the worker's
// threshold (whatever happened to "opened"), and "decided" or "expired"
// when its parent signals NotifyClosedSignal. Each is posted until the
// webhook answers 2xx, with backoff doubling from a second up to
// Settings.MaxBackoff, for Settings.RetryFor; then its ledger row is
// marked given up. It ends when every event it owes is delivered or given
// up, or notifyCloseWait after it started when the question never closed.
func (s *Saga) AgentNotify(ctx workflow.Context, in NotifyInput) error {
	set := in.Settings
	opts := workflow.ActivityOptions{
		StartToCloseTimeout:    20 * time.Second,
		ScheduleToCloseTimeout: set.RetryFor,
		// The period ends the retries (ScheduleToCloseTimeout); the attempts
		// are bounded too, above what a period of one-second waits needs.
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: set.MaxBackoff,
			MaximumAttempts: int32(min(set.RetryFor/time.Second+1, math.MaxInt32)),
		},
	}
	pending := 0
	deliver := func(event string, c NotifyClosed) {
		pending++
		req := in.Request
		req.Event, req.By, req.Decision = event, c.By, c.Decision
		req.Key = fmt.Sprintf("%s:%s:%s", req.WorkflowID, req.QuestionID, event)
		workflow.Go(ctx, func(gctx workflow.Context) {
			defer func() { pending-- }()
			o := opts
			o.Summary = "notify " + event + " " + req.QuestionID
			err := workflow.ExecuteActivity(workflow.WithActivityOptions(gctx, o), activities.NotifyName, req).Get(gctx, nil)
			if err == nil {
				return
			}
			workflow.GetLogger(gctx).Warn("notification given up", "question", req.QuestionID, "event", event, "error", err)
			req.GiveUp = true
			o.ScheduleToCloseTimeout, o.Summary = time.Hour, "notification given up: "+event+" "+req.QuestionID
			_ = workflow.ExecuteActivity(workflow.WithActivityOptions(gctx, o), activities.NotifyName, req).Get(gctx, nil)
		})
	}
	deliver(activities.NotifyOpened, NotifyClosed{})

	var closed *NotifyClosed
	sig := workflow.GetSignalChannel(ctx, NotifyClosedSignal)
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(sig, func(c workflow.ReceiveChannel, _ bool) {
		var v NotifyClosed
		c.Receive(ctx, &v)
		closed = &v
	})
	if set.After > 0 {
		sel.AddFuture(workflow.NewTimerWithOptions(tctx, set.After, workflow.TimerOptions{Summary: "notify if still open"}), func(workflow.Future) {
			deliver(activities.NotifyAged, NotifyClosed{})
		})
	}
	giveUp := false
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, notifyCloseWait, workflow.TimerOptions{Summary: "the question never closed"}), func(workflow.Future) {
		giveUp = true
	})
	for closed == nil && !giveUp {
		sel.Select(ctx)
	}
	cancel()
	if closed != nil {
		deliver(closed.Event, *closed)
	}
	return workflow.Await(ctx, func() bool { return pending == 0 })
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

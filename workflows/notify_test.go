package workflows_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// dedupReceiver is a webhook receiver as the docs ask one to be: it checks
// each signature, processes each event id once and answers 2xx to a
// repeat. refuse says, per event and post number (from 1), whether to
// answer 500 instead, before processing anything.
type dedupReceiver struct {
	t      *testing.T
	secret []byte
	refuse func(event string, n int) bool

	mu        sync.Mutex
	posts     map[string]int // event id -> posts received
	processed []activities.NotifyRequest
}

func (rc *dedupReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := activities.VerifyWebhook(rc.secret, r.Header.Get(activities.HeaderTimestamp), r.Header.Get(activities.HeaderSignature), body, time.Now(), time.Minute); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var n struct {
		Agentsaga activities.NotifyRequest `json:"agentsaga"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.Header.Get(activities.HeaderEventID)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.posts[id]++
	if rc.refuse(n.Agentsaga.Event, rc.posts[id]) {
		http.Error(w, "receiver restarting", http.StatusInternalServerError)
		return
	}
	for _, p := range rc.processed {
		if p.Key == id {
			w.WriteHeader(http.StatusOK) // a repeat: acknowledged, not processed again
			return
		}
	}
	rc.processed = append(rc.processed, n.Agentsaga)
	w.WriteHeader(http.StatusNoContent)
}

func (rc *dedupReceiver) events() (processed []activities.NotifyRequest, posts map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	posts = map[string]int{}
	for k, v := range rc.posts {
		posts[k] = v
	}
	return append([]activities.NotifyRequest(nil), rc.processed...), posts
}

func notifyHarness(t *testing.T, refuse func(event string, n int) bool) (*harness, *dedupReceiver, func() *activities.Webhook) {
	h := newHarness(t)
	rc := &dedupReceiver{t: t, secret: []byte("webhook-secret-0123456789"), refuse: refuse, posts: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	return h, rc, func() *activities.Webhook {
		return &activities.Webhook{URL: srv.URL + "/hooks/T000/B000/secret-path", Secret: rc.secret, After: time.Hour}
	}
}

func notifyInput(hook *activities.Webhook) workflows.NotifyInput {
	set := activities.NotifyResult{On: true, After: hook.After, RetryFor: activities.DefaultNotifyRetryFor, MaxBackoff: activities.DefaultNotifyMaxBackoff}
	return workflows.NotifyInput{Settings: set, Request: activities.NotifyRequest{
		WorkflowID: "agent-plan:s-notify:1", QuestionID: "q1-step1-approval", Kind: workflows.QuestionApproval, Step: 1,
		Summary: "apply_refund · ord_1 · 600.00 EUR",
	}}
}

// A receiver that answers 500 to "opened" for three hours still gets it,
// once processed; "aged" arrives at its hour although "opened" was not
// delivered yet; "decided" says what was decided. On mocked time: the
// backoff doubles from a second to ten minutes and no test sleeps.
func TestNotifyDeliversEveryEventAtLeastOnce(t *testing.T) {
	var refusedUntil time.Time
	var env interface{ Now() time.Time }
	h, rc, hook := notifyHarness(t, func(event string, n int) bool {
		// opened: refused for three hours of workflow time; every other
		// event: its first two posts.
		if event == activities.NotifyOpened {
			return env.Now().Before(refusedUntil)
		}
		return n <= 2
	})
	e := h.env()
	env = e
	refusedUntil = e.Now().Add(3 * time.Hour)
	h.acts.Webhook = hook()
	in := notifyInput(h.acts.Webhook)
	e.RegisterDelayedCallback(func() {
		processed, _ := rc.events()
		require.Len(t, processed, 1, "only aged is through at 90 minutes: %+v", processed)
		require.Equal(t, activities.NotifyAged, processed[0].Event, "aged does not wait for opened")
		e.SignalWorkflow(workflows.NotifyClosedSignal, workflows.NotifyClosed{Event: activities.NotifyDecided, By: "alice", Decision: "approve"})
	}, 90*time.Minute)
	e.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: workflows.NotifyWorkflowID(in.Request.WorkflowID, in.Request.QuestionID)})
	e.ExecuteWorkflow(workflows.NotifyWorkflowName, in)
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	require.False(t, e.Now().Before(refusedUntil), "it ended only once opened was delivered")

	processed, posts := rc.events()
	byEvent := map[string]activities.NotifyRequest{}
	for _, p := range processed {
		_, dup := byEvent[p.Event]
		require.False(t, dup, "event %s processed twice", p.Event)
		byEvent[p.Event] = p
	}
	require.Len(t, byEvent, 3, "opened, aged, decided: %+v", processed)
	require.Equal(t, "approve", byEvent[activities.NotifyDecided].Decision)
	require.Equal(t, "alice", byEvent[activities.NotifyDecided].By)
	require.Greater(t, posts[byEvent[activities.NotifyOpened].Key], 10, "opened was posted again and again: %v", posts)
	for _, p := range processed {
		op, err := h.ledger.Get(context.Background(), p.Key)
		require.NoError(t, err)
		require.Equal(t, ledger.Succeeded, op.Status, "a delivered event's row clears from the exception queue")
	}
}

// A receiver that never answers 2xx: each event is posted for the retry
// period, then its ledger row says it was given up (and leaves the
// exception queue).
func TestNotifyGivesUpAfterItsPeriod(t *testing.T) {
	h, rc, hook := notifyHarness(t, func(string, int) bool { return true })
	e := h.env()
	h.acts.Webhook = hook()
	h.acts.Webhook.After, h.acts.Webhook.RetryFor = 0, 2*time.Hour
	in := notifyInput(h.acts.Webhook)
	in.Settings.After, in.Settings.RetryFor = 0, 2*time.Hour
	start := e.Now()
	e.RegisterDelayedCallback(func() {
		e.SignalWorkflow(workflows.NotifyClosedSignal, workflows.NotifyClosed{Event: activities.NotifyExpired})
	}, time.Minute)
	e.ExecuteWorkflow(workflows.NotifyWorkflowName, in)
	require.True(t, e.IsWorkflowCompleted())
	require.NoError(t, e.GetWorkflowError())
	require.GreaterOrEqual(t, e.Now().Sub(start), 2*time.Hour-activities.DefaultNotifyMaxBackoff, "posted for the whole period, less the last wait")

	processed, posts := rc.events()
	require.Empty(t, processed)
	require.Len(t, posts, 2, "opened and expired: %v", posts)
	for key := range posts {
		op, err := h.ledger.Get(context.Background(), key)
		require.NoError(t, err)
		require.Equal(t, ledger.FailedFinal, op.Status)
		require.Equal(t, activities.CodeNotifyGaveUp, op.ErrorCode)
	}
	queue, err := h.ledger.Exceptions(context.Background(), ledger.ExceptionFilter{})
	require.NoError(t, err)
	require.Empty(t, queue, "given-up notifications leave the exception queue")
}

// A plan whose worker notifies starts its question's AgentNotify workflow,
// and the decision is signalled to it with what was decided.
func TestPlanAnnouncesItsQuestionThroughAgentNotify(t *testing.T) {
	h, rc, hook := notifyHarness(t, func(string, int) bool { return false })
	e := h.env()
	h.acts.Webhook = hook()
	p := newPlan("s-announce", step("refund", "o1", 60000))
	e.RegisterDelayedCallback(func() {
		st := status(t, e)
		require.Len(t, st.Questions, 1)
		q := st.Questions[0]
		e.SignalWorkflow(workflows.SignalApprove, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "nora", Approved: false})
	}, 2*time.Hour)
	st := run(t, e, p)
	require.Equal(t, workflows.SagaFailed, st.State, st.Error)
	processed, _ := rc.events()
	events := map[string]activities.NotifyRequest{}
	for _, n := range processed {
		events[n.Event] = n
	}
	require.Contains(t, events, activities.NotifyOpened, "%+v", processed)
	require.Contains(t, events, activities.NotifyAged, "%+v", processed)
	require.Contains(t, events, activities.NotifyDecided, "%+v", processed)
	require.Equal(t, "reject", events[activities.NotifyDecided].Decision)
	require.Equal(t, "nora", events[activities.NotifyDecided].By)
}

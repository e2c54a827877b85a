package integration

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/workflows"
)

// hookPath is the secret part of the webhook's URL, as a Slack or Teams
// webhook's path is.
const hookPath = "/services/T0TEAM/B0HOOK/sEcReTwEbHoOkPaTh42"

// receiver is a webhook receiver as the docs ask one to be: it checks every
// signature and processes each event id once, answering 2xx to a repeat.
// Before processing, it answers 500 to "opened" until "aged" was
// processed; after processing the first post of "aged" it drops the
// connection, so the sender cannot know it arrived and posts it again.
type receiver struct {
	t      *testing.T
	secret []byte
	events chan notified

	mu        sync.Mutex
	posts     map[string]int // event id -> posts received
	processed map[string]int // event id -> times processed
	agedDone  bool
	bad       int
}

type notified struct {
	activities.NotifyRequest
	link       string
	openedSeen int // posts of "opened" received when this one was processed
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path != hookPath {
		http.NotFound(w, r)
		return
	}
	if err := activities.VerifyWebhook(rc.secret, r.Header.Get(activities.HeaderTimestamp), r.Header.Get(activities.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
		rc.mu.Lock()
		rc.bad++
		rc.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var n struct {
		Text      string                   `json:"text"`
		Agentsaga activities.NotifyRequest `json:"agentsaga"`
		Link      string                   `json:"link"`
	}
	if err := json.Unmarshal(body, &n); err != nil || n.Text == "" {
		http.Error(w, "not a notification", http.StatusBadRequest)
		return
	}
	id := r.Header.Get(activities.HeaderEventID)
	rc.mu.Lock()
	rc.posts[id]++
	if n.Agentsaga.Key != id || n.Agentsaga.Event == activities.NotifyOpened && !rc.agedDone {
		rc.mu.Unlock()
		http.Error(w, "restarting", http.StatusInternalServerError)
		return
	}
	rc.processed[id]++
	first := rc.processed[id] == 1
	if !first {
		rc.processed[id]-- // a repeat: acknowledged, not processed
	}
	if n.Agentsaga.Event == activities.NotifyAged {
		rc.agedDone = true
	}
	openedPosts := 0
	for k, v := range rc.posts {
		if strings.HasSuffix(k, ":"+activities.NotifyOpened) {
			openedPosts = v
		}
	}
	lose := first && n.Agentsaga.Event == activities.NotifyAged
	rc.mu.Unlock()
	if first {
		rc.events <- notified{NotifyRequest: n.Agentsaga, link: n.Link, openedSeen: openedPosts}
	}
	if lose {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// hookServer serves a receiver on a fixed loopback address that can go
// down and come back.
type hookServer struct {
	addr string
	h    http.Handler
	mu   sync.Mutex
	srv  *http.Server
}

func (s *hookServer) up(t *testing.T) {
	ln, err := net.Listen("tcp", s.addr)
	require.NoError(t, err)
	s.addr = ln.Addr().String()
	srv := &http.Server{Handler: s.h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
}

func (s *hookServer) down() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		_ = s.srv.Close()
		s.srv = nil
	}
}

// A worker with --notify-url tells a deduplicating receiver about every
// event of an approval question, at least once each: "opened" refused with
// 500 until "aged" came (so "aged" does not wait for "opened"), "aged"
// whose answer is lost (posted again, dropped by its id), the worker killed
// and replaced while the question waits, and the receiver down for 30 s
// when the question is decided. Each event is processed exactly once,
// "decided" says approve and by whom, the ledger rows end delivered, and
// the webhook's secret path is in no log line or history.
func TestWebhookDeliversEveryEventAtLeastOnce(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	dir := t.TempDir()
	bin := buildWorkerBinary(ctx, t, dir)
	sb, err := sandbox.Start(ctx, sandbox.Options{Dir: filepath.Join(dir, "sandbox")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	st, err := devstack.Start(ctx, devstack.Options{
		NoWorker: true, UIPort: -1, SandboxURL: sb.BaseURL(), Ledger: "sqlite:" + filepath.Join(dir, "ledger.db"),
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })

	rc := &receiver{t: t, secret: []byte("webhook-secret-0123456789"), posts: map[string]int{}, processed: map[string]int{}, events: make(chan notified, 16)}
	hs := &hookServer{addr: "127.0.0.1:0", h: rc}
	hs.up(t)
	t.Cleanup(hs.down)
	secretFile := filepath.Join(dir, "notify.secret")
	require.NoError(t, os.WriteFile(secretFile, append(rc.secret, '\n'), 0o600))
	args := []string{
		"--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(), "--task-queue", workflows.TaskQueue,
		"--ledger", st.LedgerDSN, "--sandbox-url", sb.BaseURL(), "--data-dir", filepath.Join(dir, "worker"), "--allow-unverified-decisions",
		"--notify-url", "http://" + hs.addr + hookPath, "--notify-secret-file", secretFile, "--notify-after", "2s",
		"--notify-max-backoff", "4s", "--notify-retry-for", "10m", "--console-url", "http://127.0.0.1:8089/", "-v",
	}
	first := startWorkerBinary(ctx, t, bin, "first", args)

	p := newPlan("it-notify", step(t, demotools.ApplyRefund, map[string]any{
		"order_id": "ord_1001", "amount_minor": 60000, "currency": "EUR", "reason": "arrived damaged",
	}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	next := func(want string) notified {
		t.Helper()
		select {
		case n := <-rc.events:
			require.Equal(t, want, n.Event, "%+v", n)
			return n
		case <-ctx.Done():
			t.Fatalf("no %q notification: %v", want, ctx.Err())
		}
		return notified{}
	}
	aged := next(activities.NotifyAged)
	require.Equal(t, run.WorkflowID, aged.WorkflowID)
	require.Contains(t, aged.Summary, "600.00 EUR")
	require.GreaterOrEqual(t, aged.openedSeen, 1, "aged came while opened was refused")
	opened := next(activities.NotifyOpened)
	require.Equal(t, "http://127.0.0.1:8089/q/"+run.WorkflowID+"/"+opened.QuestionID, strings.ReplaceAll(opened.link, "%3A", ":"), "the link opens the question in the console")

	// The worker is killed while the question waits; another takes over.
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited
	second := startWorkerBinary(ctx, t, bin, "second", args)

	// The receiver goes down for 30 s; the question is decided meanwhile.
	hs.down()
	downAt := time.Now()
	w := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	q := w.Questions[0]
	_, err = st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "nora", Approved: true})
	require.NoError(t, err)
	decidedKey := run.WorkflowID + ":" + q.ID + ":" + activities.NotifyDecided
	// Wait (on the ledger's record, not on time) until the worker tried to
	// post "decided" and failed, then keep the receiver down for 30 s.
	for {
		op, err := st.Ledger.Get(ctx, decidedKey)
		if err == nil && op.Status == ledger.Unknown && op.AttemptCount >= 2 {
			require.Contains(t, op.ErrorCode, "not_sent")
			break
		}
		require.True(t, err == nil || errors.Is(err, ledger.ErrNotFound), "%v", err)
		select {
		case <-ctx.Done():
			t.Fatalf("the worker never tried to post decided: %v", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case <-time.After(30*time.Second - time.Since(downAt)): // the outage's length, not a synchronisation
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	queue, err := st.Ledger.Exceptions(ctx, ledger.ExceptionFilter{})
	require.NoError(t, err)
	var undelivered []string
	for _, op := range queue {
		if ledger.ExceptionKind(op) == ledger.KindNotification {
			undelivered = append(undelivered, op.Key)
		}
	}
	// decided, and any event whose 2xx the killed worker never recorded,
	// wait in the exception queue as kind notification until delivered.
	require.Contains(t, undelivered, decidedKey, "the undelivered notification is in the exception queue, kind notification")
	for _, k := range undelivered {
		require.True(t, strings.HasPrefix(k, run.WorkflowID+":"+q.ID+":"), "only this question's notifications: %v", undelivered)
	}
	hs.up(t)

	decided := next(activities.NotifyDecided)
	require.Equal(t, "nora", decided.By)
	require.Equal(t, "approve", decided.Decision, "decided says what was decided")
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, final.Error)
	require.NoError(t, st.Client.GetWorkflow(ctx, workflows.NotifyWorkflowID(run.WorkflowID, q.ID), "").Get(ctx, nil), "AgentNotify ends once all is delivered")

	rc.mu.Lock()
	require.Zero(t, rc.bad, "every notification is signed")
	require.Len(t, rc.processed, 3, "opened, aged, decided: %v", rc.processed)
	for id, n := range rc.processed {
		require.Equal(t, 1, n, "event %s processed %d times", id, n)
		op, err := st.Ledger.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, ledger.Succeeded, op.Status, "event %s delivered: its row left the exception queue", id)
	}
	require.GreaterOrEqual(t, rc.posts[aged.Key], 2, "aged's lost answer made it posted again: %v", rc.posts)
	rc.mu.Unlock()
	select {
	case extra := <-rc.events:
		t.Fatalf("a notification beyond the three: %+v", extra)
	default:
	}

	// The webhook's secret path reached no log line and no history.
	secret := "sEcReTwEbHoOkPaTh42"
	require.NotContains(t, first.out.String()+second.out.String(), secret, "the workers' logs")
	for _, id := range []string{run.WorkflowID, workflows.NotifyWorkflowID(run.WorkflowID, q.ID)} {
		it := st.Client.GetWorkflowHistory(ctx, id, "", false, 0)
		for it.HasNext() {
			ev, err := it.Next()
			require.NoError(t, err)
			raw, err := protojson.Marshal(ev)
			require.NoError(t, err)
			require.NotContains(t, string(raw), secret, "history of %s", id)
		}
	}
}

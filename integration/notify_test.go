package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/internal/devstack"
	"github.com/agentsaga/agentsaga/internal/sandbox"
	"github.com/agentsaga/agentsaga/workflows"
)

// receiver is a webhook that checks every signature and counts each event
// by its id; it drops the connection of the first "aged" post after
// reading it, so its sender cannot know it arrived.
type receiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	got    map[string]int // event id -> posts
	events chan activities.NotifyRequest
	bad    int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
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
	require.NoError(rc.t, json.Unmarshal(body, &n))
	require.NotEmpty(rc.t, n.Text, "a Slack-compatible receiver shows text")
	id := r.Header.Get(activities.HeaderEventID)
	require.Equal(rc.t, n.Agentsaga.Key, id)
	rc.mu.Lock()
	rc.got[id]++
	first := rc.got[id] == 1
	rc.mu.Unlock()
	rc.events <- n.Agentsaga
	if n.Agentsaga.Event == activities.NotifyAged && first {
		// Lost answer: the post arrived, the sender never hears so.
		conn, _, err := w.(http.Hijacker).Hijack()
		require.NoError(rc.t, err)
		_ = conn.Close()
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// A worker with --notify-url tells the webhook when an approval question
// opens, when it ages past --notify-after, and when it is decided: one
// signed notification per event, through a lost answer and a worker killed
// and replaced while the question waits.
func TestWebhookGetsOneSignedNotificationPerEvent(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
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

	rc := &receiver{t: t, secret: []byte("webhook-secret-0123456789"), got: map[string]int{}, events: make(chan activities.NotifyRequest, 16)}
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)
	secretFile := filepath.Join(dir, "notify.secret")
	require.NoError(t, os.WriteFile(secretFile, append(rc.secret, '\n'), 0o600))
	args := []string{
		"--address", st.Server.FrontendAddr(), "--namespace", st.Server.Namespace(), "--task-queue", workflows.TaskQueue,
		"--ledger", st.LedgerDSN, "--sandbox-url", sb.BaseURL(), "--data-dir", filepath.Join(dir, "worker"), "--allow-unverified-decisions",
		"--notify-url", hs.URL + "/hook", "--notify-secret-file", secretFile, "--notify-after", "2s", "--ui-url", "http://ui.example",
	}
	first := startWorkerBinary(ctx, t, bin, "first", args)

	p := newPlan("it-notify", step(t, demotools.ApplyRefund, map[string]any{
		"order_id": "ord_1001", "amount_minor": 60000, "currency": "EUR", "reason": "arrived damaged",
	}))
	run, err := st.Plans.Start(ctx, p)
	require.NoError(t, err)
	next := func(want string) activities.NotifyRequest {
		t.Helper()
		select {
		case n := <-rc.events:
			require.Equal(t, want, n.Event, "%+v", n)
			return n
		case <-ctx.Done():
			t.Fatalf("no %q notification: %v", want, ctx.Err())
		}
		return activities.NotifyRequest{}
	}
	opened := next(activities.NotifyOpened)
	require.Equal(t, run.WorkflowID, opened.WorkflowID)
	require.Contains(t, opened.Summary, "600.00 EUR")
	next(activities.NotifyAged) // its answer is lost: never sent again

	// The worker is killed while the question waits; another takes over.
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	<-first.exited
	startWorkerBinary(ctx, t, bin, "second", args)

	w := waitStatus(ctx, t, st, run.WorkflowID, questionOn(1, workflows.QuestionApproval))
	q := w.Questions[0]
	_, err = st.Plans.Approve(ctx, run.WorkflowID, workflows.ApproveSignal{Step: 1, QuestionID: q.ID, Fingerprint: q.Fingerprint, By: "nora", Approved: true})
	require.NoError(t, err)
	decided := next(activities.NotifyDecided)
	require.Equal(t, "nora", decided.By)
	final, err := st.Plans.Wait(ctx, run.WorkflowID)
	require.NoError(t, err)
	require.Equal(t, workflows.SagaSucceeded, final.State, final.Error)

	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Zero(t, rc.bad, "every notification is signed")
	require.Len(t, rc.got, 3, "opened, aged, decided: %v", rc.got)
	for id, n := range rc.got {
		require.Equal(t, 1, n, "event %s posted %d times", id, n)
	}
	select {
	case extra := <-rc.events:
		t.Fatalf("a notification beyond the three: %+v", extra)
	default:
	}
}

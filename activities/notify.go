package activities

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// NotifyName is the activity that posts one notification; NotifySettingsName
// the one that tells a workflow whether and how its worker notifies.
const (
	NotifyName         = "Notify"
	NotifySettingsName = "NotifySettings"
)

// NotifyTool is the ledger's action type of a webhook notification: each
// event is a row under its own key, so a delivered event is never posted
// again and one not yet acknowledged shows in `starter exceptions`.
const NotifyTool = ledger.NotifyActionType

// Notification events.
const (
	NotifyOpened  = "opened"  // a question opened
	NotifyAged    = "aged"    // it is still open past the worker's threshold
	NotifyDecided = "decided" // a person answered it
	NotifyExpired = "expired" // it expired without an answer
)

// Delivery defaults (see Webhook.RetryFor and Webhook.MaxBackoff).
const (
	// DefaultNotifyRetryFor is how long an event is posted again until the
	// webhook acknowledges it with a 2xx.
	DefaultNotifyRetryFor = 24 * time.Hour
	// DefaultNotifyMaxBackoff is the longest wait between two posts of one
	// event; the waits double from a second up to it.
	DefaultNotifyMaxBackoff = 10 * time.Minute
)

// CodeNotifyGaveUp is the ledger error code of a notification the webhook
// never acknowledged within Webhook.RetryFor (the row is failed_final).
const CodeNotifyGaveUp = "notify_gave_up"

// MetricNotifications counts the posts of notifications by event and
// result: delivered (a 2xx), failed (posted again later), gave_up (never
// acknowledged within the retry period). A receiver that is down shows as
// failed posts and no delivered ones (deploy/prometheus/alerts.yml).
const MetricNotifications = "agentsaga_notifications_total"

// Webhook headers: the event's id (receivers process each id once: it is
// posted again until a 2xx comes back), the time it was signed and the
// signature, hex HMAC-SHA256 with the shared secret of "<timestamp>.<body>".
const (
	HeaderEventID   = "X-Agentsaga-Event-Id"
	HeaderTimestamp = "X-Agentsaga-Timestamp"
	HeaderSignature = "X-Agentsaga-Signature"
)

// Webhook is where a worker tells people that a question opened, aged, or
// was decided or expired. The zero value sends nothing.
type Webhook struct {
	// URL receives each notification as a JSON POST (Slack-compatible:
	// "text" is the message). It may itself be a credential (a Slack or
	// Teams webhook): its path and query never appear in an error, a log
	// line or the history (MaskURL).
	URL string
	// Secret signs every notification (HeaderSignature).
	Secret []byte
	// After is the age past which an open question is notified again
	// (event "aged"); zero turns it off.
	After time.Duration
	// RetryFor is how long an event not acknowledged with a 2xx is posted
	// again, with waits doubling up to MaxBackoff (zero: the defaults).
	RetryFor, MaxBackoff time.Duration
	// ConsoleURL is the operator console's base URL (`starter console`):
	// the notification's link then opens the question there,
	// {ConsoleURL}/q/{workflow}/{question}. Else UIURL, the Temporal Web
	// UI's base URL, links the plan in Namespace.
	ConsoleURL, UIURL, Namespace string
	// Client sends the requests (default: a client with a 10 s timeout).
	Client *http.Client
}

// NotifyRequest is one notification: the question, the event and the
// card's one-line summary.
type NotifyRequest struct {
	Key        string `json:"key"` // {workflow}:{question}:{event}, the event id
	Event      string `json:"event"`
	WorkflowID string `json:"workflow_id"`
	QuestionID string `json:"question_id"`
	Kind       string `json:"kind"`
	Step       int    `json:"step"`
	Summary    string `json:"summary"`
	By         string `json:"by,omitempty"` // who decided
	// Decision is what was decided, for event "decided": "approve",
	// "reject", "override" or the outcome of a resolve ("succeeded",
	// "failed", "retry").
	Decision string `json:"decision,omitempty"`
	// GiveUp asks Notify to record that the event was never acknowledged
	// within the retry period (its ledger row becomes failed_final); it
	// posts nothing. The workflow sends it once the retries ran out.
	GiveUp bool `json:"give_up,omitempty"`
}

// NotifyResult tells the workflow what the worker's webhook asks of it:
// whether notifications are on, after how long an open question is
// notified again, and how long an event is posted until acknowledged.
type NotifyResult struct {
	On         bool          `json:"on"`
	After      time.Duration `json:"after,omitempty"`
	RetryFor   time.Duration `json:"retry_for,omitempty"`
	MaxBackoff time.Duration `json:"max_backoff,omitempty"`
}

// notification is the body a webhook receives.
type notification struct {
	Text      string        `json:"text"`
	Agentsaga NotifyRequest `json:"agentsaga"`
	Link      string        `json:"link,omitempty"`
}

// settings are what the workflow needs to know of w.
func (w *Webhook) settings() NotifyResult {
	if w == nil || w.URL == "" {
		return NotifyResult{}
	}
	res := NotifyResult{On: true, After: w.After, RetryFor: w.RetryFor, MaxBackoff: w.MaxBackoff}
	if res.RetryFor <= 0 {
		res.RetryFor = DefaultNotifyRetryFor
	}
	if res.MaxBackoff <= 0 {
		res.MaxBackoff = DefaultNotifyMaxBackoff
	}
	return res
}

// NotifySettings tells the workflow whether this worker notifies, and how.
func (a *Activities) NotifySettings(context.Context) (NotifyResult, error) {
	return a.Webhook.settings(), nil
}

// Notify posts one notification to the webhook, at least once: every post
// not answered with a 2xx (refused, not reached, or whose answer was lost)
// is an error the workflow retries with backoff for the webhook's RetryFor,
// so a receiver may see an event twice and must process each event id
// (HeaderEventID) once. The event's ledger row holds what happened: a
// delivered event is never posted again (the claim replays it), one not
// acknowledged yet is unknown (listed by `starter exceptions` until it is
// delivered), one given up is failed_final with CodeNotifyGaveUp.
func (a *Activities) Notify(ctx context.Context, req NotifyRequest) (NotifyResult, error) {
	w := a.Webhook
	res := w.settings()
	if !res.On {
		return res, nil
	}
	info := activity.GetInfo(ctx)
	if req.GiveUp {
		return res, a.notifyGiveUp(ctx, req)
	}
	executor := info.ActivityID + "#" + strconv.Itoa(int(info.Attempt))
	claim, err := a.Ledger.Claim(ctx, ledger.ClaimRequest{
		Key: req.Key, ActionType: NotifyTool, RequestHash: "notify:" + req.Event, WorkflowID: req.WorkflowID,
		RunID: info.WorkflowExecution.RunID, Executor: executor, Lease: 30 * time.Second,
		Summary: redact.String("notify " + req.Event + " " + req.QuestionID),
	})
	if err != nil {
		return res, retryable(info.Attempt, ErrLedger, "claim notification %s in the ledger: %v (nothing was posted; check the ledger database)", req.Key, err)
	}
	switch claim.Verdict {
	case ledger.Replay:
		return res, nil // delivered before: never again
	case ledger.Execute, ledger.ReconcileFirst:
		// Not acknowledged yet (or never tried): post it (again); the
		// receiver drops a repeat by its event id.
	case ledger.InFlight:
		return res, retryable(info.Attempt, "NotifyInFlight", "notification %s is being posted by another attempt: %s", req.Key, claim.Reason)
	default:
		return res, final(info.Attempt, "NotifyClosed", "notification %s is not posted again: %s", req.Key, claim.Reason)
	}
	body, err := json.Marshal(notification{Text: redact.String(text(req)), Agentsaga: req, Link: w.link(req)})
	if err != nil {
		return res, err
	}
	sendErr := w.post(ctx, req.Key, body)
	done := ledger.Completion{Key: req.Key, Executor: executor, Status: ledger.Succeeded}
	result := "delivered"
	if sendErr != nil {
		// Not acknowledged: whether it arrived or not, it is posted again.
		done.Status, done.ErrorCode = ledger.Unknown, string(tool.KindOf(sendErr))+":"+tool.CodeOf(sendErr)
		result = "failed"
	}
	count(ctx, req.Event, result)
	if _, err := a.Ledger.Complete(ctx, done); err != nil {
		return res, retryable(info.Attempt, ErrLedger, "record notification %s: %v", req.Key, err)
	}
	if sendErr != nil {
		return res, retryable(info.Attempt, "NotifyNotAcknowledged",
			"the webhook did not acknowledge notification %s (%s); it is posted again with backoff for %v after the first try (receivers process each %s once)",
			req.Key, w.MaskError(sendErr), res.RetryFor, HeaderEventID)
	}
	return res, nil
}

// notifyGiveUp records that req's event was never acknowledged.
func (a *Activities) notifyGiveUp(ctx context.Context, req NotifyRequest) error {
	_, err := a.Ledger.Transition(ctx, ledger.Transition{
		Key: req.Key, From: []ledger.Status{ledger.Unknown, ledger.Pending, ledger.InProgress},
		Status: ledger.FailedFinal, ErrorCode: CodeNotifyGaveUp,
	})
	switch {
	case errors.Is(err, ledger.ErrTransition), errors.Is(err, ledger.ErrNotFound):
		return nil // delivered after all, or never claimed
	case err != nil:
		return retryable(activity.GetInfo(ctx).Attempt, ErrLedger, "record notification %s as given up: %v", req.Key, err)
	}
	count(ctx, req.Event, "gave_up")
	return nil
}

// count adds one post of event with result to MetricNotifications.
func count(ctx context.Context, event, result string) {
	activity.GetMetricsHandler(ctx).WithTags(map[string]string{"event": event, "result": result}).Counter(MetricNotifications).Inc(1)
}

// post signs body and sends it to the webhook under key.
func (w *Webhook) post(ctx context.Context, key string, body []byte) error {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	hc := w.Client
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	c := httptool.New(w.URL, hc)
	_, err := c.Raw(ctx, httptool.Request{Method: http.MethodPost, Key: key, Body: json.RawMessage(body), Header: http.Header{
		HeaderEventID:   {key},
		HeaderTimestamp: {ts},
		HeaderSignature: {sign(w.Secret, ts, body)},
	}})
	return err
}

// MaskURL is u with its path, query and fragment replaced by "/…": what
// may be shown of a URL that is itself a secret (a Slack or Teams webhook,
// a token in the query). Userinfo is dropped too. A URL that does not
// parse is shown as "(a URL)".
func MaskURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" || p.Host == "" {
		return "(a URL)"
	}
	return p.Scheme + "://" + p.Host + "/…"
}

// MaskError is err's message with every occurrence of the webhook's URL
// (as configured, as net/http prints it, or any URL on its host) masked by
// MaskURL.
func (w *Webhook) MaskError(err error) string {
	if err == nil {
		return ""
	}
	return MaskURLsIn(err.Error(), w.URL)
}

// MaskURLsIn masks in s every URL on the scheme and host of secretURL
// (whatever its path) by MaskURL, and every bare occurrence of its path
// (when longer than "/") or query by "…": a receiver may echo them.
func MaskURLsIn(s, secretURL string) string {
	if secretURL == "" {
		return s
	}
	masked := MaskURL(secretURL)
	s = strings.ReplaceAll(s, secretURL, masked)
	p, err := url.Parse(secretURL)
	if err != nil || p.Host == "" {
		return s
	}
	// Any URL on that host, up to a quote, a space or the end.
	re := regexp.MustCompile(`(?i)` + regexp.QuoteMeta(p.Scheme+"://") + `[^\s"'<>]*?` + regexp.QuoteMeta(p.Host) + `[^\s"'<>]*`)
	s = re.ReplaceAllStringFunc(s, func(m string) string {
		if m == masked {
			return m
		}
		return MaskURL(m)
	})
	for _, part := range []string{p.EscapedPath(), p.Path, p.RawQuery, p.Query().Encode()} {
		if len(part) > 1 && part != "/…" {
			s = strings.ReplaceAll(s, part, "…")
		}
	}
	return s
}

// sign is the signature of body at timestamp ts with secret.
func sign(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func (w *Webhook) link(r NotifyRequest) string {
	if w.ConsoleURL != "" {
		return fmt.Sprintf("%s/q/%s/%s", strings.TrimRight(w.ConsoleURL, "/"), url.PathEscape(r.WorkflowID), url.PathEscape(r.QuestionID))
	}
	if w.UIURL == "" {
		return ""
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", w.UIURL, url.PathEscape(w.Namespace), url.PathEscape(r.WorkflowID))
}

// text is the message a person reads.
func text(r NotifyRequest) string {
	switch r.Event {
	case NotifyOpened:
		return fmt.Sprintf("agentsaga: %s question %s waits for a person: %s (plan %s)", r.Kind, r.QuestionID, r.Summary, r.WorkflowID)
	case NotifyAged:
		return fmt.Sprintf("agentsaga: %s question %s still waits: %s (plan %s)", r.Kind, r.QuestionID, r.Summary, r.WorkflowID)
	case NotifyDecided:
		return fmt.Sprintf("agentsaga: %s question %s decided by %s: %s; %s (plan %s)", r.Kind, r.QuestionID, r.By, r.Decision, r.Summary, r.WorkflowID)
	}
	return fmt.Sprintf("agentsaga: %s question %s expired without an answer: %s (plan %s)", r.Kind, r.QuestionID, r.Summary, r.WorkflowID)
}

// VerifyWebhook checks a notification's signature as a receiver does: the
// HMAC of "<timestamp>.<body>" with secret, within maxAge of now.
func VerifyWebhook(secret []byte, timestamp, signature string, body []byte, now time.Time, maxAge time.Duration) error {
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not a unix time", HeaderTimestamp)
	}
	if age := now.Sub(time.Unix(sec, 0)); age > maxAge || age < -maxAge {
		return fmt.Errorf("notification signed %v ago, more than %v: refuse it (a replay?)", age.Round(time.Second), maxAge)
	}
	if !hmac.Equal([]byte(sign(secret, timestamp, body)), []byte(signature)) {
		return errors.New("signature does not match: wrong secret, or the body was changed")
	}
	return nil
}

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
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/ledger"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// NotifyName is the activity that tells people about a question.
const NotifyName = "Notify"

// NotifyTool is the ledger's action type of a webhook notification: each is
// an effect like a tool call's, claimed under its own key, so it is sent at
// most once per event.
const NotifyTool = "notify_webhook"

// Notification events.
const (
	NotifyOpened  = "opened"  // a question opened
	NotifyAged    = "aged"    // it is still open past the worker's threshold
	NotifyDecided = "decided" // a person answered it
	NotifyExpired = "expired" // it expired without an answer
)

// Webhook headers: the event's key (receivers may drop a repeat by it), the
// time it was signed and the signature, hex HMAC-SHA256 with the shared
// secret of "<timestamp>.<body>".
const (
	HeaderEventID   = "X-Agentsaga-Event-Id"
	HeaderTimestamp = "X-Agentsaga-Timestamp"
	HeaderSignature = "X-Agentsaga-Signature"
)

// Webhook is where a worker tells people that a question opened, aged, or
// was decided or expired. The zero value sends nothing.
type Webhook struct {
	// URL receives each notification as a JSON POST (Slack-compatible:
	// "text" is the message).
	URL string
	// Secret signs every notification (HeaderSignature).
	Secret []byte
	// After is the age past which an open question is notified again
	// (event "aged"); zero turns it off.
	After time.Duration
	// UIURL is the Temporal Web UI's base URL, for the plan's link;
	// Namespace its namespace.
	UIURL, Namespace string
	// Client sends the requests (default: a client with a 10 s timeout).
	Client *http.Client
}

// NotifyRequest is one notification: the question, the event and the
// card's one-line summary.
type NotifyRequest struct {
	Key        string `json:"key"` // {workflow}:{question}:{event}
	Event      string `json:"event"`
	WorkflowID string `json:"workflow_id"`
	QuestionID string `json:"question_id"`
	Kind       string `json:"kind"`
	Step       int    `json:"step"`
	Summary    string `json:"summary"`
	By         string `json:"by,omitempty"` // who decided
}

// NotifyResult tells the workflow what the worker's webhook asks of it:
// whether notifications are on and after how long an open question is
// notified again.
type NotifyResult struct {
	On    bool          `json:"on"`
	After time.Duration `json:"after,omitempty"`
}

// notification is the body a webhook receives.
type notification struct {
	Text      string        `json:"text"`
	Agentsaga NotifyRequest `json:"agentsaga"`
	Link      string        `json:"link,omitempty"`
}

// Notify posts one notification to the webhook, at most once per event: it
// claims the event's key in the ledger first, so a retry after the post may
// have left (a lost answer, a worker killed mid-call) never posts again,
// and only a post provably not sent (no connection) is tried again. A dead
// webhook ends in an error the workflow logs; it never holds the plan.
func (a *Activities) Notify(ctx context.Context, req NotifyRequest) (NotifyResult, error) {
	w := a.Webhook
	if w == nil || w.URL == "" {
		return NotifyResult{}, nil
	}
	res := NotifyResult{On: true, After: w.After}
	info := activity.GetInfo(ctx)
	executor := info.ActivityID + "#" + strconv.Itoa(int(info.Attempt))
	claim, err := a.Ledger.Claim(ctx, ledger.ClaimRequest{
		Key: req.Key, ActionType: NotifyTool, RequestHash: "notify:" + req.Event, WorkflowID: req.WorkflowID,
		RunID: info.WorkflowExecution.RunID, Executor: executor, Lease: 30 * time.Second,
		Summary: redact.String("notify " + req.Event + " " + req.QuestionID),
	})
	if err != nil {
		return res, fmt.Errorf("claim notification %s in the ledger: %w", req.Key, err)
	}
	if claim.Verdict != ledger.Execute {
		// Sent before, or may have been (unknown): never twice.
		return res, nil
	}
	body, err := json.Marshal(notification{Text: redact.String(text(req)), Agentsaga: req, Link: w.link(req.WorkflowID)})
	if err != nil {
		return res, err
	}
	// httptool tells a post that never left from one that may have
	// arrived, and never lets net/http resend it on its own.
	sendErr := w.post(ctx, req.Key, body)
	done := ledger.Completion{Key: req.Key, Executor: executor, Status: ledger.Succeeded}
	if sendErr != nil {
		kind := tool.KindOf(sendErr)
		done.Status, done.ErrorCode = ledgerStatus(kind), string(kind)+":"+tool.CodeOf(sendErr)
	}
	if _, err := a.Ledger.Complete(ctx, done); err != nil {
		return res, fmt.Errorf("record notification %s: %w", req.Key, err)
	}
	switch done.Status {
	case ledger.Succeeded:
		return res, nil
	case ledger.Pending:
		return res, fmt.Errorf("webhook not reached (nothing was processed; tried again): %w", sendErr)
	case ledger.FailedFinal:
		return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("webhook refused the notification (check its URL and secret): %v", sendErr), "NotifyRefused", nil)
	}
	return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf("webhook did not answer; the notification may have arrived and is not sent again: %v", sendErr), "NotifyUnknown", nil)
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

// sign is the signature of body at timestamp ts with secret.
func sign(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

func (w *Webhook) link(workflowID string) string {
	if w.UIURL == "" {
		return ""
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", w.UIURL, url.PathEscape(w.Namespace), url.PathEscape(workflowID))
}

// text is the message a person reads.
func text(r NotifyRequest) string {
	switch r.Event {
	case NotifyOpened:
		return fmt.Sprintf("agentsaga: %s question %s waits for a person: %s (plan %s)", r.Kind, r.QuestionID, r.Summary, r.WorkflowID)
	case NotifyAged:
		return fmt.Sprintf("agentsaga: %s question %s still waits: %s (plan %s)", r.Kind, r.QuestionID, r.Summary, r.WorkflowID)
	case NotifyDecided:
		return fmt.Sprintf("agentsaga: %s question %s decided by %s: %s (plan %s)", r.Kind, r.QuestionID, r.By, r.Summary, r.WorkflowID)
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

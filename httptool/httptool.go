// Package httptool is the small HTTP client every agentsaga HTTP tool uses. It
// sends JSON, puts the operation key in the Idempotency-Key header on every
// attempt, and turns what happened on the wire into a tool.Error whose Kind
// says what is known about the side effect.
//
// # Where a timeout becomes UNKNOWN
//
// Whether a request left is decided with net/http/httptrace (WroteRequest), not
// guessed from error strings:
//
//	what happened                                         kind                  code
//	----------------------------------------------------  --------------------  --------------------------
//	request could not be built, context already done,     tool.KindNotSent      not_sent
//	dial refused, TLS or connection failure before the
//	request was written
//	request written (or partly written), then timeout,    tool.KindUnknown      no_response
//	context deadline, connection reset or EOF, or the
//	response body was lost
//	any answer whose body is over MaxAnswerBytes          tool.KindUnknown      answer_too_large
//	2xx                                                   success               -
//	3xx to a write (never followed, see Redirects)        tool.KindUnknown      redirected
//	429 Too Many Requests                                 tool.KindThrottled    provider code or http_429
//	5xx                                                   tool.KindUnavailable  provider code or http_5xx
//	409 Conflict                                          tool.KindInFlight     provider code or in_flight
//	422 with a key-reuse code (ConflictCodes)             tool.KindConflict     the provider's code
//	any other 4xx (a business answer)                     tool.KindRejected     provider code or http_4xx
//
// A Retry-After header on a 429 or 5xx answer (delay-seconds or an HTTP date)
// becomes tool.Error.RetryAfter, capped at MaxRetryAfter, so the next attempt
// waits as long as the provider asked instead of hammering it.
//
// A timeout after the request left is UNKNOWN, never FAILED: the provider may
// have committed. A write error while sending is UNKNOWN as well (some bytes
// may have left), which is the safe side.
//
// The provider's error body is read as {"error":{"code":"...","message":"..."}};
// the code becomes tool.Error.Code and the cause is a *StatusError.
//
// # No hidden retries
//
// net/http's Transport silently resends a request that carries an
// Idempotency-Key header when a reused connection is closed before the answer.
// That would be a second provider call the saga never sees (and a second email
// for a provider that ignores the key), so this package never gives the
// transport a way to rewind the body, and sends the key under its lower-case
// name (the transport looks for the canonical one; the provider reads header
// names case-insensitively) so that a request without a body is not resent
// either: every attempt reaches the wire at most once, and retries are the
// workflow's decision alone.
//
// # Redirects
//
// A write never follows a redirect: net/http would turn a 301, 302 or 303
// into a GET and hand back that GET's answer as the write's result, and
// would resend a bodiless write on a 307. The provider may have acted
// before it answered 3xx, so a 3xx to a write is tool.KindUnknown (code
// "redirected"): the engine reconciles by key. A read follows redirects as
// net/http does; credentials a transport adds belong to the base URL's
// origin only (Origin, SameOrigin), never to the host a redirect names.
package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// KeyHeader is the header that carries the operation key.
const KeyHeader = "Idempotency-Key"

// CodeIdempotencyMismatch is the provider error code for a key reused with
// a different request body. It is answered with 422 and maps to
// tool.KindConflict.
const CodeIdempotencyMismatch = "idempotency_key_mismatch"

// ConflictCodes are the 422 codes that mean "this key was used before with
// other arguments" (tool.KindConflict): the Idempotency-Key mismatch of a
// Stripe-like API and the integration-key conflict of an accounting system.
var ConflictCodes = map[string]bool{CodeIdempotencyMismatch: true, "integration_key_conflict": true}

// MaxRetryAfter caps the wait a provider's Retry-After may ask for: a longer
// outage is the workflow's business (its attempts are bounded), not a reason
// to park an activity for hours.
const MaxRetryAfter = 5 * time.Minute

// MaxAnswerBytes bounds how much of a response is read. A longer body is
// not read whole, so it is no evidence of anything: the call's outcome is
// tool.KindUnknown with code CodeTooLarge, whatever the status.
const MaxAnswerBytes = 1 << 20

// CodeTooLarge is the code of an answer over MaxAnswerBytes.
const CodeTooLarge = "answer_too_large"

// Client calls one provider. The zero value is not usable: set BaseURL.
type Client struct {
	// BaseURL is the provider's root, such as http://127.0.0.1:8080/payments.
	BaseURL string
	// HTTP is the client used; nil means a client with no timeout of its
	// own (the call's context bounds it).
	HTTP *http.Client
	// Timeout, when positive, bounds one request on top of the context.
	Timeout time.Duration
	// Now is the clock Retry-After dates are read against; nil means
	// time.Now.
	Now func() time.Time
}

// New returns a Client for baseURL using hc (nil for the default).
func New(baseURL string, hc *http.Client) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), HTTP: hc}
}

// Request is one JSON call.
type Request struct {
	// Method is the HTTP method; empty means GET without a body and POST
	// with one.
	Method string
	// Path is appended to the client's BaseURL, query included.
	Path string
	// Key is sent as Idempotency-Key when not empty.
	Key string
	// Body is encoded as JSON when not nil. A json.RawMessage is sent as is.
	Body any
	// Header holds further headers, sent as given (a signature, say).
	Header http.Header
	// Write marks a request that changes something at the provider: it
	// never follows a redirect, and a 3xx answer is tool.KindUnknown. A
	// method other than GET or HEAD is a write whatever Write says.
	Write bool
}

// IsWrite reports whether r is treated as a write: Write is set or its
// method is neither GET nor HEAD.
func (r Request) IsWrite() bool {
	m := r.method()
	return r.Write || (m != http.MethodGet && m != http.MethodHead)
}

// Origin returns u's origin as RFC 6454 names it: lower-case scheme and host
// and the port, the scheme's default when u names none, such as
// "https://api.example.com:443".
func Origin(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// SameOrigin reports whether u has the origin of base (an absolute URL, such
// as a system's base URL). A transport that adds credentials adds them only
// when it does: a redirect to another host, port or scheme gets none.
func SameOrigin(base string, u *url.URL) bool {
	b, err := url.Parse(base)
	return err == nil && u != nil && b.Host != "" && Origin(b) == Origin(u)
}

// maxRedirects bounds the redirects a read follows, as net/http does.
const maxRedirects = 10

// checkRedirect is the redirect policy of one request: a write stops at the
// first 3xx (its answer is returned as is); a read follows at most
// maxRedirects, then what the client's own policy allows.
func checkRedirect(write bool, next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(r *http.Request, via []*http.Request) error {
		if write || (via[0].Method != http.MethodGet && via[0].Method != http.MethodHead) {
			return http.ErrUseLastResponse
		}
		if next != nil {
			return next(r, via)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
}

// StatusError is a provider's answer other than 2xx.
type StatusError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the provider's machine-readable reason, if it gave one,
	// masked by redact.String.
	Code string
	// Message is the provider's explanation, if it gave one, masked by
	// redact.String.
	Message string
	// Body is the response body (bounded), masked by redact.JSON; nil when
	// it was not JSON.
	Body json.RawMessage
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("provider answered %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// StatusOf returns the HTTP status of the provider's answer carried by err,
// or 0 when the provider did not answer.
func StatusOf(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

// Do sends req and decodes a 2xx JSON answer into out (when out is not nil).
// Every failure is a *tool.Error whose kind follows the package table.
func (c *Client) Do(ctx context.Context, req Request, out any) error {
	raw, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	if out == nil || len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		// The provider answered 2xx: the effect happened, but we cannot read
		// what it was. Only a lookup can tell the id.
		return tool.Fail(tool.KindUnknown, "bad_response",
			fmt.Errorf("%s: provider answered 2xx with a body that is not the expected JSON (%s): reconcile by key to learn the result", redact.String(req.method()+" "+req.Path), redact.String(err.Error())))
	}
	return nil
}

// Raw is like Do but returns the 2xx body as is.
func (c *Client) Raw(ctx context.Context, req Request) (json.RawMessage, error) {
	return c.do(ctx, req)
}

func (r Request) method() string {
	if r.Method != "" {
		return r.Method
	}
	if r.Body != nil {
		return http.MethodPost
	}
	return http.MethodGet
}

func (c *Client) do(ctx context.Context, req Request) (json.RawMessage, error) {
	method, what := req.method(), redact.String(req.method()+" "+req.Path)
	var body []byte
	if req.Body != nil {
		var err error
		if rm, ok := req.Body.(json.RawMessage); ok {
			body = rm
		} else if body, err = json.Marshal(req.Body); err != nil {
			return nil, tool.Fail(tool.KindNotSent, "bad_request", fmt.Errorf("%s: encode the request body: %w", what, err))
		}
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	var (
		mu    sync.Mutex
		wrote bool
	)
	trace := &httptrace.ClientTrace{
		// WroteRequest fires once the request (headers and body) has been
		// handed to the connection, or writing it failed part way. Either way
		// bytes may have reached the provider.
		WroteRequest: func(httptrace.WroteRequestInfo) {
			mu.Lock()
			wrote = true
			mu.Unlock()
		},
	}
	hreq, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, c.BaseURL+req.Path, bytes.NewReader(body))
	if err != nil {
		return nil, tool.Fail(tool.KindNotSent, "bad_request", fmt.Errorf("%s: build the request: %w", what, err))
	}
	if body == nil {
		hreq.Body, hreq.ContentLength = http.NoBody, 0
	} else {
		hreq.Header.Set("Content-Type", "application/json")
	}
	// No GetBody: the transport must not resend this request on its own (see
	// the package doc).
	hreq.GetBody = nil
	hreq.Header.Set("Accept", "application/json")
	for name, vs := range req.Header {
		hreq.Header[name] = vs
	}
	if req.Key != "" {
		// Stored under the lower-case name, which the wire carries the same
		// (header names are case-insensitive): net/http resends, on its
		// own, a request without a body whose headers hold the canonical
		// "Idempotency-Key" when a reused connection closes before the
		// answer, and that resend would be a call the saga never sees.
		hreq.Header[strings.ToLower(KeyHeader)] = []string{req.Key}
	}
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	write := req.IsWrite()
	hc.CheckRedirect = checkRedirect(write, hc.CheckRedirect)
	resp, err := hc.Do(hreq)
	mu.Lock()
	left := wrote
	mu.Unlock()
	if err != nil {
		if !left {
			return nil, tool.Fail(tool.KindNotSent, "not_sent",
				fmt.Errorf("%s: the request never left (%w): it is safe to send again", what, err))
		}
		return nil, tool.Fail(tool.KindUnknown, "no_response",
			fmt.Errorf("%s: the request left but no answer came back (%w): the outcome is unknown, reconcile by key before sending again", what, err))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return nil, tool.Fail(tool.KindUnknown, "no_response",
			fmt.Errorf("%s: the provider answered %d but the body was lost (%w): the outcome is unknown, reconcile by key", what, resp.StatusCode, err))
	}
	if len(raw) > MaxAnswerBytes {
		// Only a whole answer is evidence: a cut one is neither a result,
		// nor found, nor absent.
		return nil, tool.Fail(tool.KindUnknown, CodeTooLarge,
			fmt.Errorf("%s: the provider answered %d with a body over the limit of %d bytes, which was not read whole: the outcome is unknown, reconcile by key (or ask the provider for a smaller answer)", what, resp.StatusCode, MaxAnswerBytes))
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return raw, nil
	}
	if write && resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return nil, tool.Fail(tool.KindUnknown, "redirected",
			fmt.Errorf("%s: the provider answered %d (a redirect) to a write, which is never followed: the provider may have acted, so the outcome is unknown, reconcile by key", what, resp.StatusCode))
	}
	err = classify(what, resp.StatusCode, raw)
	var te *tool.Error
	if errors.As(err, &te) && (te.Kind == tool.KindThrottled || te.Kind == tool.KindUnavailable) {
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		te.RetryAfter = RetryAfter(resp.Header.Get("Retry-After"), now())
	}
	return nil, err
}

// RetryAfter reads a Retry-After header value: delay-seconds ("120") or an
// HTTP date, read against now. It returns zero for an empty, unreadable,
// negative or past value, and at most MaxRetryAfter.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	switch {
	case d <= 0:
		return 0
	case d > MaxRetryAfter:
		return MaxRetryAfter
	}
	return d
}

// classify maps a non-2xx answer to a tool error. What the provider wrote
// (code, message, body) is masked by the redact package before it is kept:
// providers echo card numbers and tokens in their errors, and these texts go
// to the status, the history and the logs.
func classify(what string, status int, raw []byte) error {
	se := &StatusError{Status: status, Body: redact.JSON(raw)}
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &env) == nil {
		se.Code, se.Message = redact.String(env.Error.Code), redact.String(env.Error.Message)
	} else {
		se.Body = nil
	}
	code := se.Code
	if code == "" {
		code = fmt.Sprintf("http_%d", status)
	}
	err := fmt.Errorf("%s: %w", what, se)
	switch {
	case status == http.StatusTooManyRequests:
		return tool.Fail(tool.KindThrottled, code, fmt.Errorf("%w: slow down and retry later", err))
	case status >= 500:
		return tool.Fail(tool.KindUnavailable, code, fmt.Errorf("%w: the provider is unavailable, retry later (reconcile first for writes)", err))
	case status == http.StatusConflict:
		if se.Code == "" {
			code = "in_flight"
		}
		return tool.Fail(tool.KindInFlight, code, fmt.Errorf("%w: the same key is still being processed, retry later", err))
	case status == http.StatusUnprocessableEntity && ConflictCodes[se.Code]:
		return tool.Fail(tool.KindConflict, code, fmt.Errorf("%w: this key was used with other arguments, use the original arguments or a new key", err))
	default:
		return tool.Fail(tool.KindRejected, code, err)
	}
}

package httptool_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/tool"
)

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestStatusMapping(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		kind   tool.Kind
		code   string
	}{
		{"429 throttled", 429, `{"error":{"code":"rate_limited","message":"slow"}}`, tool.KindThrottled, "rate_limited"},
		{"503 unavailable", 503, `oops`, tool.KindUnavailable, "http_503"},
		{"500 unavailable", 500, `{"error":{"code":"internal"}}`, tool.KindUnavailable, "internal"},
		{"409 in flight", 409, `{"error":{"code":"request_in_progress"}}`, tool.KindInFlight, "request_in_progress"},
		{"409 without code", 409, ``, tool.KindInFlight, "in_flight"},
		{"422 key mismatch", 422, `{"error":{"code":"idempotency_key_mismatch"}}`, tool.KindConflict, "idempotency_key_mismatch"},
		{"422 integration key conflict", 422, `{"error":{"code":"integration_key_conflict"}}`, tool.KindConflict, "integration_key_conflict"},
		{"422 business", 422, `{"error":{"code":"amount_too_large"}}`, tool.KindRejected, "amount_too_large"},
		{"402 business", 402, `{"error":{"code":"insufficient_funds","message":"no money"}}`, tool.KindRejected, "insufficient_funds"},
		{"404", 404, `{"error":{"code":"not_found"}}`, tool.KindRejected, "not_found"},
		{"400 without body", 400, ``, tool.KindRejected, "http_400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(answer(tc.status, tc.body))
			defer srv.Close()
			err := httptool.New(srv.URL, nil).Do(context.Background(), httptool.Request{Path: "/x", Key: "k", Body: map[string]int{"a": 1}}, nil)
			if got := tool.KindOf(err); got != tc.kind {
				t.Fatalf("kind = %s, want %s (err %v)", got, tc.kind, err)
			}
			if got := tool.CodeOf(err); got != tc.code {
				t.Fatalf("code = %q, want %q", got, tc.code)
			}
			if got := httptool.StatusOf(err); got != tc.status {
				t.Fatalf("StatusOf = %d, want %d", got, tc.status)
			}
		})
	}
}

func TestSuccessSendsKeyAndJSON(t *testing.T) {
	var gotKey, gotType, gotMethod string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey, gotType, gotMethod = r.Header.Get("Idempotency-Key"), r.Header.Get("Content-Type"), r.Method
		answer(201, `{"id":"re_1"}`)(w, r)
	}))
	defer srv.Close()
	var out struct{ ID string }
	err := httptool.New(srv.URL, nil).Do(context.Background(), httptool.Request{Path: "/v1/refunds", Key: "s:1:2:apply_refund", Body: map[string]any{"amount_minor": 12900}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != "re_1" || gotKey != "s:1:2:apply_refund" || gotType != "application/json" || gotMethod != http.MethodPost {
		t.Fatalf("id %q key %q content-type %q method %q", out.ID, gotKey, gotType, gotMethod)
	}
}

func TestUnreadable2xxIsUnknown(t *testing.T) {
	srv := httptest.NewServer(answer(200, `not json`))
	defer srv.Close()
	var out struct{ ID string }
	err := httptool.New(srv.URL, nil).Do(context.Background(), httptool.Request{Path: "/x", Body: map[string]int{}}, &out)
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("kind = %s, want unknown: %v", tool.KindOf(err), err)
	}
}

func TestDialRefusedIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = httptool.New("http://"+addr, nil).Do(context.Background(), httptool.Request{Path: "/x", Key: "k", Body: map[string]int{}}, nil)
	if tool.KindOf(err) != tool.KindNotSent {
		t.Fatalf("kind = %s, want not_sent: %v", tool.KindOf(err), err)
	}
}

func TestCancelledBeforeSendIsNotSent(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := httptool.New(srv.URL, nil).Do(ctx, httptool.Request{Path: "/x", Body: map[string]int{}}, nil)
	if tool.KindOf(err) != tool.KindNotSent || hits.Load() != 0 {
		t.Fatalf("kind = %s hits %d, want not_sent and 0: %v", tool.KindOf(err), hits.Load(), err)
	}
}

func TestConnectionDroppedAfterSendIsUnknownAndNeverResent(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		_, _ = io.ReadAll(r.Body)
		if n == 1 {
			answer(200, `{}`)(w, r) // leaves a keep-alive connection to reuse
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	c := httptool.New(srv.URL, srv.Client())
	if err := c.Do(context.Background(), httptool.Request{Path: "/x", Key: "k", Body: map[string]int{}}, nil); err != nil {
		t.Fatal(err)
	}
	err := c.Do(context.Background(), httptool.Request{Path: "/x", Key: "k", Body: map[string]int{"a": 1}}, nil)
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("kind = %s, want unknown: %v", tool.KindOf(err), err)
	}
	// net/http resends a keyed request on a reused connection unless told
	// not to; the provider must have seen exactly one second request.
	if got := hits.Load(); got != 2 {
		t.Fatalf("provider saw %d requests, want 2 (a hidden transport retry happened)", got)
	}
}

// A keyed write without a body (a DELETE, a POST of nothing) is never resent
// by the transport either: net/http takes any request with no body and an
// Idempotency-Key header as safe to resend on a reused connection.
func TestBodilessKeyedWriteIsNeverResent(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		if n == 1 {
			answer(200, `{}`)(w, r) // leaves a keep-alive connection to reuse
			return
		}
		if r.Header.Get(httptool.KeyHeader) != "k" {
			t.Errorf("the key did not arrive: %v", r.Header)
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	c := httptool.New(srv.URL, srv.Client())
	if err := c.Do(context.Background(), httptool.Request{Path: "/x"}, nil); err != nil {
		t.Fatal(err)
	}
	err := c.Do(context.Background(), httptool.Request{Method: http.MethodDelete, Path: "/x", Key: "k"}, nil)
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("kind = %s, want unknown: %v", tool.KindOf(err), err)
	}
	if got := hits.Load(); got != 2 {
		t.Fatalf("provider saw %d requests, want 2 (a hidden transport retry happened)", got)
	}
}

func TestTimeoutAfterSendIsUnknown(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }() // the request reached the provider; give up waiting
	err := httptool.New(srv.URL, nil).Do(ctx, httptool.Request{Path: "/x", Key: "k", Body: map[string]int{}}, nil)
	if tool.KindOf(err) != tool.KindUnknown {
		t.Fatalf("kind = %s, want unknown: %v", tool.KindOf(err), err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error should wrap the cause: %v", err)
	}
}

func TestClientTimeoutAfterSendIsUnknown(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	c := httptool.New(srv.URL, nil)
	c.Timeout = time.Second // the handler never answers: the deadline fires after the send (a local dial takes far less)
	err := c.Do(context.Background(), httptool.Request{Path: "/x", Key: "k", Body: map[string]int{}}, nil)
	if tool.KindOf(err) != tool.KindUnknown || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("kind = %s, want unknown with deadline exceeded: %v", tool.KindOf(err), err)
	}
}

func TestRetryAfterOnThrottleAndOutage(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		status int
		header string
		want   time.Duration
	}{
		{"503 seconds", 503, "120", 2 * time.Minute},
		{"429 HTTP date", 429, now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"503 capped", 503, "86400", httptool.MaxRetryAfter},
		{"429 date capped", 429, now.Add(3 * time.Hour).Format(http.TimeFormat), httptool.MaxRetryAfter},
		{"503 date in the past", 503, now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"503 garbage", 503, "soon", 0},
		{"503 negative", 503, "-5", 0},
		{"503 without header", 503, "", 0},
		{"400 ignores the header", 400, "30", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.header != "" {
					w.Header().Set("Retry-After", tc.header)
				}
				w.WriteHeader(tc.status)
			}))
			defer srv.Close()
			c := httptool.New(srv.URL, nil)
			c.Now = func() time.Time { return now }
			err := c.Do(context.Background(), httptool.Request{Path: "/x", Key: "k", Body: map[string]int{"a": 1}}, nil)
			if err == nil {
				t.Fatal("want an error")
			}
			if got := tool.RetryAfterOf(err); got != tc.want {
				t.Fatalf("RetryAfterOf = %s, want %s (err %v)", got, tc.want, err)
			}
		})
	}
}

// A provider's error that echoes a card number and a token is kept masked:
// the error text, the code, the message and the body.
func TestProviderErrorTextIsMasked(t *testing.T) {
	srv := httptest.NewServer(answer(402, `{"error":{"code":"card_4111111111111111","message":"declined card 4111 1111 1111 1111 for Bearer abc.DEF-123456"},"card":"4111111111111111"}`))
	defer srv.Close()
	err := httptool.New(srv.URL, nil).Do(context.Background(), httptool.Request{Path: "/v1/cards/4111111111111111", Body: map[string]any{}}, nil)
	if tool.KindOf(err) != tool.KindRejected {
		t.Fatalf("kind %s, want rejected: %v", tool.KindOf(err), err)
	}
	var se *httptool.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("no StatusError in %v", err)
	}
	for what, text := range map[string]string{"error": err.Error(), "code": tool.CodeOf(err), "message": se.Message, "body": string(se.Body)} {
		for _, secret := range []string{"4111111111111111", "4111 1111 1111 1111", "abc.DEF-123456"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s leaks %q: %s", what, secret, text)
			}
		}
	}
	if want := "declined card [redacted card ending 1111] for Bearer [redacted]"; se.Message != want {
		t.Errorf("message %q, want %q", se.Message, want)
	}
}

// Only a whole answer is evidence: a body over MaxAnswerBytes is not read
// whole, so a 2xx (a write's result, a lookup's item) and a 404 (an absent
// lookup answer) alike are UNKNOWN, never a result and never a status.
func TestAnswerOverTheLimitIsUnknown(t *testing.T) {
	big := `{"id":"re_1","pad":"` + strings.Repeat("x", httptool.MaxAnswerBytes) + `"}`
	for _, status := range []int{200, 201, 404, 503} {
		srv := httptest.NewServer(answer(status, big))
		_, err := httptool.New(srv.URL, nil).Raw(context.Background(), httptool.Request{Path: "/v1/refunds", Key: "k", Body: map[string]int{}})
		srv.Close()
		if tool.KindOf(err) != tool.KindUnknown || tool.CodeOf(err) != httptool.CodeTooLarge {
			t.Fatalf("status %d over the limit: kind %s code %q (%v), want unknown %s", status, tool.KindOf(err), tool.CodeOf(err), err, httptool.CodeTooLarge)
		}
		if httptool.StatusOf(err) != 0 {
			t.Fatalf("status %d over the limit carries status %d: a lookup would read it as found or absent", status, httptool.StatusOf(err))
		}
	}
	// Exactly at the limit is whole.
	at := `"` + strings.Repeat("y", httptool.MaxAnswerBytes-2) + `"`
	srv := httptest.NewServer(answer(200, at))
	defer srv.Close()
	raw, err := httptool.New(srv.URL, nil).Raw(context.Background(), httptool.Request{Path: "/x"})
	if err != nil || len(raw) != httptool.MaxAnswerBytes {
		t.Fatalf("an answer of exactly the limit: %d bytes, %v", len(raw), err)
	}
}

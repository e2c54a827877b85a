package tooltest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is one request that reached the kit's proxy, and what the provider
// answered (0 when it was not forwarded or the forward failed).
type seen struct {
	method, uri string
	header      http.Header
	body        []byte
	status      int
}

// carries reports whether key appears in the request: in its path or query
// (escaped or not), a header value or the body.
func (s seen) carries(key string) bool {
	if strings.Contains(s.uri, key) {
		return true
	}
	if u, err := url.QueryUnescape(s.uri); err == nil && strings.Contains(u, key) {
		return true
	}
	for _, vs := range s.header {
		for _, v := range vs {
			if strings.Contains(v, key) {
				return true
			}
		}
	}
	if bytes.Contains(s.body, []byte(key)) {
		return true
	}
	u, err := url.QueryUnescape(string(s.body))
	return err == nil && strings.Contains(u, key)
}

// fault is what the proxy does to the next matching request.
type fault int

const (
	none fault = iota
	// dropAnswer forwards the request, reads the provider's whole answer
	// and closes the connection without answering.
	dropAnswer
	// rejectIt answers 400 with a JSON error in the provider's place.
	rejectIt
)

// proxy is the kit's reverse proxy in front of the provider: it records
// every request and, when armed, drops an answer after the provider gave it
// or answers a business rejection itself. A fault applies to the next
// request that is not a GET or HEAD (a write), or to the next request at
// all when anyMethod is set (a read tool).
type proxy struct {
	target    string
	hc        *http.Client
	srv       *httptest.Server
	mu        sync.Mutex
	reqs      []seen
	armed     fault
	anyMethod bool
	fired     *seen
}

func newProxy(t testing.TB, target string) *proxy {
	p := &proxy{target: strings.TrimRight(target, "/"), hc: &http.Client{Timeout: time.Minute}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// URL is the base URL tools are built against: the provider's, through the
// proxy.
func (p *proxy) URL() string { return p.srv.URL }

// faultAnyMethod makes faults apply to any request, not only writes (for a
// read tool).
func (p *proxy) faultAnyMethod(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.anyMethod = on
}

// arm makes the next matching request suffer f.
func (p *proxy) arm(f fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.fired = f, nil
}

// firedOn returns the request the armed fault hit, or nil.
func (p *proxy) firedOn() *seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fired
}

// mark returns a position in the request log, for since.
func (p *proxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// since returns the requests that arrived after mark m.
func (p *proxy) since(m int) []seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]seen(nil), p.reqs[m:]...)
}

func (p *proxy) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	s := seen{method: r.Method, uri: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
	p.mu.Lock()
	f := none
	if p.armed != none && (p.anyMethod || (r.Method != http.MethodGet && r.Method != http.MethodHead)) {
		f, p.armed = p.armed, none
	}
	i := len(p.reqs)
	p.reqs = append(p.reqs, s)
	p.mu.Unlock()

	if f == rejectIt {
		p.record(i, http.StatusBadRequest, true)
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(rw, `{"error":{"code":"tooltest_rejected","message":"a business rejection answered by the tooltest proxy"}}`)
		return
	}
	status, header, answer, err := p.forward(r, body)
	p.record(i, status, f == dropAnswer)
	if f == dropAnswer || err != nil {
		// The provider answered (and, for a write, committed): the caller
		// never learns it.
		panic(http.ErrAbortHandler)
	}
	for k, v := range header {
		rw.Header()[k] = v
	}
	rw.WriteHeader(status)
	_, _ = rw.Write(answer)
}

func (p *proxy) record(i, status int, fired bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reqs[i].status = status
	if fired {
		s := p.reqs[i]
		p.fired = &s
	}
}

// forward sends the request to the provider on a context of its own (the
// provider finishes even when the caller went away) and reads the whole
// answer.
func (p *proxy) forward(r *http.Request, body []byte) (int, http.Header, []byte, error) {
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	out.Header = r.Header.Clone()
	resp, err := p.hc.Do(out)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("forward to the provider: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

// refusingURL returns a base URL on which every connection is refused: a
// loopback port that was listened on and closed.
func refusingURL(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("tooltest: find a free port to refuse connections on: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("tooltest: close the refusing port: %v", err)
	}
	return "http://" + addr
}

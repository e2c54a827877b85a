package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// keyedWritePaths are the POSTs a withholding proxy may withhold: writes
// the provider commits under the operation key.
var keyedWritePaths = map[string]bool{
	"/payments/v1/payments":   true,
	"/payments/v1/refunds":    true,
	"/crm/v1/tickets":         true,
	"/accounting/v1/invoices": true,
}

// withheld is a committed write whose answer a proxy holds back.
type withheld struct {
	worker  int
	key     string
	status  int
	release chan struct{}
}

// withholder is armed once at a time: the next keyed write through any
// proxy is forwarded, and when the provider committed it (2xx) its answer
// is held back and reported on hits.
type withholder struct {
	armed atomic.Bool
	hits  chan withheld
}

func newWithholder() *withholder { return &withholder{hits: make(chan withheld, 1)} }

// proxy forwards one worker's provider calls to the sandbox.
type proxy struct {
	worker int
	target string
	rp     *httputil.ReverseProxy
	hc     *http.Client
	w      *withholder
	srv    *http.Server
	ln     net.Listener
	done   chan struct{}
	once   sync.Once
}

// startProxy serves a proxy for worker on a free loopback port.
func startProxy(worker int, target string, w *withholder) (*proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("sandbox URL %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for worker %d's proxy: %w", worker, err)
	}
	p := &proxy{
		worker: worker, target: strings.TrimRight(target, "/"), rp: httputil.NewSingleHostReverseProxy(u),
		hc: &http.Client{Timeout: time.Minute}, w: w, ln: ln, done: make(chan struct{}),
	}
	p.rp.ErrorLog = log.New(io.Discard, "", 0) // a dropped or killed connection is the point
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's base URL, a sandbox URL for the worker.
func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) close() {
	p.once.Do(func() { close(p.done) })
	_ = p.srv.Close()
}

func (p *proxy) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !keyedWritePaths[r.URL.Path] || !p.w.armed.CompareAndSwap(true, false) {
		p.rp.ServeHTTP(rw, r)
		return
	}
	status, header, body, err := p.forward(r)
	if err != nil || status < 200 || status > 299 {
		// Nothing committed to withhold: answer as the provider did and
		// stay armed for the next write.
		p.w.armed.Store(true)
		if err != nil {
			panic(http.ErrAbortHandler)
		}
		for k, v := range header {
			rw.Header()[k] = v
		}
		rw.WriteHeader(status)
		_, _ = rw.Write(body)
		return
	}
	h := withheld{worker: p.worker, key: r.Header.Get("Idempotency-Key"), status: status, release: make(chan struct{})}
	p.w.hits <- h
	select {
	case <-h.release:
	case <-r.Context().Done(): // the worker died
	case <-p.done:
	}
	panic(http.ErrAbortHandler) // close the connection without an answer
}

// forward sends r to the sandbox on a context of its own (the provider
// finishes even when the caller goes away) and reads the whole answer.
func (p *proxy) forward(r *http.Request) (int, http.Header, []byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("read the request: %w", err)
	}
	out, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	out.Header = r.Header.Clone()
	resp, err := p.hc.Do(out)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("forward to the sandbox: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, nil
}

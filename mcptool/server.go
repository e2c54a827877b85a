package mcptool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/httptool"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// DefaultConnectTimeout bounds starting an upstream and its MCP handshake
// when Server.ConnectTimeout is zero.
const DefaultConnectTimeout = 30 * time.Second

// Version is the client version sent to upstream servers in initialize.
const Version = "0.1.0"

// Server is one upstream MCP server: a command run over stdio (Command, Args,
// Env, Dir) or a streamable HTTP endpoint (URL, Header). Exactly one of
// Command and URL is set. A Server connects on its first call, keeps one
// session for every tool that names it, and connects again after the session
// ended (the process exited, the connection broke). It is safe for
// concurrent use. Its Env and Header hold secrets: it prints without them.
type Server struct {
	// Name names the server in messages, such as "filesystem".
	Name string
	// Command is the program of a stdio server, such as "npx" or a path.
	Command string
	// Args are the command's arguments.
	Args []string
	// Env is the command's environment, as KEY=VALUE. The worker's own
	// environment is NOT passed on (it holds the worker's secrets), except
	// PATH and HOME, which a command needs to start; list anything else
	// here.
	Env []string
	// Dir is the command's working directory; empty means the worker's.
	Dir string
	// URL is the endpoint of a streamable HTTP server.
	URL string
	// Header is sent on every HTTP request (an Authorization header, say).
	Header http.Header
	// HTTPClient is the client for URL; nil means http.DefaultClient's
	// transport.
	HTTPClient *http.Client
	// ConnectTimeout bounds starting the server and the MCP handshake; zero
	// means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// WrapConnection, when set, wraps each new connection to the upstream.
	// It is for fault injection in tests (a connection that drops an answer
	// after the upstream acted); production leaves it nil.
	WrapConnection func(mcp.Connection) mcp.Connection

	mu   sync.Mutex
	cs   *mcp.ClientSession
	dead chan struct{}
	// calls counts tools/call requests handed to a connection (or whose
	// hand-over was attempted): a call that fails after this moved may
	// have reached the upstream.
	calls atomic.Int64
}

// String implements fmt.Stringer without the environment or headers.
func (s *Server) String() string { return "mcp server " + s.Name + " (env and headers masked)" }

// GoString implements fmt.GoStringer without the environment or headers.
func (s *Server) GoString() string { return s.String() }

// Close ends the session (a stdio server's process is stopped). A later call
// connects again.
func (s *Server) Close() error {
	s.mu.Lock()
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	if cs == nil {
		return nil
	}
	return cs.Close()
}

// session returns the live session, connecting when there is none.
func (s *Server) session(ctx context.Context) (*mcp.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cs != nil {
		select {
		case <-s.dead:
			s.cs = nil
		default:
			return s.cs, nil
		}
	}
	tr, err := s.transport()
	if err != nil {
		return nil, err
	}
	timeout := s.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "agentsaga", Version: Version}, nil)
	cs, err := client.Connect(cctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("mcp server %s: connect: %w: check its command or URL and that it starts", s.Name, err)
	}
	dead := make(chan struct{})
	go func() { _ = cs.Wait(); close(dead) }()
	s.cs, s.dead = cs, dead
	return cs, nil
}

func (s *Server) transport() (mcp.Transport, error) {
	var inner mcp.Transport
	switch {
	case s.Command != "" && s.URL != "":
		return nil, fmt.Errorf("mcp server %s: both a command and a URL: set one", s.Name)
	case s.Command != "":
		cmd := exec.Command(s.Command, s.Args...)
		cmd.Dir = s.Dir
		cmd.Env = append(baseEnv(), s.Env...)
		inner = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	case s.URL != "":
		hc := s.HTTPClient
		if hc == nil {
			hc = &http.Client{}
		}
		if len(s.Header) > 0 {
			base := hc.Transport
			if base == nil {
				base = http.DefaultTransport
			}
			c := *hc
			c.Transport = headerTransport{base: base, origin: s.URL, header: s.Header}
			hc = &c
		}
		// Over HTTP the call has left once its POST was written: the
		// wire, not the connection's Write, counts it (the go-sdk reports
		// a POST whose answer was lost as "rejected by transport", as if
		// it never left).
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c := *hc
		c.Transport = wireCounter{base: base, s: s}
		// A POST (a call) never follows a redirect: a 301/302/303 would
		// become a GET whose answer stands for the call's. The SDK gets the
		// 3xx as a failed POST: UNKNOWN once it was written, and the
		// engine reconciles. A GET (the event stream) follows redirects
		// without the Header, which headerTransport keeps to the URL's
		// origin.
		next := c.CheckRedirect
		c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
			if via[0].Method != http.MethodGet {
				return http.ErrUseLastResponse
			}
			if next != nil {
				return next(r, via)
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}
		inner = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &c}
	default:
		return nil, fmt.Errorf("mcp server %s: neither a command nor a URL: set one", s.Name)
	}
	return &countingTransport{inner: inner, s: s, wire: s.URL != ""}, nil
}

// wireCounter counts the POSTs of tools/call requests that were written to
// the wire, in full or in part.
type wireCounter struct {
	base http.RoundTripper
	s    *Server
}

func (w wireCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return w.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	// No GetBody: the transport must not resend a call on its own.
	r.GetBody = nil
	if !bytes.Contains(body, []byte(`"tools/call"`)) {
		return w.base.RoundTrip(r)
	}
	var once sync.Once
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { once.Do(func() { w.s.calls.Add(1) }) }}
	return w.base.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

func baseEnv() []string {
	var out []string
	for _, k := range []string{"PATH", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// headerTransport adds a server's Header (its credentials) to requests for
// the origin of its URL only: a redirect to another host, port or scheme
// gets none of them.
type headerTransport struct {
	base   http.RoundTripper
	origin string
	header http.Header
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !httptool.SameOrigin(h.origin, r.URL) {
		// Nor the URL it came from, which may hold a token in its query.
		if r.Header.Get("Referer") != "" {
			r = r.Clone(r.Context())
			r.Header.Del("Referer")
		}
		return h.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, vs := range h.header {
		r.Header[k] = vs
	}
	return h.base.RoundTrip(r)
}

// countingTransport counts the tools/call requests written, so a failed call
// can tell "never left" from "may have reached the upstream".
type countingTransport struct {
	inner mcp.Transport
	s     *Server
	wire  bool // an HTTP server: wireCounter counts instead
}

func (t *countingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if t.s.WrapConnection != nil {
		c = t.s.WrapConnection(c)
	}
	if t.wire {
		return c, nil
	}
	return &countingConn{Connection: c, s: t.s}, nil
}

type countingConn struct {
	mcp.Connection
	s *Server
}

func (c *countingConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if r, ok := m.(*jsonrpc.Request); ok && r.Method == "tools/call" {
		c.s.calls.Add(1)
	}
	return c.Connection.Write(ctx, m)
}

// call calls the upstream tool name and classifies what happened: an error is
// always a *tool.Error. A result with IsError set is returned as is (the
// caller decides what the upstream's refusal means).
func (s *Server) call(ctx context.Context, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	res, err := s.callOnce(ctx, name, args, meta)
	if tool.KindOf(err) == tool.KindNotSent && tool.CodeOf(err) == "not_sent" && ctx.Err() == nil {
		// The session broke before this call was handed over (the
		// upstream died after the previous call, and the session has not
		// noticed yet): nothing left, so one more try on a new session
		// is safe.
		res, err = s.callOnce(ctx, name, args, meta)
	}
	return res, err
}

// forget drops cs as the live session, when it still is.
func (s *Server) forget(cs *mcp.ClientSession) {
	s.mu.Lock()
	if s.cs == cs {
		s.cs = nil
	}
	s.mu.Unlock()
	_ = cs.Close()
}

func (s *Server) callOnce(ctx context.Context, name string, args any, meta mcp.Meta) (*mcp.CallToolResult, error) {
	cs, err := s.session(ctx)
	if err != nil {
		return nil, tool.Fail(tool.KindNotSent, "not_connected", fmt.Errorf("%s on %w: the call never left, it is safe to send again", name, err))
	}
	before := s.calls.Load()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err == nil {
		return res, nil
	}
	left := s.calls.Load() != before
	var we *jsonrpc.Error
	if errors.As(err, &we) && we.Code == codeRejectedByTransport {
		// The client's own error: the POST failed, before or after the
		// upstream got it. The wire count tells which.
		we = nil
	}
	if we != nil {
		// The upstream answered with a protocol error: it did not run the
		// tool (unknown tool, invalid params) or failed inside it.
		switch we.Code {
		case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidRequest:
			return nil, tool.Fail(tool.KindRejected, fmt.Sprintf("jsonrpc_%d", we.Code),
				fmt.Errorf("%s on mcp server %s refused the call: %s", name, s.Name, clip(we.Message, 300)))
		default:
			return nil, tool.Fail(tool.KindUnavailable, fmt.Sprintf("jsonrpc_%d", we.Code),
				fmt.Errorf("%s on mcp server %s failed: %s: retry later (reconcile first for writes)", name, s.Name, clip(we.Message, 300)))
		}
	}
	if !left {
		if ctx.Err() == nil {
			s.forget(cs)
		}
		return nil, tool.Fail(tool.KindNotSent, "not_sent",
			fmt.Errorf("%s on mcp server %s: the call never left (%w): it is safe to send again", name, s.Name, err))
	}
	return nil, tool.Fail(tool.KindUnknown, "no_response",
		fmt.Errorf("%s on mcp server %s: the call left but no answer came back (%w): the outcome is unknown, reconcile before sending again", name, s.Name, err))
}

// codeRejectedByTransport is the go-sdk client's own error for a request its
// transport failed to deliver (jsonrpc2.ErrRejected), which it also reports
// when an HTTP POST was written and its answer lost.
const codeRejectedByTransport = -32005

// clip masks secrets in an upstream's text (providers echo tokens and card
// numbers in their errors, and these texts reach the status, the history and
// the logs) and cuts it to n bytes.
func clip(s string, n int) string {
	s = redact.String(strings.TrimSpace(s))
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

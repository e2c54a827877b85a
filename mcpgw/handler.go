package mcpgw

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/internal/loopback"
)

// Defaults of HandlerOptions.
const (
	// DefaultSessionIdle is how long an MCP session over streamable HTTP
	// is kept without a request from its client; then it ends (its
	// Mcp-Session-Id is answered 404, and the client initializes again).
	DefaultSessionIdle = 30 * time.Minute
	// DefaultMaxSessions bounds the MCP sessions one server holds at once;
	// an initialize beyond it is answered 503.
	DefaultMaxSessions = 1000
	// DefaultEventStoreBytes bounds the events kept for streams to resume
	// (Last-Event-ID), over all sessions.
	DefaultEventStoreBytes = 10 << 20
)

// HandlerOptions configure NewHandler. The zero value is usable.
type HandlerOptions struct {
	// SessionIdle ends an MCP session that sent no request for that long.
	// Zero means DefaultSessionIdle.
	SessionIdle time.Duration
	// MaxSessions bounds the MCP sessions held at once (memory stays
	// bounded however many clients initialize). Zero means
	// DefaultMaxSessions.
	MaxSessions int
	// AllowedOrigins are the browser origins (scheme://host[:port]) let
	// in besides loopback ones and the request's own host. A request
	// with any other Origin header is refused with 403 (DNS rebinding, a
	// page of another site driving a local gateway).
	AllowedOrigins []string
	// EventStoreBytes bounds the events kept so that a client can resume
	// a broken stream with Last-Event-ID. Zero means
	// DefaultEventStoreBytes; negative turns resumption off.
	EventStoreBytes int
}

// Handler returns NewHandler(s, HandlerOptions{}).
func Handler(s *mcp.Server) http.Handler {
	h, err := NewHandler(s, HandlerOptions{})
	if err != nil {
		panic(err) // the zero options are valid
	}
	return h
}

// NewHandler returns the streamable HTTP handler of an MCP server made by
// New: one MCP session per Mcp-Session-Id, ended after o.SessionIdle
// without a request, at most o.MaxSessions at once; a stream broken off
// can be resumed (event ids, Last-Event-ID) within o.EventStoreBytes.
// Requests that reached a loopback listener must name a loopback Host
// (the SDK's DNS-rebinding check), and a request with an Origin header
// must come from a loopback origin, the request's own host or one of
// o.AllowedOrigins. The handler has no authentication: serve it on
// loopback, or behind a proxy that authenticates.
func NewHandler(s *mcp.Server, o HandlerOptions) (http.Handler, error) {
	if o.SessionIdle < 0 || o.MaxSessions < 0 {
		return nil, fmt.Errorf("mcpgw: session idle %s and max sessions %d must not be negative: use 0 for the defaults", o.SessionIdle, o.MaxSessions)
	}
	if o.SessionIdle == 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	allowed := map[string]bool{}
	for _, a := range o.AllowedOrigins {
		u, err := url.Parse(a)
		if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return nil, fmt.Errorf("mcpgw: allowed origin %q is not scheme://host[:port]", a)
		}
		allowed[strings.ToLower(u.Scheme+"://"+u.Host)] = true
	}
	ho := &mcp.StreamableHTTPOptions{SessionTimeout: o.SessionIdle}
	switch {
	case o.EventStoreBytes == 0:
		es := mcp.NewMemoryEventStore(nil)
		es.SetMaxBytes(DefaultEventStoreBytes)
		ho.EventStore = es
	case o.EventStoreBytes > 0:
		es := mcp.NewMemoryEventStore(nil)
		es.SetMaxBytes(o.EventStoreBytes)
		ho.EventStore = es
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, ho)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, r.Host, allowed) {
			http.Error(w, "refused: the Origin "+quoteClip(origin)+" is neither loopback nor this server's host; a page of another site may not drive the gateway "+
				"(list it in the gateway's allowed origins if it should)", http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && sessions(s) >= o.MaxSessions {
			w.Header().Set("Retry-After", "60")
			http.Error(w, fmt.Sprintf("refused: the gateway holds %d MCP sessions, its limit: end sessions you no longer use (HTTP DELETE with their Mcp-Session-Id); idle ones end after %s",
				o.MaxSessions, o.SessionIdle), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// sessions counts the server's open sessions.
func sessions(s *mcp.Server) int {
	n := 0
	for range s.Sessions() {
		n++
	}
	return n
}

// originAllowed reports whether an Origin header may drive the gateway: a
// loopback origin, the request's own host, or an allowed one.
func originAllowed(origin, host string, allowed map[string]bool) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null", a file: page, garbage
	}
	return loopback.Host(u.Host) || strings.EqualFold(u.Host, host) || allowed[strings.ToLower(u.Scheme+"://"+u.Host)]
}

// quoteClip quotes s for a message, clipped, without control characters.
func quoteClip(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return fmt.Sprintf("%q", s)
}

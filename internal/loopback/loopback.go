// Package loopback keeps the HTTP servers of the dev stack (the Web UI, the
// codec endpoint, the sandbox providers, the metrics endpoint) from being
// driven by a web page through DNS rebinding: a request that reached a
// loopback listener must name a loopback host (localhost, 127.0.0.0/8 or
// ::1) in its Host header. A page on evil.example whose name was rebound to
// 127.0.0.1 sends Host: evil.example and is refused.
//
// It is internal: not API.
package loopback

import (
	"net"
	"net/http"
	"strings"
)

// Guard returns next behind the Host check: a request that arrived on a
// loopback address with a Host that is not a loopback name gets 403 and
// never reaches next. Requests that arrived on another address (a server
// bound to 0.0.0.0 reached from the network, in a container) pass: the
// check is for the developer's own machine.
func Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if onLoopback(r) && !Host(r.Host) {
			http.Error(w, "refused: the Host header "+clip(r.Host)+" is not this server's loopback address (localhost, 127.0.0.1 or [::1]); "+
				"open the address the server printed (a page of another site may not drive it)", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Host reports whether hostport (a Host header, with or without a port)
// names the loopback interface.
func Host(hostport string) bool {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// onLoopback reports whether the request arrived on a loopback address.
func onLoopback(r *http.Request) bool {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return true // unknown: check
	}
	tcp, ok := a.(*net.TCPAddr)
	return !ok || tcp.IP.IsLoopback()
}

func clip(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, `"`+s+`"`)
}

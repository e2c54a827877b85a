package codec

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/converter"
)

// Codec server settings.
const (
	// EnvToken is the codec server's token, for clients that call it.
	EnvToken = "AGENTSAGA_CODEC_TOKEN"
	// TokenFileName is the token file the dev stack keeps in its data
	// directory.
	TokenFileName = "codec.token"
	// SessionCookie is the cookie /login sets: it lets a browser's Web UI
	// call the codec endpoint (the UI sends cookies with includeCredentials;
	// it sends no bearer token without UI login over HTTPS).
	SessionCookie = "agentsaga_codec"
	// SessionMaxAge is how long a browser keeps the /login cookie: beyond
	// the browser session, so an operator logs in once per browser and
	// month, not once per window. /logout forgets it sooner.
	SessionMaxAge = 30 * 24 * time.Hour
	// MaxBodyBytes bounds an /encode or /decode request.
	MaxBodyBytes = 16 << 20
	// minTokenLen is the shortest token NewServer accepts.
	minTokenLen = 16
)

// corsAllowHeaders are the request headers the Web UI sends to a codec
// endpoint: its JSON content type, the namespace, and (with
// passAccessToken) the access token and its extras.
const corsAllowHeaders = "Content-Type, X-Namespace, Authorization, Authorization-Extras"

// Server serves Temporal's codec server protocol for a keyring: POST
// /encode and /decode with a JSON body {"payloads": [...]}, answered in the
// same shape (the SDK's converter.NewPayloadCodecHTTPHandler does the
// work). Every request needs the token, as "Authorization: Bearer TOKEN"
// (compared in constant time) or as the browser cookie that GET /login
// hands out after the token is typed in. A request carrying an Origin
// header is served only when that origin is allowed (the Web UI's), with
// CORS headers for it; CORS preflights are answered for allowed origins
// only. Bodies must be application/json and at most MaxBodyBytes.
type Server struct {
	codec   http.Handler
	token   []byte
	session string // cookie value: an HMAC of the token, never the token

	mu      sync.RWMutex
	origins map[string]bool
}

// NewServer returns a codec server for ring that requires token (at least
// 16 characters) and answers the Web UI at allowedOrigins (such as
// http://127.0.0.1:8233; AllowOrigins adds more later).
func NewServer(ring *Keyring, token string, allowedOrigins []string) (*Server, error) {
	if ring == nil {
		return nil, errors.New("codec: a codec server needs a keyring: load one with KeyringFile or KeyringFromEnv")
	}
	if len(token) < minTokenLen {
		return nil, fmt.Errorf("codec: the codec server token is %d characters; give at least %d (NewToken makes one)", len(token), minTokenLen)
	}
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("agentsaga codec browser session v1"))
	s := &Server{
		codec:   converter.NewPayloadCodecHTTPHandler(New(ring)),
		token:   []byte(token),
		session: hex.EncodeToString(mac.Sum(nil)),
		origins: map[string]bool{},
	}
	s.AllowOrigins(allowedOrigins...)
	return s, nil
}

// NewToken returns a random token of 32 bytes, base64url.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("codec: draw a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// AllowOrigins allows more origins (scheme://host:port, as a browser sends
// it in Origin). An origin on a loopback address also allows the same port
// on the other loopback spellings (127.0.0.1, localhost, [::1]).
func (s *Server) AllowOrigins(origins ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range origins {
		o = strings.TrimRight(strings.TrimSpace(o), "/")
		if o == "" {
			continue
		}
		s.origins[o] = true
		if u, err := url.Parse(o); err == nil && u.Port() != "" {
			switch u.Hostname() {
			case "127.0.0.1", "localhost", "::1":
				for _, h := range []string{"127.0.0.1", "localhost", "[::1]"} {
					s.origins[u.Scheme+"://"+h+":"+u.Port()] = true
				}
			}
		}
	}
}

func (s *Server) allowed(origin string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.origins[origin]
}

// String never shows the token.
func (s *Server) String() string { return "codec.Server(token masked)" }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch {
	case r.URL.Path == "/login":
		s.login(w, r)
		return
	case r.URL.Path == "/logout":
		s.logout(w, r)
		return
	case strings.HasSuffix(r.URL.Path, "/encode") || strings.HasSuffix(r.URL.Path, "/decode"):
	default:
		http.Error(w, "not found: the codec server answers POST /encode and POST /decode (and /login for a browser)", http.StatusNotFound)
		return
	}
	origin := r.Header.Get("Origin")
	if origin != "" {
		w.Header().Add("Vary", "Origin")
		if !s.allowed(origin) {
			http.Error(w, "forbidden: origin "+origin+" may not call this codec server", http.StatusForbidden)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Set("Access-Control-Allow-Credentials", "true")
	}
	if r.Method == http.MethodOptions {
		if origin == "" || r.Header.Get("Access-Control-Request-Method") == "" {
			http.Error(w, "an OPTIONS request here must be a CORS preflight", http.StatusBadRequest)
			return
		}
		w.Header().Set("Access-Control-Allow-Methods", "POST")
		w.Header().Set("Access-Control-Allow-Headers", corsAllowHeaders)
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST, OPTIONS")
		http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
		return
	}
	if !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentsaga codec"`)
		http.Error(w, "unauthorized: send Authorization: Bearer <codec token>, or open /login in this browser", http.StatusUnauthorized)
		return
	}
	if !isJSON(r.Header.Get("Content-Type")) {
		http.Error(w, "unsupported media type: send Content-Type: application/json", http.StatusUnsupportedMediaType)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	s.codec.ServeHTTP(w, r)
}

// authorized checks the bearer token or the session cookie in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, ok := strings.Cut(auth, " ")
		if ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), s.token) == 1 {
			return true
		}
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		return subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.session)) == 1
	}
	return false
}

func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// sameOrigin reports whether r comes from a page of this server (or from
// no page at all: no Origin header).
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

const loginPage = `<!doctype html>
<html><head><meta charset="utf-8"><title>agentsaga codec</title></head>
<body>
<h1>agentsaga codec server</h1>
<p>%s</p>
<form method="post" action="/login">
<label>Codec token <input name="token" type="password" autocomplete="off" size="50"></label>
<button type="submit">Let this browser decode</button>
</form>
<p>The token is in <code>&lt;data-dir&gt;/codec.token</code> of <code>worker --dev</code>
(or in AGENTSAGA_CODEC_TOKEN). The Web UI then shows decoded payloads; open it at the
address the worker printed.</p>
</body></html>
`

// login serves a form (GET) that, posted with the right token from this
// server's own page, sets the session cookie the Web UI sends along.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, loginPage, "Type the codec token to let the Temporal Web UI in this browser decode payloads.")
	case http.MethodPost:
		if !sameOrigin(r) {
			http.Error(w, "forbidden: log in from this server's own /login page", http.StatusForbidden)
			return
		}
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if mt != "application/x-www-form-urlencoded" {
			http.Error(w, "unsupported media type: post the /login form", http.StatusUnsupportedMediaType)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4096)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad request: the form could not be read", http.StatusBadRequest)
			return
		}
		if subtle.ConstantTimeCompare([]byte(strings.TrimSpace(r.PostForm.Get("token"))), s.token) != 1 {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, loginPage, "That is not the codec token. Try again.")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: s.session, Path: "/", HttpOnly: true,
			MaxAge: int(SessionMaxAge / time.Second), SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><meta charset="utf-8"><title>agentsaga codec</title></head><body><h1>Done</h1><p>The Temporal Web UI in this browser now decodes payloads. Reload its pages.</p><form method="post" action="/logout"><button type="submit">Forget it again</button></form></body></html>`)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// logout clears the session cookie (POST from this server's page).
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 4096))
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "this browser no longer decodes payloads")
}

// LoadToken returns the token in the file at path, trimmed.
func LoadToken(path string) (string, error) {
	f, err := readSmall(path, 4096)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(f))
	if tok == "" {
		return "", fmt.Errorf("codec: the token file %s is empty", path)
	}
	return tok, nil
}

// LoadOrCreateToken reads the token file at path or, when there is none,
// writes a new random token there with mode 0600.
func LoadOrCreateToken(path string) (string, error) {
	tok, err := LoadToken(path)
	if err == nil {
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if tok, err = NewToken(); err != nil {
		return "", err
	}
	if err := writeSecretFile(path, []byte(tok+"\n")); err != nil {
		return "", err
	}
	return tok, nil
}

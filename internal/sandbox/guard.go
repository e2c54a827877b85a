package sandbox

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Admin API token.
const (
	// EnvToken is the admin API's token: `sandbox serve` uses it instead of
	// generating one, and NewClient sends it to a sandbox of another process.
	EnvToken = "AGENTSAGA_SANDBOX_TOKEN"
	// TokenFileName is the token file the dev stack (and `sandbox serve`)
	// keeps in the data directory, mode 0600.
	TokenFileName = "sandbox-admin.token"
	// TokenHeader carries the token; "Authorization: Bearer TOKEN" works too.
	TokenHeader = "X-Admin-Token"
)

// NewToken returns a random admin token (32 bytes, base64url).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("sandbox: draw an admin token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// WriteTokenFile writes token to path with mode 0600 (replacing the file
// through a temporary one in the same directory).
func WriteTokenFile(path, token string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("sandbox: create a file next to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("sandbox: make %s private: %w", tmp.Name(), err)
	}
	if _, err := tmp.WriteString(token + "\n"); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("sandbox: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("sandbox: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("sandbox: put %s in place: %w", path, err)
	}
	return nil
}

// ReadTokenFile reads a token file written by WriteTokenFile.
func ReadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("sandbox: open the admin token file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("sandbox: read the admin token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("sandbox: the admin token file %s is empty", path)
	}
	return tok, nil
}

// tokens holds the tokens of the sandboxes started in this process, by base
// URL, so NewClient finds a token without being handed one.
var tokens = struct {
	sync.Mutex
	byBase map[string]string
}{byBase: map[string]string{}}

func registerToken(base, token string) {
	tokens.Lock()
	defer tokens.Unlock()
	tokens.byBase[base] = token
}

func forgetToken(base string) {
	tokens.Lock()
	defer tokens.Unlock()
	delete(tokens.byBase, base)
}

func tokenFor(base string) string {
	tokens.Lock()
	defer tokens.Unlock()
	return tokens.byBase[base]
}

// guard wraps the sandbox's handler: a request from a browser page of
// another origin (an Origin header that is not this server's) is refused
// with 403 on every route, and the admin API also needs the token and, for
// POST, PUT and PATCH, a JSON body (so no HTML form can reach it).
func (s *Sandbox) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r.Host) {
			writeError(w, http.StatusForbidden, "cross_origin", "requests from another origin ("+clipText(o, 100)+") are refused: call the sandbox from a program, not from a web page")
			return
		}
		if r.URL.Path == "/admin" || strings.HasPrefix(r.URL.Path, "/admin/") {
			if !s.adminAuthorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentsaga sandbox admin"`)
				writeError(w, http.StatusUnauthorized, "unauthorized", "the admin API needs the sandbox's token in "+TokenHeader+" or Authorization: Bearer (env "+EnvToken+"; worker --dev keeps it in <data-dir>/"+TokenFileName+")")
				return
			}
			switch r.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch:
				if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
					writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send Content-Type: application/json")
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Sandbox) adminAuthorized(r *http.Request) bool {
	got := r.Header.Get(TokenHeader)
	if got == "" {
		if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = strings.TrimSpace(tok)
		}
	}
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.token)) == 1
}

// sameOrigin reports whether the Origin header names the host the request
// was sent to.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, host)
}

func clipText(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

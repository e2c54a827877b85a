package redact

import (
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// keyPattern matches API keys of well-known shapes. Group 1 is the part kept
// (the prefix that says what kind of key it was); the rest is masked.
var keyPattern = regexp.MustCompile(`` +
	// Stripe secret, restricted and publishable keys, webhook secrets.
	`((?:sk|rk|pk)_(?:live|test)_)[A-Za-z0-9]{8,}` +
	`|(whsec_)[A-Za-z0-9]{16,}` +
	// Slack tokens.
	`|(xox[abposr]-)[A-Za-z0-9-]{10,}` +
	// GitHub tokens.
	`|(gh[pousr]_)[A-Za-z0-9]{20,}` +
	`|(github_pat_)[A-Za-z0-9_]{20,}` +
	// AWS access key ids.
	`|((?:AKIA|ASIA))[A-Z0-9]{16}` +
	// Google API keys.
	`|(AIza)[0-9A-Za-z_-]{35}` +
	// OpenAI- and Anthropic-style keys (sk-..., sk-proj-..., sk-ant-...).
	`|(sk-)[A-Za-z0-9_-]{20,}` +
	// JSON web tokens: header.payload.signature, base64url.
	`|()eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*`)

// keyHints are substrings every match of keyPattern holds: texts without
// any skip the regular expression.
var keyHints = []string{"_live_", "_test_", "whsec_", "xox", "gh", "github_pat_", "AKIA", "ASIA", "AIza", "sk-", "eyJ"}

// rewriteKeys masks every API key and JSON web token in s. A key must not
// follow a letter or digit (so "task_live_x" is not a Stripe key).
func rewriteKeys(s string) (string, bool) {
	if !containsAny(s, keyHints) {
		return s, false
	}
	return rewriteMatches(s, keyPattern, func(m []int) (int, int, string, bool) {
		if m[0] > 0 && isAlnum(s[m[0]-1]) {
			return 0, 0, "", false
		}
		for g := 1; 2*g < len(m); g++ {
			if m[2*g] >= 0 {
				if m[2*g] == m[2*g+1] {
					return m[0], m[1], "[redacted token]", true
				}
				return m[0], m[1], s[m[2*g]:m[2*g+1]] + Mask, true
			}
		}
		return m[0], m[1], Mask, true
	})
}

// bearerPattern matches "Bearer <token>" in any case. Group 1 is the token.
var bearerPattern = regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/=-]+)`)

// rewriteBearer masks the token of every "Bearer <token>". To leave English
// alone ("the bearer receives"), a token is at least 8 characters and holds a
// digit, a capital or punctuation, or is at least 24 characters long.
func rewriteBearer(s string) (string, bool) {
	if !containsFold(s, "bearer") {
		return s, false
	}
	return rewriteMatches(s, bearerPattern, func(m []int) (int, int, string, bool) {
		tok := s[m[2]:m[3]]
		if !tokenLike(tok) {
			return 0, 0, "", false
		}
		return m[2], m[3], Mask, true
	})
}

func tokenLike(tok string) bool {
	if len(tok) >= 24 {
		return true
	}
	if len(tok) < 8 {
		return false
	}
	return strings.IndexFunc(tok, func(r rune) bool { return r < 'a' || r > 'z' }) >= 0
}

// authPattern matches the value of an Authorization header or field:
// "Authorization: Basic dXNlcg==", "authorization=xyz", `"Authorization":
// "Token abc"`. Group 1 is an optional scheme, group 2 the credential.
var authPattern = regexp.MustCompile(`(?i)\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?` +
	`(?:(basic|bearer|digest|token|apikey|api-key|negotiate|ntlm|hoba|mutual|aws4-hmac-sha256)\s+)?` +
	`([^\s"',;&]+)`)

// rewriteAuthorization masks the credential of every Authorization value,
// keeping its scheme.
func rewriteAuthorization(s string) (string, bool) {
	if !containsFold(s, "authorization") {
		return s, false
	}
	return rewriteMatches(s, authPattern, func(m []int) (int, int, string, bool) {
		if masked(s[m[4]:m[5]]) {
			return 0, 0, "", false
		}
		return m[4], m[5], Mask, true
	})
}

// urlCredentialPattern matches the password of a URL's user information,
// scheme://user:password@host (group 1), up to the last '@' before the path.
var urlCredentialPattern = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s/@:]*:([^\s/]*)@`)

// rewriteURLCredentials masks the password of every URL that carries one
// (https://user:password@host becomes https://user:[redacted]@host).
func rewriteURLCredentials(s string) (string, bool) {
	if !strings.Contains(s, "://") {
		return s, false
	}
	return rewriteMatches(s, urlCredentialPattern, func(m []int) (int, int, string, bool) {
		if v := s[m[2]:m[3]]; v == "" || masked(v) {
			return 0, 0, "", false
		}
		return m[2], m[3], Mask, true
	})
}

// assignPattern matches a secret assignment: a secret's name, an optional
// quote, ':' or '=', an optional quote and the value (group 1).
var assignPattern = regexp.MustCompile(`(?i)\b(?:x-)?(?:api[_-]?key|api[_-]?secret|access[_-]?token|refresh[_-]?token|` +
	`auth[_-]?token|id[_-]?token|session[_-]?token|client[_-]?secret|secret[_-]?key|secret|password|passwd|pwd|` +
	`passphrase|private[_-]?key)["']?\s*[:=]\s*["']?([^\s"',;&]+)`)

// assignHints are substrings (in lower case) every secret name of
// assignPattern holds.
var assignHints = []string{"key", "secret", "token", "pass", "pwd"}

// rewriteAssignments masks the value of every secret assignment
// (api_key=..., "password": "...").
func rewriteAssignments(s string) (string, bool) {
	if noAssignment(s) {
		return s, false
	}
	return maskAssignments(s)
}

// noAssignment reports whether s certainly holds no secret assignment: no
// ':' or '=', or ASCII text without any secret's name (operation keys hold
// ':' everywhere, so the name is what tells). Text beyond ASCII is never
// ruled out here: case folding in (?i) matches letters outside ASCII (the
// Kelvin sign for k, the long s for s).
func noAssignment(s string) bool {
	return !strings.ContainsAny(s, ":=") || (isASCII(s) && !slices.ContainsFunc(assignHints, func(h string) bool { return containsFold(s, h) }))
}

// maskAssignments is rewriteAssignments without the quick check.
func maskAssignments(s string) (string, bool) {
	return rewriteMatches(s, assignPattern, func(m []int) (int, int, string, bool) {
		v := s[m[2]:m[3]]
		if masked(v) || len(v) < 4 {
			return 0, 0, "", false
		}
		return m[2], m[3], Mask, true
	})
}

// masked reports whether v is already a mask (or starts with one, or is
// stars only), so masking it again changes nothing.
func masked(v string) bool {
	return strings.HasPrefix(v, "[redacted") || strings.Trim(v, "*") == ""
}

// rewriteMatches replaces, for every match of re in s that pick accepts, the
// part [from:to) with repl.
func rewriteMatches(s string, re *regexp.Regexp, pick func(m []int) (from, to int, repl string, ok bool)) (string, bool) {
	ms := re.FindAllStringSubmatchIndex(s, -1)
	if ms == nil {
		return s, false
	}
	var b strings.Builder
	last, changed := 0, false
	for _, m := range ms {
		from, to, repl, ok := pick(m)
		if !ok || from < last {
			continue
		}
		b.WriteString(s[last:from])
		b.WriteString(repl)
		last, changed = to, true
	}
	if !changed {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// containsFold reports whether s contains the lower-case ASCII word sub in
// any case, without copying s.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i]|0x20 == sub[0] && strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// isASCII reports whether s holds bytes below 0x80 only.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

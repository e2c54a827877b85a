package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// dsnMask replaces a password in a DSN, as url.URL.Redacted does.
const dsnMask = "xxxxx"

// kvPasswordPattern matches the value of a password in a key=value DSN
// (libpq's form: host=db password='it”s' ...), quoted or not (group 1).
var kvPasswordPattern = regexp.MustCompile(`(?i)\b(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|[^\s]*)`)

// DSN returns a database DSN fit to print: the password masked in every
// form, whether it parses or not: postgres://user:PW@host/db (also
// ?password=PW), key=value (password=PW or password='P W'), and a URL that
// does not parse (postgres://user:PW@[::1). Nothing else is changed.
func DSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		if u, err := url.Parse(dsn); err == nil {
			if q := u.Query(); q.Has("password") || q.Has("sslpassword") {
				for _, k := range []string{"password", "sslpassword"} {
					if q.Has(k) {
						q.Set(k, dsnMask)
					}
				}
				u.RawQuery = q.Encode()
			}
			return u.Redacted()
		}
		dsn = maskUserinfo(dsn)
	}
	return kvPasswordPattern.ReplaceAllStringFunc(dsn, func(m string) string {
		i := strings.IndexByte(m, '=')
		return m[:i+1] + dsnMask
	})
}

// maskUserinfo masks the password of a URL that url.Parse refused: what
// stands between the first ':' after "scheme://" and the last '@' before the
// path.
func maskUserinfo(s string) string {
	i := strings.Index(s, "://") + 3
	end := len(s)
	if j := strings.IndexAny(s[i:], "/?#"); j >= 0 {
		end = i + j
	}
	at := strings.LastIndexByte(s[i:end], '@')
	if at < 0 {
		return s
	}
	at += i
	colon := strings.IndexByte(s[i:at], ':')
	if colon < 0 {
		return s
	}
	return s[:i+colon+1] + dsnMask + s[at:]
}

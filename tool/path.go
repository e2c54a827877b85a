package tool

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// maxPathDecodes bounds how many rounds of percent-decoding DotSegment
// undoes: a provider behind a proxy, a CDN and a framework may each decode
// once.
const maxPathDecodes = 4

// DotSegment reports whether s, filling one segment of a request path,
// could name "." or ".." (RFC 3986, section 5.2.4) at a provider that
// normalises paths: s itself or any part of it between '/' or '\' is "." or
// "..", after undoing up to four rounds of percent-encoding (%2e, %2E%2e,
// %252e) and NFKC (full-width dots). Escaping the value is not enough: the
// normalisers of nginx, CDNs and frameworks decode %2E before they remove
// dot segments, so `DELETE /users/{user}/sessions/..` would reach the user
// itself.
func DotSegment(s string) bool {
	for range maxPathDecodes + 1 {
		if dotPart(norm.NFKC.String(s)) {
			return true
		}
		d := percentDecode(s)
		if d == s {
			return false
		}
		s = d
	}
	return dotPart(norm.NFKC.String(s))
}

func dotPart(s string) bool {
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == '\\' }) {
		if part == "." || part == ".." {
			return true
		}
	}
	return s == "." || s == ".."
}

// percentDecode decodes every valid %XX of s and keeps the rest as it is,
// as a lenient normaliser does.
func percentDecode(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

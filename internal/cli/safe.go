package cli

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// unsafeRune reports whether r must not reach a terminal raw: C0 controls
// (ESC, BEL, CR, LF, TAB, BS ...), DEL, C1 controls (U+0080 to U+009F, CSI
// among them), format characters (bidi overrides such as U+202E, zero-width
// characters, tag characters) and the line and paragraph separators.
func unsafeRune(r rune) bool {
	return r < 0x20 || (r >= 0x7f && r <= 0x9f) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// safe neutralises s for printing on a terminal: every control character,
// escape sequence introducer, bidi or other format character and invalid
// UTF-8 byte is shown as a visible escape (\x1b, \n, \t, \u202e, \xff), so no
// value from a status, a note, an error or a ledger row can move the cursor,
// recolour or retitle the terminal, hide text, reorder it, or forge a line or
// a column. Text without such characters is returned unchanged. It is the one
// function every text printer of the starter passes untrusted strings
// through.
func safe(s string) string {
	clean := true
	for i, r := range s {
		if unsafeRune(r) || (r == utf8.RuneError && isInvalid(s, i)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func isInvalid(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size <= 1
}

// jsonSafe rewrites JSON produced by encoding/json so that the characters
// encoding/json leaves raw inside strings but a terminal would obey (DEL, C1
// controls, format characters) become \u escapes. The JSON value is
// unchanged: outside strings encoding/json writes only ASCII.
func jsonSafe(b []byte) []byte {
	dirty := false
	for _, r := range string(b) {
		if r >= 0x20 && unsafeRune(r) {
			dirty = true
			break
		}
	}
	if !dirty {
		return b
	}
	var out strings.Builder
	for _, r := range string(b) {
		if r < 0x20 || !unsafeRune(r) { // C0 controls are already escaped by encoding/json
			out.WriteRune(r)
			continue
		}
		if r > 0xffff {
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
			continue
		}
		fmt.Fprintf(&out, `\u%04x`, r)
	}
	return []byte(out.String())
}

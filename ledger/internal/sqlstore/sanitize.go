package sqlstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/redact"
)

// PostgreSQL refuses NUL bytes and invalid UTF-8 in text and jsonb, and a
// write it refuses is refused on every retry. Descriptive text (notes, error
// codes, request ids, results) is therefore cleaned before it is written, the
// same on both drivers; identifying text (keys, hashes, scopes) is checked
// instead, because cleaning could make two different keys one.

// cleanText returns s without NUL bytes and with every invalid UTF-8 sequence
// replaced by U+FFFD.
func cleanText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "")
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}

// note is free text a person or a provider wrote: redacted, then cleaned.
func note(s string) string { return cleanText(redact.String(s)) }

// checkIdent refuses an identifying value that cannot be stored as it is.
func checkIdent(op, field, v string) error {
	if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
		return fmt.Errorf("ledger %s: %s %q contains a NUL byte or invalid UTF-8: identifiers must be valid text; build it from other values", op, field, v)
	}
	return nil
}

// jsonArg is a redacted JSON parameter, NULL when empty. Strings (and object
// keys) lose their NUL characters, which PostgreSQL's jsonb refuses; invalid
// UTF-8 was already replaced by the JSON round trip of redact.JSON.
func jsonArg(raw []byte) any {
	r := redact.JSON(raw)
	if r == nil {
		return nil
	}
	if bytes.Contains(r, []byte(`\u0000`)) {
		r = stripJSONNul(r)
	}
	return string(r)
}

func stripJSONNul(raw json.RawMessage) json.RawMessage {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		// redact.JSON returns valid JSON; should it not, store a marker
		// rather than fail the write forever.
		return json.RawMessage(`"[unreadable result]"`)
	}
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(stripNul(v)); err != nil {
		return json.RawMessage(`"[unreadable result]"`)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

func stripNul(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "")
	case []any:
		for i, e := range x {
			x[i] = stripNul(e)
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[strings.ReplaceAll(k, "\x00", "")] = stripNul(e)
		}
		return out
	}
	return v
}

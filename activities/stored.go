package activities

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"unicode"
)

// What the ledger keeps of a call. The ledger is a journal across all plans
// and is kept for the retention (30 days by default), so it holds no
// customer free text: args only as a hash, the result without free text,
// the summary without e-mail addresses. The workflow still gets the whole
// (masked) result; Temporal's history keeps it encrypted.

// NotStored replaces a result's free-text value in the ledger.
const NotStored = "[not stored]"

// maxStoredString is the longest string of a result the ledger keeps.
const maxStoredString = 64

// storedResult returns the result JSON the ledger keeps: numbers, booleans,
// nulls and identifier-like strings (at most 64 bytes, no white space, not
// an e-mail address) as they are, every other string as NotStored, at any
// depth. Input that is not JSON is not stored.
func storedResult(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return nil
	}
	b, err := json.Marshal(keepIDs(v))
	if err != nil {
		return nil
	}
	return b
}

func keepIDs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = keepIDs(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = keepIDs(e)
		}
		return x
	case string:
		if identifier(x) {
			return x
		}
		return NotStored
	}
	return v
}

// identifier reports whether s reads as an id or a code (re_123, EUR,
// succeeded), not as free text or an address.
func identifier(s string) bool {
	if len(s) > maxStoredString || strings.ContainsRune(s, '@') {
		return false
	}
	return strings.IndexFunc(s, unicode.IsSpace) < 0
}

// emailPattern finds e-mail addresses in a summary.
var emailPattern = regexp.MustCompile(`[^\s@<>"',;]+@[^\s@<>"',;]+`)

// storedSummary returns the one-line summary the ledger keeps: e-mail
// addresses replaced by "[e-mail]".
func storedSummary(s string) string {
	if !strings.ContainsRune(s, '@') {
		return s
	}
	return emailPattern.ReplaceAllString(s, "[e-mail]")
}

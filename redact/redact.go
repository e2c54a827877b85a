// Package redact keeps card numbers and secrets out of what agentsaga stores
// and prints. The ledger passes every result through JSON before it writes
// it; logs and operator notes go through String.
package redact

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Mask is what a redacted value is replaced with.
const Mask = "[redacted]"

// LooksLikeCardNumber reports whether s is a payment card number: 13 to 19
// digits (spaces and dashes allowed between them) that pass the Luhn check.
func LooksLikeCardNumber(s string) bool {
	n := 0
	var digits [19]byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if n == len(digits) {
				return false
			}
			digits[n] = c - '0'
			n++
		case c == ' ' || c == '-':
		default:
			return false
		}
	}
	return n >= 13 && luhn(digits[:n])
}

// luhn reports whether the digits (values 0-9) pass the Luhn check.
func luhn(digits []byte) bool {
	sum := 0
	for i := range digits {
		d := int(digits[len(digits)-1-i])
		if i%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}

// String returns s with every card number inside it replaced by Mask. A card
// number is a run of 13 to 19 digits, possibly grouped by single spaces or
// dashes, that passes the Luhn check; groups are tried at their boundaries, so
// "4111 1111 1111 1111 12" (a card number followed by more digits) is masked
// too. An unbroken run of more than 19 digits is an identifier, not a card, and
// is kept.
func String(s string) string {
	var b strings.Builder
	last := 0 // s[last:] is not yet copied
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		end, groups := scanRun(s, i)
		if from, to, ok := cardIn(s, groups); ok {
			b.WriteString(s[last:from])
			b.WriteString(Mask)
			last = to
		}
		i = end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// span is one group of consecutive digits, s[from:to].
type span struct{ from, to int }

// scanRun reads the run of digit groups that starts at s[i]: groups of digits
// joined by exactly one space or dash. It returns where the run ends and its
// groups.
func scanRun(s string, i int) (end int, groups []span) {
	for {
		g := span{from: i}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		g.to = i
		groups = append(groups, g)
		if i+1 < len(s) && (s[i] == ' ' || s[i] == '-') && isDigit(s[i+1]) {
			i++
			continue
		}
		return i, groups
	}
}

// cardIn finds the longest sequence of whole groups whose digits form a card
// number and returns its bounds in s.
func cardIn(s string, groups []span) (from, to int, ok bool) {
	best := 0
	for a := range groups {
		var digits []byte
		for z := a; z < len(groups); z++ {
			for k := groups[z].from; k < groups[z].to; k++ {
				digits = append(digits, s[k]-'0')
			}
			if len(digits) > 19 {
				break
			}
			if len(digits) >= 13 && len(digits) > best && luhn(digits) {
				best, from, to, ok = len(digits), groups[a].from, groups[z].to, true
			}
		}
	}
	return from, to, ok
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// sensitiveExact are key names (lower case, without '_', '-', '.' or spaces)
// that are secret only when they are the whole name: as substrings they are
// too common ("pan" in "company").
var sensitiveExact = map[string]bool{
	"card": true, "pan": true, "pin": true, "cvv": true, "cvc": true, "cvv2": true, "cvc2": true,
	"auth": true, "ssn": true, "otp": true, "iban": true, "accountnumber": true, "securitycode": true,
}

// sensitiveParts are key name fragments that make any key holding them secret.
var sensitiveParts = []string{
	"cardnumber", "cardno", "token", "secret", "password", "passwd", "passphrase", "apikey",
	"authorization", "privatekey", "credential", "cookie", "cvv", "cvc",
}

// SensitiveKey reports whether a JSON object key names a secret: card, pan,
// cvv, token, access_token, secret, password, api_key, authorization and the
// like, in any case and with any separators.
func SensitiveKey(key string) bool {
	k := strings.Map(func(r rune) rune {
		switch r {
		case '_', '-', '.', ' ':
			return -1
		}
		return r
	}, strings.ToLower(key))
	if sensitiveExact[k] {
		return true
	}
	for _, p := range sensitiveParts {
		if strings.Contains(k, p) {
			return true
		}
	}
	return false
}

// JSON returns raw with the value of every sensitive key (see SensitiveKey)
// and every card number inside a string or number replaced by Mask, at any
// depth. Null values of sensitive keys stay null. Numbers are kept exactly as
// written. Input that is not valid JSON is returned as a JSON string, itself
// passed through String, so the output is always valid JSON. Empty input
// returns nil.
func JSON(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return encode(String(string(raw)))
	}
	return encode(redactValue(v))
}

func redactValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e != nil && SensitiveKey(k) {
				x[k] = Mask
				continue
			}
			x[k] = redactValue(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = redactValue(e)
		}
		return x
	case string:
		return String(x)
	case json.Number:
		if LooksLikeCardNumber(x.String()) {
			return Mask
		}
		return x
	}
	return v
}

func encode(v any) json.RawMessage {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		// Every value built by redactValue encodes; keep the promise of
		// valid JSON anyway.
		return json.RawMessage(`"` + Mask + `"`)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

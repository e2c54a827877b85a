// Package redact keeps card numbers and secrets out of what agentsaga stores
// and prints. It is the one redaction function of the project: the ledger,
// the workflow's status, activity failures, the worker's logs (NewHandler)
// and the CLI all pass their text through String, and their JSON through
// JSON, so a secret is masked the same way wherever it shows up.
//
// What is masked, anywhere inside a string:
//
//	what                                    example                               masked as
//	card number (13-19 digits, Luhn)        4111 1111 1111 1111                    [redacted card ending 1111]
//	  any script's digits, any separator     ４１１１.1111/1111\n1111                [redacted card ending 1111]
//	IBAN (country length, mod-97)           DE89 3704 0044 0532 0130 00            [redacted IBAN DE ending 3000]
//	API keys of known shapes                sk_live_51Hx..., xoxb-..., ghp_...,    sk_live_[redacted], xoxb-[redacted], ...
//	                                        AKIA..., AIza..., sk-..., whsec_...
//	JSON web tokens                         eyJhbGciOi....eyJzdWIi....sig          [redacted token]
//	bearer tokens                           Bearer abc.def-123                     Bearer [redacted]
//	Authorization values                    Authorization: Basic dXNlcjpw          Authorization: Basic [redacted]
//	secret assignments                      api_key=abc123, "password": "x1y2"    api_key=[redacted], "password": "[redacted]"
//	passwords in URLs                       https://ana:s3cret@host/              https://ana:[redacted]@host/
//
// Digit groups inside a UUID (8-4-4-4-12 hex) are never taken for a card
// number. Masking is idempotent (String(String(s)) == String(s)) and a mask never
// holds more than the last four digits of what it hides.
package redact

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Mask is what a redacted secret value (a sensitive JSON key's value, a
// credential, a token) is replaced with.
const Mask = "[redacted]"

// Kind names what kind of secret a text holds.
type Kind string

// The kinds of secret Find reports.
const (
	// Card is a payment card number.
	Card Kind = "card number"
	// IBAN is an international bank account number.
	IBAN Kind = "IBAN"
	// APIKey is an API key of a known shape (sk_live_..., xoxb-..., ghp_...,
	// AKIA..., ...).
	APIKey Kind = "API key"
	// BearerToken is a bearer token, a JSON web token or the value of an
	// Authorization header.
	BearerToken Kind = "bearer token"
	// Credential is the value of a secret assignment such as api_key=...
	// or "password": "...".
	Credential Kind = "credential"
)

// maxRounds bounds how often String re-applies its passes until nothing
// changes (masks never create new matches, so one round is the norm).
const maxRounds = 4

// pass is one detector: it rewrites every secret of its kind in s.
type pass struct {
	kind    Kind
	rewrite func(s string) (string, bool)
}

// passes run in this order: tokens and keys first (they may hold digits a
// card pass would half-mask), then IBANs, then card numbers.
var passes = []pass{
	{Credential, rewriteURLCredentials},
	{Credential, rewriteAssignments},
	{BearerToken, rewriteAuthorization},
	{BearerToken, rewriteBearer},
	{APIKey, rewriteKeys},
	{IBAN, rewriteIBANs},
	{Card, rewriteCards},
}

// String returns s with every secret inside it masked (see the package
// table). Text that holds no secret is returned unchanged.
func String(s string) string {
	for range maxRounds {
		changed := false
		for _, p := range passes {
			if out, ok := p.rewrite(s); ok {
				s, changed = out, true
			}
		}
		if !changed {
			break
		}
	}
	return s
}

// Find reports the first kind of secret s holds, in the order String masks
// them (credential, bearer token, API key, IBAN, card number), and whether it
// holds any. Find(s) finds nothing exactly when String(s) == s.
func Find(s string) (Kind, bool) {
	for _, p := range passes {
		if _, ok := p.rewrite(s); ok {
			return p.kind, true
		}
	}
	return "", false
}

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
// replaced by Mask and every string, number and key passed through String
// (a number that is a card number becomes the masked string), at any depth.
// Null values of sensitive keys stay null. Other numbers are kept exactly as
// written. Input that is not valid JSON is returned as a JSON string, itself
// passed through String, so the output is always valid JSON. Empty input
// returns nil. JSON is idempotent.
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
		out := make(map[string]any, len(x))
		for k, e := range x {
			mk := String(k)
			if e != nil && SensitiveKey(k) {
				out[mk] = Mask
				continue
			}
			out[mk] = redactValue(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = redactValue(e)
		}
		return x
	case string:
		return String(x)
	case json.Number:
		if LooksLikeCardNumber(x.String()) {
			return cardMask(x.String())
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

package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/redact"
)

// FieldType is the type of one argument.
type FieldType string

// Argument types. Money is an integer count of minor units (cents): a float
// or a string is refused, never rounded.
const (
	String  FieldType = "string"
	Integer FieldType = "integer"
	Money   FieldType = "money"
	Boolean FieldType = "boolean"
	// Email is one bare e-mail address ("ana@example.com"): no display
	// name, no angle brackets, no list.
	Email FieldType = "email"
	// Currency is a current ISO 4217 currency code in upper case ("EUR"),
	// from the list MinorDigits holds. A schema with a Money field declares
	// exactly one Currency field: the code says what a minor unit is.
	Currency FieldType = "currency"
)

// Default bounds of argument values (see ArgLimits).
const (
	// DefaultMaxStringLen is the longest string argument, in bytes, unless
	// the field declares MaxLen.
	DefaultMaxStringLen = 1000
	// DefaultMaxAmountMinor is the ceiling of a money argument of a tool
	// that declares no Spec.MaxAmountMinor: 100,000,000 minor units
	// (1,000,000.00).
	DefaultMaxAmountMinor = 100_000_000
)

// Field declares one argument.
type Field struct {
	Name     string    `json:",omitzero"`
	Type     FieldType `json:",omitzero"`
	Required bool      `json:",omitzero"`
	// Description is one line for people and planners.
	Description string `json:",omitzero"`
	// Multiline allows line feeds and tabs in a string (an e-mail or
	// ticket body, a description). Other control characters are refused in
	// every string.
	Multiline bool `json:",omitzero"`
	// MaxLen, when positive, is the longest value in bytes of a string
	// argument, instead of ArgLimits.MaxStringLen.
	MaxLen int `json:",omitzero"`
	// PathSegment marks an argument that fills a segment of a request path
	// (the catalogue sets it for every {name} of a request's path): a value
	// that is or holds a dot segment is refused (DotSegment).
	PathSegment bool `json:",omitzero"`
}

// Schema declares a tool's arguments. Arguments it does not name are refused.
type Schema struct {
	Fields []Field `json:",omitzero"`
}

// Field returns the declared field called name.
func (s Schema) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// FieldError is one problem with one field. Path names the field as a user
// wrote it, such as "steps[2].args.amount_minor".
type FieldError struct {
	Path    string `json:"field"`
	Problem string `json:"problem"`
}

func (e FieldError) Error() string { return e.Path + ": " + e.Problem }

// ArgLimits bound argument values. The zero value of a field means its
// default.
type ArgLimits struct {
	// MaxStringLen is the longest string argument in bytes (a field's
	// MaxLen overrides it). Default DefaultMaxStringLen.
	MaxStringLen int `json:"max_string_len,omitempty"`
	// MaxAmountMinor is the ceiling of a money argument (minor units) for
	// this call; Spec.CheckArgs sets it from the spec. Default
	// DefaultMaxAmountMinor.
	MaxAmountMinor int64 `json:"max_amount_minor,omitempty"`
}

func (l ArgLimits) withDefaults() ArgLimits {
	if l.MaxStringLen <= 0 {
		l.MaxStringLen = DefaultMaxStringLen
	}
	if l.MaxAmountMinor <= 0 {
		l.MaxAmountMinor = DefaultMaxAmountMinor
	}
	return l
}

// CheckArgs validates args against the spec's schema with lim, the money
// ceiling being the spec's MaxAmountMinor when it declares one (else lim's).
func (s Spec) CheckArgs(prefix string, args json.RawMessage, lim ArgLimits) []FieldError {
	if s.MaxAmountMinor > 0 {
		lim.MaxAmountMinor = s.MaxAmountMinor
	}
	return s.Args.CheckWith(prefix, args, lim)
}

// Check validates args against the schema with the default ArgLimits (see
// CheckWith).
func (s Schema) Check(prefix string, args json.RawMessage) []FieldError {
	return s.CheckWith(prefix, args, ArgLimits{})
}

// CheckWith validates args against the schema and returns every problem
// found, each under prefix (such as "steps[2].args"). Numbers are read
// exactly, so 129.00 is seen as written and refused for a money field.
// Strings are refused when empty, longer than their limit, not UTF-8, holding
// a control character (line feeds and tabs are allowed in Multiline fields)
// or holding a secret (a card number, IBAN, API key, bearer token or
// credential, anywhere in the text). Values are never echoed unmasked.
func (s Schema) CheckWith(prefix string, args json.RawMessage, lim ArgLimits) []FieldError {
	lim = lim.withDefaults()
	obj, err := DecodeObject(args)
	if err != nil {
		return []FieldError{{Path: prefix, Problem: err.Error()}}
	}
	var errs []FieldError
	for _, f := range s.Fields {
		v, ok := obj[f.Name]
		path := prefix + "." + f.Name
		if !ok || v == nil {
			if f.Required {
				errs = append(errs, FieldError{path, fmt.Sprintf("is required (%s)", f.Type)})
			}
			continue
		}
		if p := checkValue(f, v, lim); p != "" {
			errs = append(errs, FieldError{path, p})
		}
	}
	var unknown []string
	// Collected, then sorted: the order of the map does not reach the result.
	//workflowcheck:ignore
	for name := range obj {
		if _, ok := s.Field(name); !ok {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		errs = append(errs, FieldError{prefix + "." + PathName(name), "is not an argument of this tool: remove it"})
	}
	return errs
}

// PathName is name as it may appear in a field path: itself when it is made
// of letters, digits, '_', '-' and '.', else quoted, masked and clipped.
func PathName(name string) string {
	plain := name != "" && len(name) <= 64
	for i := 0; plain && i < len(name); i++ {
		c := name[i]
		plain = c == '_' || c == '-' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
	}
	if plain && !strings.ContainsAny(name, "0123456789") {
		return name
	}
	if plain {
		if m := redact.String(name); m == name {
			return name
		}
	}
	return strconv.QuoteToASCII(Clip(redact.String(name), 64))
}

// Clip returns s cut to at most n bytes (on a rune boundary), with "..."
// when it was cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// CheckText reports what is wrong with a string argument, or "": not valid
// UTF-8, longer than limit bytes, holding a control character (line feed and
// tab allowed when multiline) or a bidirectional override, or holding a
// secret. It is the string rule of CheckWith, for other free text a plan
// carries.
func CheckText(v string, limit int, multiline bool) string {
	if !utf8.ValidString(v) {
		return "is not valid UTF-8: send UTF-8 text"
	}
	if len(v) > limit {
		return fmt.Sprintf("is %d bytes long, the limit is %d bytes: shorten it", len(v), limit)
	}
	for i, r := range v {
		if multiline && (r == '\n' || r == '\t') {
			continue
		}
		if unicode.IsControl(r) || isBidiControl(r) {
			what := "a control character"
			if multiline {
				what = "a control character other than line feed and tab"
			}
			return fmt.Sprintf("holds %s (%U at byte %d): send plain text", what, r, i)
		}
	}
	if k, ok := redact.Find(v); ok {
		return "holds " + article(k) + " " + string(k) + "; " + secretAdvice(k)
	}
	return ""
}

// isBidiControl reports the Unicode bidirectional embeddings, overrides and
// isolates, which make text read differently from how it runs.
func isBidiControl(r rune) bool {
	return (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

func article(k redact.Kind) string {
	if k == redact.APIKey || k == redact.IBAN {
		return "an"
	}
	return "a"
}

// secretAdvice says what to pass instead of a secret of kind k.
func secretAdvice(k redact.Kind) string {
	switch k {
	case redact.Card:
		return "pass a vault token such as tok_visa; card numbers must never enter a plan"
	case redact.IBAN:
		return "pass a reference to the stored bank account (such as a customer or mandate id); account numbers must never enter a plan"
	default:
		return "credentials must never enter a plan; configure them on the worker's tools and pass no secret"
	}
}

func checkValue(f Field, v any, lim ArgLimits) string {
	switch f.Type {
	case String, Email:
		s, ok := v.(string)
		if !ok {
			return fmt.Sprintf("must be a string, got %s", jsonType(v))
		}
		if strings.TrimSpace(s) == "" {
			return "must not be empty"
		}
		limit := lim.MaxStringLen
		if f.MaxLen > 0 {
			limit = f.MaxLen
		}
		if p := CheckText(s, limit, f.Multiline && f.Type == String); p != "" {
			return p
		}
		if f.PathSegment && DotSegment(s) {
			return `fills a segment of the request path and is or holds "." or ".." (also percent-encoded, such as %2e%2E): a provider that normalises paths would act on another object; send the object's id itself`
		}
		if f.Type == Email {
			return checkEmail(s)
		}
	case Currency:
		c, ok := v.(string)
		if !ok {
			return fmt.Sprintf("must be an ISO 4217 currency code as a string, such as \"EUR\"; got %s", jsonType(v))
		}
		return checkCurrency(c)
	case Boolean:
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("must be true or false, got %s", jsonType(v))
		}
	case Integer:
		if _, err := exactInt(v); err != "" {
			return err
		}
	case Money:
		n, err := exactInt(v)
		if err != "" && outOfRange(v) {
			return fmt.Sprintf("is %s minor units, above this tool's ceiling of %d (%s): split the amount or ask an operator to raise the ceiling", Clip(redact.String(v.(json.Number).String()), 40), lim.MaxAmountMinor, major(lim.MaxAmountMinor))
		}
		if err != "" {
			return err + " of minor units (12900 for 129.00); amounts are never rounded"
		}
		if n <= 0 {
			return fmt.Sprintf("must be a positive integer of minor units, got %d", n)
		}
		if n > lim.MaxAmountMinor {
			return fmt.Sprintf("is %d minor units, above this tool's ceiling of %d (%s): split the amount or ask an operator to raise the ceiling", n, lim.MaxAmountMinor, major(lim.MaxAmountMinor))
		}
	default:
		return fmt.Sprintf("has undeclared type %q", f.Type)
	}
	return ""
}

// checkEmail accepts one bare address: what net/mail parses, with no display
// name, written exactly as the address.
func checkEmail(s string) string {
	a, err := mail.ParseAddress(s)
	switch {
	case err != nil:
		return "must be one e-mail address such as ana@example.com: " + Clip(redact.String(err.Error()), 80)
	case a.Name != "" || a.Address != s:
		return "must be a bare e-mail address such as ana@example.com, without a display name, brackets or spaces"
	}
	return ""
}

// major writes minor units as a decimal amount with two places: 1000000.00.
func major(n int64) string { return fmt.Sprintf("%d.%02d", n/100, n%100) }

func exactInt(v any) (int64, string) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Sprintf("must be an integer, got %s", jsonType(v))
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Sprintf("is out of range, got %s: the limit is %d to %d", Clip(redact.String(n.String()), 40), int64(math.MinInt64), int64(math.MaxInt64))
	}
	if err != nil {
		return 0, fmt.Sprintf("must be an integer, got %s", Clip(redact.String(n.String()), 40))
	}
	return i, ""
}

// outOfRange reports whether v is an integer written in plain digits that
// does not fit in 64 bits.
func outOfRange(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	_, err := strconv.ParseInt(n.String(), 10, 64)
	return errors.Is(err, strconv.ErrRange)
}

// jsonType names v for a message; a string or number is shown masked and
// clipped.
func jsonType(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", Clip(redact.String(x), 40))
	case json.Number:
		return "the number " + Clip(redact.String(x.String()), 40)
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// DecodeObject decodes a JSON object keeping numbers exact (json.Number).
func DecodeObject(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var obj map[string]any
	if err := d.Decode(&obj); err != nil || obj == nil {
		return nil, fmt.Errorf("must be a JSON object")
	}
	if d.More() {
		return nil, fmt.Errorf("must be a single JSON object")
	}
	return obj, nil
}

// Int returns the exact integer value of field name in args, for approval
// thresholds and guards.
func Int(args json.RawMessage, name string) (int64, bool) {
	obj, err := DecodeObject(args)
	if err != nil {
		return 0, false
	}
	return IntOf(obj, name)
}

// IntOf is Int on args already decoded by DecodeObject, for callers that
// read several fields of one call.
func IntOf(obj map[string]any, name string) (int64, bool) {
	n, msg := exactInt(obj[name])
	return n, msg == ""
}

// LooksLikeCardNumber reports whether s is a payment card number: 13 to 19
// digits (spaces and dashes allowed) that pass the Luhn check. It is
// redact.LooksLikeCardNumber, kept here for the schema's callers.
func LooksLikeCardNumber(s string) bool { return redact.LooksLikeCardNumber(s) }

// Approval is a tool's approval policy: which calls wait for a human's
// `approve` signal before they run.
type Approval struct {
	// Always makes every call wait.
	Always bool `json:",omitzero"`
	// Field and AboveMinor make calls wait whose integer field Field is
	// greater than AboveMinor (for example a refund above 500.00).
	Field      string `json:",omitzero"`
	AboveMinor int64  `json:",omitzero"`
	// Window is how long an approval question stays open; an expired
	// question counts as rejected and the plan compensates. Zero means
	// DefaultApprovalWindow.
	Window time.Duration `json:",omitzero"`
}

// DefaultApprovalWindow is how long an approval waits when the tool does not
// say.
const DefaultApprovalWindow = 24 * time.Hour

// Expiry returns the approval window, defaulted.
func (a *Approval) Expiry() time.Duration {
	if a == nil || a.Window <= 0 {
		return DefaultApprovalWindow
	}
	return a.Window
}

// Required reports whether a call with these args must be approved first.
func (a *Approval) Required(args json.RawMessage) bool {
	if a == nil {
		return false
	}
	if a.Always {
		return true
	}
	if a.Field == "" {
		return false
	}
	n, ok := Int(args, a.Field)
	return !ok || n > a.AboveMinor
}

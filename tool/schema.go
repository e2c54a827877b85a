package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

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
)

// Field declares one argument.
type Field struct {
	Name     string
	Type     FieldType
	Required bool
	// Description is one line for people and planners.
	Description string
}

// Schema declares a tool's arguments. Arguments it does not name are refused.
type Schema struct {
	Fields []Field
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

// Check validates args against the schema and returns every problem found,
// each under prefix (such as "steps[2].args"). Numbers are read exactly, so
// 129.00 is seen as written and refused for a money field.
func (s Schema) Check(prefix string, args json.RawMessage) []FieldError {
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
		if p := checkValue(f.Type, v); p != "" {
			errs = append(errs, FieldError{path, p})
		}
	}
	var unknown []string
	for name := range obj {
		if _, ok := s.Field(name); !ok {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, name := range unknown {
		errs = append(errs, FieldError{prefix + "." + name, "is not an argument of this tool: remove it"})
	}
	return errs
}

func checkValue(t FieldType, v any) string {
	switch t {
	case String:
		s, ok := v.(string)
		if !ok {
			return fmt.Sprintf("must be a string, got %s", jsonType(v))
		}
		if strings.TrimSpace(s) == "" {
			return "must not be empty"
		}
		if LooksLikeCardNumber(s) {
			return "looks like a card number: pass a token reference from your vault instead, card numbers must never enter a plan"
		}
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
		if err != "" {
			return err + " of minor units (12900 for 129.00); amounts are never rounded"
		}
		if n <= 0 {
			return fmt.Sprintf("must be a positive integer of minor units, got %d", n)
		}
	default:
		return fmt.Sprintf("has undeclared type %q", t)
	}
	return ""
}

func exactInt(v any) (int64, string) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Sprintf("must be an integer, got %s", jsonType(v))
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		return 0, fmt.Sprintf("must be an integer, got %s", n.String())
	}
	return i, ""
}

func jsonType(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
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
	Always bool
	// Field and AboveMinor make calls wait whose integer field Field is
	// greater than AboveMinor (for example a refund above 500.00).
	Field      string
	AboveMinor int64
	// Window is how long an approval question stays open; an expired
	// question counts as rejected and the plan compensates. Zero means
	// DefaultApprovalWindow.
	Window time.Duration
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

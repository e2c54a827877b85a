package tool

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// MatchField pairs an argument of a call with the field of the provider's
// answer that records it, such as {Arg: "amount_minor", Result:
// "amount_minor"}.
type MatchField struct {
	// Arg is the name of the argument in the call's args.
	Arg string `json:",omitzero"`
	// Result is the name of the top-level field of the provider's answer
	// (Result.Data) that holds the value the effect was made with.
	Result string `json:",omitzero"`
	// Default is the value the provider records when the argument is
	// absent (a CRM's default priority "normal"); empty means absent is
	// compared as the empty string.
	Default string `json:",omitzero"`
	// IfSet compares the field only when the argument is present and not
	// empty (a reversal may name its original by id or leave it out).
	IfSet bool `json:",omitzero"`
}

// Matcher is implemented by a tool that checks a found effect itself,
// instead of (or beyond) declaring Spec.Match. Differences returns what
// differs between args and found, one phrase each, or nothing when found is
// this call's effect.
type Matcher interface {
	Differences(args json.RawMessage, found Result) []string
}

// Differences returns what differs between a call's args and an effect the
// provider holds under the call's key: the tool's Matcher if it has one, else
// its Spec.Match. Empty means the effect is the call's own (or that the tool
// declares no way to tell). An answer that is not a JSON object while fields
// are declared is a difference: it cannot be shown to match.
func Differences(t Tool, args json.RawMessage, found Result) []string {
	if m, ok := t.(Matcher); ok {
		return m.Differences(args, found)
	}
	return CompareFields(t.Spec().Match, args, found.Data)
}

// CompareFields compares each declared field of args with the provider's
// answer data and returns one phrase per difference, such as
// `amount_minor: this call has 15000, the provider's effect has 12900
// (field amount_minor)`. Strings are compared exactly, numbers as written.
func CompareFields(fields []MatchField, args, data json.RawMessage) []string {
	if len(fields) == 0 {
		return nil
	}
	a, err := DecodeObject(args)
	if err != nil {
		return []string{"the call's args are not a JSON object: " + err.Error()}
	}
	d, err := DecodeObject(data)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return []string{"the provider's answer is not a JSON object, so it cannot be shown to be this call's effect"}
	}
	var out []string
	for _, f := range fields {
		want, set := scalar(a[f.Arg])
		if !set {
			if f.IfSet {
				continue
			}
			want = f.Default
		}
		got, _ := scalar(d[f.Result])
		if want != got {
			out = append(out, fmt.Sprintf("%s: this call has %s, the provider's effect has %s (field %s)", f.Arg, quote(want), quote(got), f.Result))
		}
	}
	return out
}

// scalar renders a decoded JSON value for comparison; set is false for an
// absent, null or empty value.
func scalar(v any) (s string, set bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, x != ""
	case json.Number:
		return x.String(), true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	}
	b, _ := json.Marshal(v)
	return string(b), true
}

func quote(s string) string {
	if s == "" {
		return "nothing"
	}
	return fmt.Sprintf("%q", s)
}

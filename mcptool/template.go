package mcptool

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// MaxTemplateNodes bounds the values of one arguments template (every
// mapping, list and scalar counts one).
const MaxTemplateNodes = 1024

// Template builds an upstream tool's arguments from a call. It is a JSON-like
// value (maps with string keys, lists, strings, numbers, booleans) whose
// strings may hold references in braces:
//
//	{key}                    the operation key
//	{NAME}                   the call's argument NAME
//	{original.key}           for a reversal: the reversed call's key
//	{original.external_id}   for a reversal: the reversed effect's id
//	{original.args.NAME}     for a reversal: the reversed call's argument NAME
//
// A string that is exactly one reference takes the referenced value with its
// JSON type (a number stays a number, a list a list); an absent value drops
// the map entry or list element that holds it. A reference inside longer text
// is written as text. A nil Template passes the call's arguments as they are.
type Template struct {
	v any
}

// NewTemplate checks v (as decoded from YAML or JSON) and returns it as a
// template, or an error naming the first problem.
func NewTemplate(v any) (*Template, error) {
	n := 0
	if err := checkTemplate(v, "", &n); err != nil {
		return nil, err
	}
	return &Template{v: v}, nil
}

// Refs returns every reference of the template, sorted, without duplicates.
func (t *Template) Refs() []string {
	if t == nil {
		return nil
	}
	seen := map[string]bool{}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			for _, r := range refsOf(x) {
				seen[r] = true
			}
		}
	}
	walk(t.v)
	out := make([]string, 0, len(seen))
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

func checkTemplate(v any, path string, n *int) error {
	*n++
	if *n > MaxTemplateNodes {
		return fmt.Errorf("holds more than %d values", MaxTemplateNodes)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if err := checkTemplate(e, path+"."+k, n); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := checkTemplate(e, fmt.Sprintf("%s[%d]", path, i), n); err != nil {
				return err
			}
		}
	case string:
		if _, err := parseRefs(x); err != nil {
			return fmt.Errorf("%s: %w", strings.TrimPrefix(path, "."), err)
		}
	case nil, bool, int, int64, uint64, float64, json.Number:
	default:
		return fmt.Errorf("%s: a %T is not a JSON value", strings.TrimPrefix(path, "."), v)
	}
	return nil
}

// piece is literal text or a reference.
type piece struct {
	lit, ref string
}

func parseRefs(s string) ([]piece, error) {
	var out []piece
	for s != "" {
		open := strings.IndexByte(s, '{')
		closeAt := strings.IndexByte(s, '}')
		if open < 0 {
			if closeAt >= 0 {
				return nil, fmt.Errorf("%q has a '}' without its '{'", clip(s, 40))
			}
			out = append(out, piece{lit: s})
			break
		}
		if closeAt >= 0 && closeAt < open {
			return nil, fmt.Errorf("%q has a '}' without its '{'", clip(s, 40))
		}
		if open > 0 {
			out = append(out, piece{lit: s[:open]})
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q has a '{' without its '}'", clip(s, 40))
		}
		ref := strings.TrimSpace(s[open+1 : open+end])
		if ref == "" || strings.ContainsAny(ref, "{ ") {
			return nil, fmt.Errorf("%q holds an empty or malformed reference", clip(s, 40))
		}
		out = append(out, piece{ref: ref})
		s = s[open+end+1:]
	}
	return out, nil
}

func refsOf(s string) []string {
	ps, _ := parseRefs(s)
	var out []string
	for _, p := range ps {
		if p.ref != "" {
			out = append(out, p.ref)
		}
	}
	return out
}

// values resolves references; ok is false for an absent value.
type values func(ref string) (v any, ok bool)

// build renders the template with vals.
func (t *Template) build(vals values) (any, error) {
	v, _, err := render(t.v, vals)
	return v, err
}

func render(v any, vals values) (any, bool, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, ok, err := render(e, vals)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out[k] = r
			}
		}
		return out, true, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			r, ok, err := render(e, vals)
			if err != nil {
				return nil, false, err
			}
			if ok {
				out = append(out, r)
			}
		}
		return out, true, nil
	case string:
		ps, err := parseRefs(x)
		if err != nil {
			return nil, false, err
		}
		if len(ps) == 1 && ps[0].ref != "" {
			r, ok := vals(ps[0].ref)
			return r, ok, nil
		}
		var b strings.Builder
		for _, p := range ps {
			if p.ref == "" {
				b.WriteString(p.lit)
				continue
			}
			r, ok := vals(p.ref)
			if !ok {
				continue
			}
			if s, isStr := r.(string); isStr {
				b.WriteString(s)
			} else {
				j, _ := json.Marshal(r)
				b.Write(j)
			}
		}
		return b.String(), true, nil
	}
	return v, true, nil
}

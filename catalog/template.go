package catalog

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentsaga/agentsaga/tool"
)

// A template is text with {references}; see the package doc.
type template struct {
	parts []part
}

type part struct {
	lit string
	ref string // non-empty for a reference
}

// refs returns the references of t.
func (t template) refs() []string {
	var out []string
	for _, p := range t.parts {
		if p.ref != "" {
			out = append(out, p.ref)
		}
	}
	return out
}

// single returns the reference when t is exactly one reference.
func (t template) single() (string, bool) {
	if len(t.parts) == 1 && t.parts[0].ref != "" {
		return t.parts[0].ref, true
	}
	return "", false
}

// parseTemplate reads s, or says what is wrong with it.
func parseTemplate(s string) (template, string) {
	if len(s) > MaxTemplateLen {
		return template{}, fmt.Sprintf("is %d bytes, the limit is %d", len(s), MaxTemplateLen)
	}
	var t template
	for s != "" {
		open := strings.IndexByte(s, '{')
		closeAt := strings.IndexByte(s, '}')
		if open < 0 {
			if closeAt >= 0 {
				return template{}, "has a '}' without its '{'"
			}
			t.parts = append(t.parts, part{lit: s})
			break
		}
		if closeAt >= 0 && closeAt < open {
			return template{}, "has a '}' without its '{'"
		}
		if open > 0 {
			t.parts = append(t.parts, part{lit: s[:open]})
		}
		end := strings.IndexByte(s[open:], '}')
		if end < 0 {
			return template{}, "has a '{' without its '}'"
		}
		ref := s[open+1 : open+end]
		if strings.ContainsAny(ref, "{ ") || ref == "" {
			return template{}, fmt.Sprintf("has a malformed reference %q: write {name}", clip(ref, 40))
		}
		t.parts = append(t.parts, part{ref: ref})
		s = s[open+end+1:]
	}
	return t, ""
}

// env is what references resolve against for one call.
type env struct {
	args     map[string]any
	key      string
	rev      *tool.Reversal
	origArgs map[string]any
}

// value resolves ref: its text, its JSON value and whether it is present.
func (e *env) value(ref string) (string, any, bool) {
	var v any
	switch {
	case ref == "key":
		v = e.key
	case ref == "original.external_id":
		v = e.rev.OriginalExternalID
	case ref == "original.key":
		v = e.rev.OriginalKey
	case ref == "original.tool":
		v = e.rev.OriginalTool
	case strings.HasPrefix(ref, "original.args."):
		v = e.origArgs[strings.TrimPrefix(ref, "original.args.")]
	default:
		v = e.args[ref]
	}
	switch x := v.(type) {
	case nil:
		return "", nil, false
	case string:
		return x, x, x != ""
	case json.Number:
		return x.String(), x, true
	case bool:
		if x {
			return "true", x, true
		}
		return "false", x, true
	}
	b, _ := json.Marshal(v)
	return string(b), v, true
}

// render renders t, escaping each value with esc (nil for none). ok is false
// when a reference is absent.
func (e *env) render(t template, esc func(string) string) (string, bool) {
	var b strings.Builder
	for _, p := range t.parts {
		if p.ref == "" {
			b.WriteString(p.lit)
			continue
		}
		s, _, ok := e.value(p.ref)
		if !ok {
			return "", false
		}
		if esc != nil {
			s = esc(s)
		}
		b.WriteString(s)
	}
	return b.String(), true
}

// jsonValue renders t as a JSON body value: a single reference keeps its
// JSON type. ok is false when a reference is absent.
func (e *env) jsonValue(t template) (any, bool) {
	if ref, one := t.single(); one {
		_, v, ok := e.value(ref)
		return v, ok
	}
	return e.render(t, nil)
}

var pathEscape = url.PathEscape

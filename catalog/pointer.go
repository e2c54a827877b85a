package catalog

import (
	"strconv"
	"strings"
)

// validPointer reports whether p is an RFC 6901 JSON pointer: empty (the
// whole document) or '/'-separated tokens where '~' is followed by 0 or 1.
func validPointer(p string) bool {
	if p == "" {
		return true
	}
	if p[0] != '/' || len(p) > MaxTemplateLen {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 >= len(p) || (p[i+1] != '0' && p[i+1] != '1')) {
			return false
		}
	}
	return true
}

// resolve returns the value at pointer p in doc (decoded JSON), and whether
// it exists.
func resolve(doc any, p string) (any, bool) {
	if p == "" {
		return doc, true
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := doc.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, false
			}
			doc = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || (len(tok) > 1 && tok[0] == '0') {
				return nil, false
			}
			doc = x[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

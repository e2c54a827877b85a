package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/tool"
)

// CheckJSON checks data as ParseBytes does before it decodes a plan: at
// most limit bytes, UTF-8, one JSON value, no key twice in one object at any
// depth, no escaped lone surrogates, no control characters in keys. A
// session's turn (the same steps[] of {tool, args}) is checked with it too.
// Problems name their fields as in a plan, in a *ValidationError.
func CheckJSON(data []byte, limit int) error {
	if probs := strictCheck(data, limit); len(probs) > 0 {
		return newValidationError(probs)
	}
	return nil
}

// strictCheck refuses what encoding/json would let through silently: more
// than limit bytes, bytes that are not UTF-8, more than one JSON value,
// duplicate keys at any depth, escapes of lone UTF-16 surrogates (decoded as
// U+FFFD) and control characters in keys. It returns the problems, each
// naming its field; a plan that is not JSON at all is one problem.
func strictCheck(data []byte, limit int) []tool.FieldError {
	if len(data) > limit {
		return []tool.FieldError{{Path: "plan", Problem: fmt.Sprintf("is more than %d bytes, the limit is %d bytes (max_plan_bytes): split it into turns", limit, limit)}}
	}
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, n := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			at += n
		}
		return []tool.FieldError{{Path: "plan", Problem: fmt.Sprintf("is not valid UTF-8 (byte %d): send UTF-8 text", at)}}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	var first json.RawMessage
	if err := d.Decode(&first); err != nil {
		return []tool.FieldError{{Path: "plan", Problem: fmt.Sprintf("is not valid JSON (%v): send one JSON object of the plan format (session_id, turn, request_id, steps[])", err)}}
	}
	if rest := bytes.TrimLeft(data[d.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return []tool.FieldError{{Path: "plan", Problem: fmt.Sprintf("has data after the plan's JSON object (at byte %d): send exactly one JSON object", len(data)-len(rest))}}
	}
	w := walker{data: first}
	w.value("")
	return w.problems
}

// walker reads a JSON value known to be valid, keeping the path of each
// part as a user wrote it (steps numbered from 1).
type walker struct {
	data     []byte
	i        int
	problems []tool.FieldError
}

func (w *walker) add(path, format string, args ...any) {
	if path == "" {
		path = "plan"
	}
	w.problems = append(w.problems, tool.FieldError{Path: path, Problem: fmt.Sprintf(format, args...)})
}

func (w *walker) ws() {
	for w.i < len(w.data) && (w.data[w.i] == ' ' || w.data[w.i] == '\t' || w.data[w.i] == '\r' || w.data[w.i] == '\n') {
		w.i++
	}
}

func join(path, key string) string {
	if path == "" {
		return tool.PathName(key)
	}
	return path + "." + tool.PathName(key)
}

func (w *walker) value(path string) {
	w.ws()
	switch w.data[w.i] {
	case '{':
		w.i++
		seen := map[string]bool{}
		for {
			w.ws()
			if w.data[w.i] == '}' {
				w.i++
				return
			}
			key := w.str(path)
			child := join(path, key)
			if seen[key] {
				w.add(child, "appears twice in one object: name each key once (readers disagree on which value counts)")
			}
			seen[key] = true
			for _, r := range key {
				if r < 0x20 || r == 0x7f {
					w.add(child, "is a key holding a control character (%U): use plain names", r)
					break
				}
			}
			w.ws()
			w.i++ // ':'
			w.value(child)
			w.ws()
			if w.data[w.i] == ',' {
				w.i++
			}
		}
	case '[':
		w.i++
		for n := 1; ; n++ {
			w.ws()
			if w.data[w.i] == ']' {
				w.i++
				return
			}
			w.value(fmt.Sprintf("%s[%d]", path, n))
			w.ws()
			if w.data[w.i] == ',' {
				w.i++
			}
		}
	case '"':
		w.str(path)
	default:
		for w.i < len(w.data) {
			switch w.data[w.i] {
			case ',', ']', '}', ' ', '\t', '\r', '\n':
				return
			}
			w.i++
		}
	}
}

// str reads a string at w.i and returns it decoded. An escaped lone UTF-16
// surrogate, which encoding/json turns into U+FFFD, is a problem of path.
func (w *walker) str(path string) string {
	start := w.i
	w.i++
	for w.data[w.i] != '"' {
		if w.data[w.i] != '\\' {
			w.i++
			continue
		}
		if w.data[w.i+1] != 'u' {
			w.i += 2
			continue
		}
		r := hex4(w.data[w.i+2 : w.i+6])
		w.i += 6
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			if w.i+6 <= len(w.data) && w.data[w.i] == '\\' && w.data[w.i+1] == 'u' {
				if lo := hex4(w.data[w.i+2 : w.i+6]); lo >= 0xDC00 && lo <= 0xDFFF {
					w.i += 6
					continue
				}
			}
			w.add(path, "holds the escape of a lone UTF-16 surrogate (\\u%04x), which is not text: send UTF-8 text", r)
		case r >= 0xDC00 && r <= 0xDFFF:
			w.add(path, "holds the escape of a lone UTF-16 surrogate (\\u%04x), which is not text: send UTF-8 text", r)
		}
	}
	w.i++
	var s string
	_ = json.Unmarshal(w.data[start:w.i], &s) // valid JSON: cannot fail
	return s
}

func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

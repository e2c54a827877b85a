package catalog

import (
	"slices"
	"strconv"
	"strings"
)

// A JSON body field whose name starts with '/' is a JSON pointer (RFC 6901)
// that places its value inside nested objects and arrays, for APIs whose
// bodies are not flat (Mailpit's send API wants {"To": [{"Email": ...}]}):
//
//	fields: {/From/Email: "{from}", /To/0/Email: "{to}", /Headers/Message-ID: "<{key}@example.com>"}
//
// A token that is a number (0, 1, ... without leading zeros) below the top
// level is an array index; the indices of one array run from 0 without a
// gap. An array element whose fields are all left out is not sent, and the
// elements after it move up.

// splitTokens returns the unescaped tokens of pointer p ("/a/b" gives a, b).
func splitTokens(p string) []string {
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks
}

// arrayIndex reports whether tok names an array element, and which.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') || strings.Trim(tok, "0123456789") != "" || len(tok) > 4 {
		return 0, false
	}
	n, _ := strconv.Atoi(tok)
	return n, true
}

// nodeKey names the node reached by the first n tokens.
func nodeKey(toks []string, n int) string { return strings.Join(toks[:n], "\x00") }

// bodyShape checks the body fields named by pointer and returns the nodes
// that are arrays (by nodeKey). keyBody is the key's body field, if any.
func (b *builder) bodyShape(path string, fields map[string]string, form bool, keyBody string) map[string]bool {
	arrays := map[string]bool{}
	objects := map[string]bool{} // container nodes that are objects
	leaves := map[string]string{}
	indices := map[string][]int{}
	names := sortedKeys(fields)
	for _, k := range names {
		if !strings.HasPrefix(k, "/") {
			leaves[k] = k
			continue
		}
		fp := path + "." + pathKey(k)
		if form {
			b.p.add(fp, "a form body is flat: a field named by JSON pointer needs format: json")
			continue
		}
		if !validPointer(k) {
			b.p.add(fp, "is not a JSON pointer (RFC 6901), such as /to/0/email")
			continue
		}
		toks := splitTokens(k)
		if slices.Contains(toks, "") {
			b.p.add(fp, "has an empty token: write /a/b, not /a//b or /a/")
			continue
		}
		if toks[0] == keyBody {
			b.p.add(fp, "%q is the key's body field: remove one", clip(keyBody, 40))
		}
		for i := 1; i < len(toks); i++ {
			node := nodeKey(toks, i)
			if n, ok := arrayIndex(toks[i]); ok {
				if objects[node] {
					b.p.add(fp, "%s is an object in another field and an array here", clip(strings.Join(toks[:i], "/"), 40))
				}
				arrays[node] = true
				if !slices.Contains(indices[node], n) {
					indices[node] = append(indices[node], n)
				}
			} else {
				if arrays[node] {
					b.p.add(fp, "%s is an array in another field and an object here", clip(strings.Join(toks[:i], "/"), 40))
				}
				objects[node] = true
			}
		}
		leaf := nodeKey(toks, len(toks))
		if other, dup := leaves[leaf]; dup {
			b.p.add(fp, "names the same place as %s: remove one", clip(other, 40))
		}
		leaves[leaf] = k
	}
	for _, leaf := range sortedKeys(leaves) {
		k := leaves[leaf]
		if arrays[leaf] || objects[leaf] {
			b.p.add(path+"."+pathKey(k), "is a value and holds other fields too: remove one")
		}
	}
	for _, node := range sortedKeys(indices) {
		ix := indices[node]
		slices.Sort(ix)
		if ix[len(ix)-1] != len(ix)-1 {
			b.p.add(path, "the array %s skips an index: number its elements 0, 1, 2 without a gap", clip("/"+strings.ReplaceAll(node, "\x00", "/"), 40))
		}
	}
	return arrays
}

// putBody sets body field k (a name or a pointer) to v in obj.
func putBody(obj map[string]any, k string, v any) {
	if !strings.HasPrefix(k, "/") {
		obj[k] = v
		return
	}
	toks := splitTokens(k)
	m := obj
	for _, t := range toks[:len(toks)-1] {
		next, ok := m[t].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[t] = next
		}
		m = next
	}
	m[toks[len(toks)-1]] = v
}

// nestArrays turns the nodes of obj that bodyShape found to be arrays from
// objects keyed by index into arrays, in index order, without the elements
// left out.
func nestArrays(obj map[string]any, arrays map[string]bool) {
	if len(arrays) == 0 {
		return
	}
	var walk func(v any, toks []string) any
	walk = func(v any, toks []string) any {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		for k, c := range m {
			m[k] = walk(c, append(slices.Clip(toks), k))
		}
		if len(toks) == 0 || !arrays[nodeKey(toks, len(toks))] {
			return m
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			x, _ := arrayIndex(a)
			y, _ := arrayIndex(b)
			return x - y
		})
		out := make([]any, 0, len(keys))
		for _, k := range keys {
			out = append(out, m[k])
		}
		return out
	}
	walk(obj, nil)
}

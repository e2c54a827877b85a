// Package mcptool is the tool implementation that proxies an existing MCP
// server: each agentsaga tool it builds calls one tool of an upstream server
// (over stdio or streamable HTTP, through the official go-sdk client), so the
// upstream's tools run through the same engine as native ones: operation keys,
// ledger, side-effect classes, reconcile before retry, approvals. Only the
// upstream tools declared as a Tool are exposed; the rest are never called.
//
// # Where the key goes
//
// Most MCP servers know nothing of keys. A Tool puts the operation key where
// its upstream can use it: an argument (Tool.KeyArg, for servers that take an
// idempotency_key), a field of the request's _meta (Tool.KeyMeta), or a
// reference {key} inside its arguments template. A write whose upstream
// ignores keys still gets at most one effect: a retry after a lost answer
// first asks the upstream, through the Lookup's read tool, whether the effect
// is there.
//
// # Where an outcome becomes UNKNOWN
//
//	what happened                                      kind                   code
//	-------------------------------------------------  ---------------------  ------------------
//	the server could not be started or connected,      tool.KindNotSent       not_connected
//	or the call failed before it was handed over                              not_sent
//	the call was handed to the connection, then the    tool.KindUnknown       no_response
//	connection broke, the process exited or the
//	context ended before the answer
//	a JSON-RPC error: invalid params, unknown tool     tool.KindRejected      jsonrpc_CODE
//	a JSON-RPC error: any other (internal error)       tool.KindUnavailable   jsonrpc_CODE
//	a result with isError: true                        tool.KindRejected      upstream_error
//	a result                                           success                -
//
// An upstream tool error (isError) is final: the upstream answered and said
// no (a file outside its allowed directories, a destination that exists).
//
// # Lookup
//
// A write declares how to look its effect up (Lookup): an upstream read tool,
// its arguments made from the call's (a Template), which answers mean found
// and absent (Test), and where the effect's data sits in the answer. An
// answer that is neither is Unknown, and the engine asks again until its
// reconcile window closes.
package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/tool"
)

// MaxAnswerBytes bounds how much of an upstream answer is kept as the
// result's data.
const MaxAnswerBytes = 1 << 20

// Tool is one upstream tool exposed as an agentsaga tool. Def declares it to
// the engine (name, class, args schema, approval, guard, match, compensator);
// Server and Upstream say what it calls.
type Tool struct {
	// Def is the tool's spec.
	Def tool.Spec
	// Server is the upstream server.
	Server *Server
	// Upstream is the upstream tool's name, such as "write_file".
	Upstream string
	// Args builds the upstream's arguments; nil passes the call's args as
	// they are (for a reversal, nil is refused: a reversal's args are a
	// tool.Reversal).
	Args *Template
	// KeyArg, when set, is the upstream argument that receives the key.
	KeyArg string
	// KeyMeta, when set, is the _meta field that receives the key, such as
	// "agentsaga/key".
	KeyMeta string
	// ExternalID is a JSON pointer into the answer's data (see Data) to the
	// effect's id; empty means the call has none.
	ExternalID string
	// Item is a JSON pointer to the effect inside a write's own answer
	// (the item its lookup reads, such as /entities/0): the Result's data
	// is that item, so Match fields are read in the same place whether the
	// effect was answered or found by the lookup. Empty, or a pointer the
	// answer does not hold, leaves the whole answer.
	Item string
	// Lookup looks a write's effect up after a lost answer; nil for reads
	// and for writes that declare NoLookup.
	Lookup *Lookup
}

// Lookup is how a write's effect is found in the upstream.
type Lookup struct {
	// Upstream is the read tool called, such as "get_file_info".
	Upstream string
	// Args builds its arguments from the key and the call's arguments.
	Args *Template
	// Found is the test of an answer that holds the effect.
	Found Test
	// Absent is the test of an answer that says there is none.
	Absent Test
	// Authoritative declares an Absent answer final (the upstream is
	// consistent: a committed effect would have been found).
	Authoritative bool
	// Item is a JSON pointer to the effect inside a found answer's data,
	// which becomes the Result's data (Match fields are read there); empty
	// means the whole data.
	Item string
	// ExternalID is a JSON pointer into the item to the effect's id.
	ExternalID string
}

// Test is a condition on an upstream answer. Every set field must hold; the
// zero Test matches any answer that is not an error.
type Test struct {
	// Error, when true, matches only answers with isError; false matches
	// only answers without.
	Error bool
	// TextContains, when set, must occur in the answer's text.
	TextContains string
	// NonEmpty, when set, is a JSON pointer into the data whose value must
	// be present and not empty (not null, "", [] or {}).
	NonEmpty string
	// Empty, when set, is a JSON pointer whose value must be absent or
	// empty.
	Empty string
}

// Spec implements tool.Tool.
func (t *Tool) Spec() tool.Spec { return t.Def }

// String names the tool and its upstream.
func (t *Tool) String() string {
	return fmt.Sprintf("%s (mcp %s/%s)", t.Def.Name, t.Server.Name, t.Upstream)
}

// Execute implements tool.Tool: it calls the upstream tool with the args the
// template builds and the key where declared.
func (t *Tool) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	args, err := t.upstreamArgs(call)
	if err != nil {
		return tool.Result{}, err
	}
	var meta mcp.Meta
	if t.KeyMeta != "" {
		meta = mcp.Meta{t.KeyMeta: call.Key}
	}
	res, err := t.Server.call(ctx, t.Upstream, args, meta)
	if err != nil {
		return tool.Result{}, err
	}
	data, whole := answer(res)
	if res.IsError {
		return tool.Result{}, tool.Fail(tool.KindRejected, "upstream_error",
			fmt.Errorf("%s: upstream tool %s on %s refused the call: %s", t.Def.Name, t.Upstream, t.Server.Name, clip(Text(res), 500)))
	}
	out := tool.Result{Data: data}
	if t.ExternalID != "" {
		// The id is read from the whole answer, which is in memory even
		// when only its first MaxAnswerBytes are kept.
		out.ExternalID = pointerString(full(res), t.ExternalID)
	}
	if !whole && ((t.ExternalID != "" && out.ExternalID == "") || len(t.Def.Match) > 0) {
		// What the engine needs of the answer (the effect's id, the
		// fields Match compares) is not in the part it keeps: the
		// outcome is unknown and the lookup settles it.
		return tool.Result{}, tool.Fail(tool.KindUnknown, CodeTooLarge,
			fmt.Errorf("%s: upstream tool %s on %s answered with over %d bytes, which cannot be kept whole: the outcome is unknown, reconcile through the lookup", t.Def.Name, t.Upstream, t.Server.Name, MaxAnswerBytes))
	}
	if t.Item != "" {
		if v, ok := pointer(data, t.Item); ok {
			if item, err := json.Marshal(v); err == nil {
				out.Data = item
			}
		}
	}
	return out, nil
}

// CodeTooLarge is the code of an upstream answer over MaxAnswerBytes that
// the engine needed whole.
const CodeTooLarge = "answer_too_large"

// upstreamArgs builds the upstream's arguments for call, with the key.
func (t *Tool) upstreamArgs(call tool.Call) (any, error) {
	vals, err := callValues(t.Def, call)
	if err != nil {
		return nil, err
	}
	var args any
	if t.Args == nil {
		if t.Def.Reversal {
			return nil, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: a reversal needs an arguments template", t.Def.Name))
		}
		m, err := decode(call.Args)
		if err != nil {
			return nil, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: args must be a JSON object: %w", t.Def.Name, err))
		}
		args = m
	} else if args, err = t.Args.build(vals); err != nil {
		return nil, tool.Fail(tool.KindNotSent, "bad_request", fmt.Errorf("%s: build the upstream arguments: %w", t.Def.Name, err))
	}
	if t.KeyArg != "" {
		m, ok := args.(map[string]any)
		if !ok {
			return nil, tool.Fail(tool.KindNotSent, "bad_request", fmt.Errorf("%s: the arguments are not an object, so the key cannot go in %s", t.Def.Name, t.KeyArg))
		}
		m[t.KeyArg] = call.Key
	}
	return args, nil
}

// callValues resolves references against call: {key}, {NAME}, and for a
// reversal {original.*}.
func callValues(s tool.Spec, call tool.Call) (values, error) {
	if s.Reversal {
		var rev tool.Reversal
		if err := json.Unmarshal(call.Args, &rev); err != nil {
			return nil, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: args must be a tool.Reversal: %w", s.Name, err))
		}
		orig, err := decode(rev.OriginalArgs)
		if err != nil && len(bytes.TrimSpace(rev.OriginalArgs)) > 0 {
			return nil, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: original_args must be a JSON object: %w", s.Name, err))
		}
		return func(ref string) (any, bool) {
			switch ref {
			case "key":
				return call.Key, true
			case "original.key":
				return rev.OriginalKey, rev.OriginalKey != ""
			case "original.external_id":
				return rev.OriginalExternalID, rev.OriginalExternalID != ""
			case "original.tool":
				return rev.OriginalTool, rev.OriginalTool != ""
			}
			if n, ok := strings.CutPrefix(ref, "original.args."); ok {
				v, ok := orig[n]
				return v, ok && v != nil
			}
			return nil, false
		}, nil
	}
	m, err := decode(call.Args)
	if err != nil {
		return nil, tool.Fail(tool.KindRejected, "invalid_args", fmt.Errorf("%s: args must be a JSON object: %w", s.Name, err))
	}
	return func(ref string) (any, bool) {
		if ref == "key" {
			return call.Key, true
		}
		v, ok := m[ref]
		return v, ok && v != nil
	}, nil
}

func decode(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// reconcilingTool is a Tool with a Lookup: it implements tool.Reconciler.
type reconcilingTool struct{ *Tool }

// New returns t as a tool.Tool that implements tool.Reconciler when t
// declares a Lookup. Register what New returns.
func New(t *Tool) tool.Tool {
	if t.Lookup != nil {
		return reconcilingTool{t}
	}
	return t
}

// Reconcile implements tool.Reconciler: it cannot know the call's args from
// the key alone, so it looks up with the key only. The engine calls
// ReconcileCall, which has them.
func (r reconcilingTool) Reconcile(ctx context.Context, key string) (tool.Lookup, error) {
	return r.ReconcileCall(ctx, tool.Call{Key: key, Args: json.RawMessage(`{}`)})
}

// ReconcileCall looks the effect of call up through the Lookup's read tool.
func (r reconcilingTool) ReconcileCall(ctx context.Context, call tool.Call) (tool.Lookup, error) {
	return r.lookup(ctx, call)
}

func (t *Tool) lookup(ctx context.Context, call tool.Call) (tool.Lookup, error) {
	l := t.Lookup
	vals, err := callValues(t.Def, call)
	if err != nil {
		return tool.Lookup{}, err
	}
	var args any = map[string]any{}
	if l.Args != nil {
		if args, err = l.Args.build(vals); err != nil {
			return tool.Lookup{}, fmt.Errorf("%s: build the lookup arguments: %w", t.Def.Name, err)
		}
	}
	res, err := t.Server.call(ctx, l.Upstream, args, nil)
	if err != nil {
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	data, whole := answer(res)
	if !whole {
		// Only a whole answer is evidence: every pointer into a cut one
		// would read as missing, and missing as empty, so absent.
		return tool.Lookup{Status: tool.Unknown}, nil
	}
	switch {
	case l.Found.holds(res, data):
		item := data
		if l.Item != "" {
			v, ok := pointer(data, l.Item)
			if !ok {
				return tool.Lookup{Status: tool.Unknown}, nil
			}
			item, _ = json.Marshal(v)
		}
		out := tool.Result{Data: item}
		if l.ExternalID != "" {
			out.ExternalID = pointerString(item, l.ExternalID)
		}
		return tool.Lookup{Status: tool.Found, Result: out}, nil
	case l.Absent.holds(res, data):
		return tool.Lookup{Status: tool.Absent, Authoritative: l.Authoritative}, nil
	}
	return tool.Lookup{Status: tool.Unknown}, nil
}

func (c Test) holds(res *mcp.CallToolResult, data json.RawMessage) bool {
	if res.IsError != c.Error {
		return false
	}
	if c.TextContains != "" && !strings.Contains(Text(res), c.TextContains) {
		return false
	}
	if c.NonEmpty != "" {
		v, ok := pointer(data, c.NonEmpty)
		if !ok || empty(v) {
			return false
		}
	}
	if c.Empty != "" {
		if v, ok := pointer(data, c.Empty); ok && !empty(v) {
			return false
		}
	}
	return true
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// Data is an upstream answer as the result's data: its structuredContent
// when it has one, else {"text": ...} with its text content joined. It is
// at most MaxAnswerBytes; a longer answer is cut to its text's first bytes.
func Data(res *mcp.CallToolResult) json.RawMessage {
	data, _ := answer(res)
	return data
}

// answer is Data, and whether it is the whole answer (not cut to
// MaxAnswerBytes).
func answer(res *mcp.CallToolResult) (json.RawMessage, bool) {
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil && len(b) <= MaxAnswerBytes {
			return b, true
		}
	}
	text := Text(res)
	whole := res.StructuredContent == nil
	if len(text) > MaxAnswerBytes-64 {
		text, whole = text[:MaxAnswerBytes-64], false
	}
	b, _ := json.Marshal(map[string]string{"text": text})
	return b, whole
}

// full is the answer as Data shapes it, without the limit: for reading an id
// out of an answer too long to keep.
func full(res *mcp.CallToolResult) json.RawMessage {
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return b
		}
	}
	b, _ := json.Marshal(map[string]string{"text": Text(res)})
	return b
}

// Text is the answer's text content, joined by newlines.
func Text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// pointer reads the RFC 6901 pointer p in data.
func pointer(data json.RawMessage, p string) (any, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	if p == "" || p == "/" {
		return v, true
	}
	for _, tok := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[tok]
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			var i int
			if _, err := fmt.Sscanf(tok, "%d", &i); err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func pointerString(data json.RawMessage, p string) string {
	v, ok := pointer(data, p)
	if !ok || v == nil {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

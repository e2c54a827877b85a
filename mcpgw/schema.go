package mcpgw

import (
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// InputSchema returns the JSON Schema (draft 2020-12) of a tool's
// arguments under the plan limits l: an object with one property per
// declared field, its type, description and bounds, the required fields
// listed, and no other property allowed. Money is an integer of minor units
// from 1 to the tool's ceiling; strings are 1 to MaxLen (or
// l.MaxStringLen) bytes (JSON Schema counts characters, so the gateway
// checks bytes again before a call); e-mail is a string of format email.
func InputSchema(spec tool.Spec, l plan.Limits) map[string]any {
	l = l.WithDefaults()
	props := map[string]any{}
	required := []string{}
	for _, f := range spec.Args.Fields {
		p := map[string]any{}
		desc := f.Description
		switch f.Type {
		case tool.String, tool.Email:
			p["type"] = "string"
			p["minLength"] = 1
			limit := l.MaxStringLen
			if f.MaxLen > 0 {
				limit = f.MaxLen
			}
			p["maxLength"] = limit
			if f.Type == tool.Email {
				p["format"] = "email"
				desc = joinDesc(desc, "one bare e-mail address, such as ana@example.com")
			}
		case tool.Integer:
			p["type"] = "integer"
		case tool.Money:
			p["type"] = "integer"
			p["minimum"] = 1
			ceiling := moneyCeiling(spec, l)
			p["maximum"] = ceiling
			desc = joinDesc(desc, fmt.Sprintf("money as an integer count of minor units (12900 means 129.00); never a decimal or a string; at most %d", ceiling))
		case tool.Currency:
			p["type"] = "string"
			p["pattern"] = "^[A-Z]{3}$"
			desc = joinDesc(desc, "an ISO 4217 currency code in upper case, such as EUR")
		case tool.Boolean:
			p["type"] = "boolean"
		default:
			// An undeclared type: let the tool's own check name it.
		}
		if desc != "" {
			p["description"] = desc
		}
		props[f.Name] = p
		if f.Required {
			required = append(required, f.Name)
		}
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}
}

func joinDesc(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// moneyCeiling is the largest money argument a call of spec may carry
// under l, as plan validation computes it.
func moneyCeiling(spec tool.Spec, l plan.Limits) int64 {
	c := l.MaxAmountMinor
	if spec.MaxAmountMinor > 0 {
		c = spec.MaxAmountMinor
	}
	if v, ok := l.ToolMaxAmountMinor[spec.Name]; ok && v > 0 {
		c = v
	}
	return c
}

// argLimits are the argument limits of spec under l.
func argLimits(spec tool.Spec, l plan.Limits) tool.ArgLimits {
	return tool.ArgLimits{MaxStringLen: l.MaxStringLen, MaxAmountMinor: moneyCeiling(spec, l)}
}

// Annotations returns the MCP tool annotations of a side-effect class:
//
//	READ                  readOnlyHint true
//	IDEMPOTENT_WRITE      idempotentHint true, destructiveHint false
//	CONDITIONAL_WRITE     idempotentHint true, destructiveHint false
//	NON_IDEMPOTENT_WRITE  idempotentHint false, destructiveHint true
//
// A conditional write (an upsert by external reference, a create-if-absent)
// is not destructive: sent again it leaves what the first call made. A
// non-idempotent write is marked destructive because a second run is a
// second effect that cannot be told apart from the first.
func Annotations(c tool.Class) *mcp.ToolAnnotations {
	yes, no := true, false
	switch c {
	case tool.Read:
		return &mcp.ToolAnnotations{ReadOnlyHint: true}
	case tool.IdempotentWrite, tool.ConditionalWrite:
		return &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &no}
	default: // NON_IDEMPOTENT_WRITE (the registry refuses any other class)
		return &mcp.ToolAnnotations{IdempotentHint: false, DestructiveHint: &yes}
	}
}

// classWords says what a class means to a model, without the class's name.
var classWords = map[tool.Class]string{
	tool.Read:               "reads only, changes nothing",
	tool.IdempotentWrite:    "makes a change; the provider makes it once even when the call is sent again",
	tool.ConditionalWrite:   "makes a change only where it is not made yet; sent again it changes nothing more",
	tool.NonIdempotentWrite: "makes a change each time it runs; the gateway runs it once per call",
}

// OutputSchema is the JSON Schema of every tool's structuredContent (a
// Result).
func OutputSchema() map[string]any {
	str := func(d string) map[string]any { return map[string]any{"type": "string", "description": d} }
	obj := func(d string) map[string]any { return map[string]any{"type": "object", "description": d} }
	return map[string]any{
		"type": "object",
		"properties": map[string]any{
			"state": map[string]any{"type": "string", "enum": []any{"succeeded", "failed", "waiting", "running", StateRefused, StateNoAnswer},
				"description": "succeeded or failed (final); waiting (for a person: call again the same way later); running or no_answer (call again the same way); refused (nothing was run)"},
			"tool":        str("the tool called"),
			"session":     str("the session of the call: send it back as _meta agentsaga/session to resend the call from another connection"),
			"turn":        map[string]any{"type": "integer", "description": "the call's turn in the session"},
			"key":         str("the call's operation key, sent to the provider"),
			"external_id": str("the provider's id of what the call made"),
			"result":      map[string]any{"description": "the provider's answer"},
			"error":       str("why the call failed or was refused"),
			"step":        obj("the call's full status: attempts, decisions, reversal"),
			"question":    obj("the open question of a waiting call, with its card"),
			"held":        obj("the earlier call a suspected duplicate repeats"),
			"message":     str("what happened, in words (the text content)"),
		},
		"required": []any{"state", "tool", "session", "message"},
	}
}

// description is the tool's description for a model: its own line, its
// class, and when calls wait for a person.
func description(spec tool.Spec) string {
	d := spec.Description
	d = joinDesc(d, classWords[spec.Class])
	if a := spec.Approval; a != nil {
		switch {
		case a.Always:
			d = joinDesc(d, "every call waits for a person's approval")
		case a.Field != "":
			d = joinDesc(d, fmt.Sprintf("calls with %s above %d wait for a person's approval", a.Field, a.AboveMinor))
		}
	}
	if spec.Class.IsWrite() {
		d = joinDesc(d, "to resend a call safely, send it with the same _meta \"agentsaga/key\" (a string you keep for the call); "+
			"without a key, an identical call from you is the same call until you were given its result, whichever connection it comes through; "+
			"to mean it twice, send each with its own _meta \"agentsaga/key\"")
	}
	return d
}

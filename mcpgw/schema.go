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
//	CONDITIONAL_WRITE     idempotentHint true (destructiveHint left at its default, true)
//	NON_IDEMPOTENT_WRITE  idempotentHint false, destructiveHint true
func Annotations(c tool.Class) *mcp.ToolAnnotations {
	yes, no := true, false
	switch c {
	case tool.Read:
		return &mcp.ToolAnnotations{ReadOnlyHint: true}
	case tool.IdempotentWrite:
		return &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &no}
	case tool.ConditionalWrite:
		return &mcp.ToolAnnotations{IdempotentHint: true}
	default: // NON_IDEMPOTENT_WRITE (the registry refuses any other class)
		return &mcp.ToolAnnotations{IdempotentHint: false, DestructiveHint: &yes}
	}
}

// description is the tool's description for a model: its own line, its
// class, and when calls wait for a person.
func description(spec tool.Spec) string {
	d := spec.Description
	d = joinDesc(d, "side-effect class "+string(spec.Class))
	if a := spec.Approval; a != nil {
		switch {
		case a.Always:
			d = joinDesc(d, "every call waits for a person's approval")
		case a.Field != "":
			d = joinDesc(d, fmt.Sprintf("calls with %s above %d wait for a person's approval", a.Field, a.AboveMinor))
		}
	}
	if spec.Class.IsWrite() {
		d = joinDesc(d, "repeating an identical call does not run it twice (see the agentsaga/key _meta field)")
	}
	return d
}

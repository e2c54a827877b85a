package tool

import (
	"encoding/json"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// EntityForm is how a guard normalises the values that identify its entity,
// so that one business entity always names one scope. Only string values are
// normalised; numbers keep their JSON literal.
type EntityForm string

// The entity forms.
const (
	// FoldedEntity (the default, also the zero value ""): trim surrounding
	// space, Unicode NFC, collapse inner runs of white space to one space,
	// Unicode case folding. "o-16 ", "O-16" and "o-16" are one entity.
	// Two ids that differ only in case share a scope: the safe side, as a
	// shared scope holds or refuses a second effect while a split scope
	// lets two through.
	FoldedEntity EntityForm = "folded"
	// CasedEntity is FoldedEntity without the case folding, for entities
	// whose ids are case-sensitive.
	CasedEntity EntityForm = "cased"
	// ExactEntity uses the values as given.
	ExactEntity EntityForm = "exact"
)

// Valid reports whether f is a known form (or the zero value).
func (f EntityForm) Valid() bool {
	switch f {
	case "", FoldedEntity, CasedEntity, ExactEntity:
		return true
	}
	return false
}

// Normalize returns s in form f.
func (f EntityForm) Normalize(s string) string {
	if f == ExactEntity {
		return s
	}
	s = strings.Join(strings.FieldsFunc(norm.NFC.String(s), unicode.IsSpace), " ")
	if f == CasedEntity {
		return s
	}
	// A Caser is stateful, so one per call. Folding may decompose:
	// recompose.
	return norm.NFC.String(cases.Fold().String(s))
}

// Entity returns the guard's entity in args: the JSON array of its Fields'
// values, strings normalised by the guard's Form, such as ["o-16"].
func (g *Guard) Entity(args json.RawMessage) string {
	obj, _ := DecodeObject(args)
	vals := make([]any, len(g.Fields))
	for i, f := range g.Fields {
		v := obj[f]
		if s, ok := v.(string); ok {
			v = g.Form.Normalize(s)
		}
		vals[i] = v
	}
	b, _ := json.Marshal(vals)
	return string(b)
}

// ScopeKey returns the ledger's guard scope key of a call with args: the
// guard's Scope, a colon and its Entity.
func (g *Guard) ScopeKey(args json.RawMessage) string { return g.Scope + ":" + g.Entity(args) }

// NormalizeArgs returns args with the guard's fields normalised by its Form
// (for the suspected-duplicate check, which compares args); other fields are
// left as they are. It returns nil for args that are not a JSON object.
func (g *Guard) NormalizeArgs(args json.RawMessage) map[string]any {
	obj, err := DecodeObject(args)
	if err != nil {
		return nil
	}
	for _, f := range g.Fields {
		if s, ok := obj[f].(string); ok {
			obj[f] = g.Form.Normalize(s)
		}
	}
	return obj
}

// EntityAndArgs returns Entity(args) and NormalizeArgs(args) from one
// decoding of args (the ledger's claim needs both).
func (g *Guard) EntityAndArgs(args json.RawMessage) (string, map[string]any) {
	obj, err := DecodeObject(args)
	if err != nil {
		obj = nil
	}
	vals := make([]any, len(g.Fields))
	for i, f := range g.Fields {
		v := obj[f]
		if s, ok := v.(string); ok {
			v = g.Form.Normalize(s)
			obj[f] = v
		}
		vals[i] = v
	}
	b, _ := json.Marshal(vals)
	return string(b), obj
}

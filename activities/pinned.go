package activities

import (
	"encoding/json"
	"time"

	"github.com/agentsaga/agentsaga/tool"
)

// Pinned is the part of a tool's spec that the activities act on, as the
// plan pinned it when it started (workflows record the specs of a plan's
// tools in its history). A deploy that changes a tool's spec (a lower
// approval threshold, another guard, a shorter timeout, other Match fields)
// never changes the calls of a plan already running: the activity takes
// these fields from the request, not from its registry. Only what the
// activities need travels, to keep every request small.
type Pinned struct {
	// Class picks read or write handling and the classification.
	Class tool.Class `json:"class"`
	// Timeout makes the ledger lease (timeout + grace).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Approval decides whether a call must carry a permit.
	Approval *tool.Approval `json:"approval,omitempty"`
	// Guard names the scope the ledger claims.
	Guard *tool.Guard `json:"guard,omitempty"`
	// Match checks a found effect against the call (unless the tool is a
	// tool.Matcher).
	Match []tool.MatchField `json:"match,omitempty"`
}

// PinnedOf returns what the activities take from spec, or nil for a spec
// without a valid class (nothing pinned: the registry's spec is used).
func PinnedOf(spec tool.Spec) *Pinned {
	if !spec.Class.Valid() {
		return nil
	}
	return &Pinned{Class: spec.Class, Timeout: spec.Timeout, Approval: spec.Approval, Guard: spec.Guard, Match: spec.Match}
}

// specOf is the spec a call of t under req runs with: the registry's, with
// every field the plan pinned taken from req. A request without Pinned (one
// recorded in a history from before plans pinned their calls) runs with the
// registry's spec.
func specOf(t tool.Tool, req Request) tool.Spec {
	spec := t.Spec()
	if p := req.Pinned; p != nil && p.Class.Valid() {
		spec.Class, spec.Timeout, spec.Approval, spec.Guard, spec.Match = p.Class, p.Timeout, p.Approval, p.Guard, p.Match
	}
	return spec
}

// differences is tool.Differences with spec's Match fields: the tool's
// Matcher if it has one, else the (pinned) Match of spec.
func differences(t tool.Tool, spec tool.Spec, args json.RawMessage, found tool.Result) []string {
	if m, ok := t.(tool.Matcher); ok {
		return m.Differences(args, found)
	}
	return tool.CompareFields(spec.Match, args, found.Data)
}

// Package plan holds the agent plan model: the JSON a planner submits, its
// validation, and the two identities derived from it by code, never by the
// model: the operation key of every step and the request fingerprint.
package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentsaga/agentsaga/tool"
)

// Plan is one turn of an agent: the tool calls it wants made, in order.
//
//	{
//	  "session_id": "sess-42",
//	  "turn": 1,
//	  "request_id": "req-7",
//	  "steps": [
//	    {"tool": "query_order", "args": {"order_id": "ord-1001"}},
//	    {"tool": "apply_refund", "args": {"order_id": "ord-1001", "amount_minor": 12900, "currency": "EUR"}}
//	  ]
//	}
type Plan struct {
	// SessionID identifies the agent conversation. Letters, digits, '.',
	// '_' and '-' only: it is part of every key.
	SessionID string `json:"session_id"`
	// Turn counts the conversation's turns from 1.
	Turn int `json:"turn"`
	// RequestID optionally names the user's request, for the audit trail.
	RequestID string `json:"request_id,omitempty"`
	// RequestedBy optionally names the principal who asked for the plan
	// (an operator name as in the operators file). An approval by the same
	// principal is refused (four eyes).
	RequestedBy string `json:"requested_by,omitempty"`
	// Steps are the tool calls, numbered from 1 in keys and messages.
	Steps []Step `json:"steps"`
}

// Step is one tool call. Args stay raw JSON so that numbers are seen exactly
// as the planner wrote them: 129.00 is refused for money, never rounded.
type Step struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
}

var sessionPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// Parse reads a plan from JSON. It refuses unknown fields and a turn that is
// not an integer; everything else is left to Validate so that all problems
// are reported at once.
func Parse(r io.Reader) (Plan, error) {
	var raw struct {
		SessionID   string      `json:"session_id"`
		Turn        json.Number `json:"turn"`
		RequestID   string      `json:"request_id"`
		RequestedBy string      `json:"requested_by"`
		Steps       []Step      `json:"steps"`
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return Plan{}, fmt.Errorf("read plan: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	d.DisallowUnknownFields()
	if err := d.Decode(&raw); err != nil {
		return Plan{}, fmt.Errorf("plan is not valid JSON of the plan format (session_id, turn, request_id, steps[]): %w", err)
	}
	p := Plan{SessionID: raw.SessionID, RequestID: raw.RequestID, RequestedBy: raw.RequestedBy, Steps: raw.Steps}
	if raw.Turn != "" {
		n, err := strconv.Atoi(raw.Turn.String())
		if err != nil {
			return Plan{}, &ValidationError{Problems: []tool.FieldError{{Path: "turn", Problem: "must be an integer >= 1, got " + raw.Turn.String()}}}
		}
		p.Turn = n
	}
	return p, nil
}

// ValidationError lists every problem of a plan, each naming its field.
type ValidationError struct {
	Problems []tool.FieldError `json:"problems"`
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Error()
	}
	return fmt.Sprintf("plan refused (%d problem(s)), fix and submit again: %s", len(e.Problems), strings.Join(parts, "; "))
}

// Validate checks the plan against the tools in c and returns a
// *ValidationError listing every problem, or nil.
func (p Plan) Validate(c tool.Catalog) error {
	var errs []tool.FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, tool.FieldError{Path: path, Problem: fmt.Sprintf(format, args...)})
	}
	switch {
	case p.SessionID == "":
		add("session_id", "is required")
	case !sessionPattern.MatchString(p.SessionID):
		add("session_id", "must be 1 to 128 letters, digits, '.', '_' or '-' (it is part of every operation key), got %q", p.SessionID)
	}
	if p.Turn < 1 {
		add("turn", "must be an integer >= 1, got %d", p.Turn)
	}
	if len(p.Steps) == 0 {
		add("steps", "must list at least one tool call")
	}
	// An irreversible write (one with no compensator) must be the last
	// step: if anything after it failed, the saga would compensate the
	// steps before it but could not take it back. That holds for a read
	// after it too (a read can fail and stop the plan).
	lastIrreversible := 0 // step number of a write that cannot be undone
	for i, s := range p.Steps {
		n := i + 1
		path := fmt.Sprintf("steps[%d]", n)
		if lastIrreversible != 0 {
			prev := p.Steps[lastIrreversible-1].Tool
			add(fmt.Sprintf("steps[%d].tool", lastIrreversible),
				"%s cannot be undone: it must be the last step of the plan (step %d, %s, comes after it; if it failed, %s could not be taken back): move it to the end",
				prev, n, s.Tool, prev)
			lastIrreversible = 0
		}
		if s.Tool == "" {
			add(path+".tool", "is required")
			continue
		}
		spec, ok := c.Spec(s.Tool)
		if !ok {
			add(path+".tool", "unknown tool %q: use one the worker registers", s.Tool)
			continue
		}
		if spec.Reversal {
			add(path+".tool", "%s is a reversal used only by compensation: plans cannot call it", s.Tool)
			continue
		}
		errs = append(errs, spec.Args.Check(path+".args", s.Args)...)
		if spec.Class.IsWrite() && !spec.Compensable() {
			lastIrreversible = n
		}
	}
	if len(errs) > 0 {
		return &ValidationError{Problems: errs}
	}
	return nil
}

// IsValidation reports whether err is a plan validation error.
func IsValidation(err error) bool {
	var v *ValidationError
	return errors.As(err, &v)
}

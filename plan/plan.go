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
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/redact"
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
	// Parallel runs every step at once (a model's several tool calls in one
	// message). Without it, consecutive reads run at once and writes one
	// after another. A parallel plan cannot hold a write that cannot be
	// undone.
	Parallel bool `json:"parallel,omitempty"`
	// Steps are the tool calls, numbered from 1 in keys and messages.
	Steps []Step `json:"steps"`
}

// Step is one tool call. Args stay raw JSON so that numbers are seen exactly
// as the planner wrote them: 129.00 is refused for money, never rounded.
type Step struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
	// Hold, when set, asks a person before the step runs, with this
	// reason on the question's card (a gateway holding a suspected
	// duplicate). It only ever adds a question.
	Hold string `json:"hold,omitempty"`
}

// MaxHoldLen bounds Step.Hold, in bytes.
const MaxHoldLen = 300

var sessionChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// Parse reads a plan from JSON under DefaultLimits (see ParseWith).
func Parse(r io.Reader) (Plan, error) { return ParseWith(r, DefaultLimits()) }

// ParseWith reads at most l.MaxPlanBytes+1 bytes of r and parses them with
// ParseBytes. It does not stop on a cancelled context: read with ReadLimited
// first when r may block.
func ParseWith(r io.Reader, l Limits) (Plan, error) {
	l = l.WithDefaults()
	data, err := io.ReadAll(io.LimitReader(r, int64(l.MaxPlanBytes)+1))
	if err != nil {
		return Plan{}, fmt.Errorf("read plan: %w", err)
	}
	return ParseBytes(data, l)
}

// ParseBytes parses a plan strictly: it refuses a plan over l.MaxPlanBytes,
// bytes that are not UTF-8, data after the plan's object, a key named twice
// in one object at any depth (both values would reach history, the check
// would see one), escapes of lone UTF-16 surrogates, unknown fields, and a
// turn that is not a JSON integer ("1", 1.0 and 1e0 are refused). Every
// problem names its field, in a *ValidationError. Everything else is left to
// Validate, so that all problems of a well-formed plan are reported at once.
func ParseBytes(data []byte, l Limits) (Plan, error) {
	l = l.WithDefaults()
	if probs := strictCheck(data, l.MaxPlanBytes); len(probs) > 0 {
		return Plan{}, newValidationError(probs)
	}
	var raw struct {
		SessionID   string          `json:"session_id"`
		Turn        json.RawMessage `json:"turn"`
		RequestID   string          `json:"request_id"`
		RequestedBy string          `json:"requested_by"`
		Parallel    bool            `json:"parallel"`
		Steps       []Step          `json:"steps"`
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	d.DisallowUnknownFields()
	if err := d.Decode(&raw); err != nil {
		return Plan{}, newValidationError([]tool.FieldError{formatProblem(err)})
	}
	p := Plan{SessionID: raw.SessionID, RequestID: raw.RequestID, RequestedBy: raw.RequestedBy, Parallel: raw.Parallel, Steps: raw.Steps}
	if t := strings.TrimSpace(string(raw.Turn)); t != "" && t != "null" {
		// strconv.Atoi accepts exactly the JSON integers here: a string
		// keeps its quotes, 1.0 and 1e0 are not integers to it, and the
		// signs and zeros JSON forbids were refused by strictCheck.
		n, err := strconv.Atoi(t)
		if err != nil {
			return Plan{}, newValidationError([]tool.FieldError{{Path: "turn", Problem: "must be an integer >= 1, got " + tool.Clip(redact.String(t), 40) + " (write a JSON integer: 1, not \"1\", 1.0 or 1e0)"}})
		}
		p.Turn = n
	}
	return p, nil
}

// formatProblem names the field of a plan whose JSON does not fit the plan
// format.
func formatProblem(err error) tool.FieldError {
	const format = "the plan format (session_id, turn, request_id, requested_by, parallel, steps[] of {tool, args})"
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		if ute.Field == "" {
			return tool.FieldError{Path: "plan", Problem: fmt.Sprintf("must be a JSON object of %s, got a JSON %s", format, ute.Value)}
		}
		want := "JSON " + ute.Type.Kind().String()
		switch ute.Type.Kind() {
		case reflect.Slice:
			want = "JSON array"
		case reflect.Struct, reflect.Map:
			want = "JSON object"
		}
		return tool.FieldError{Path: ute.Field, Problem: fmt.Sprintf("must be a %s, got a JSON %s", want, ute.Value)}
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		if n, err := strconv.Unquote(name); err == nil {
			name = n
		}
		return tool.FieldError{Path: tool.PathName(name), Problem: "is not a field of " + format + ": remove it"}
	}
	return tool.FieldError{Path: "plan", Problem: fmt.Sprintf("is not JSON of %s: %s", format, tool.Clip(redact.String(msg), 200))}
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

// newValidationError lists at most maxProblems problems, the last saying how
// many more there are, so that a refusal stays small enough for a status or
// a history event.
func newValidationError(probs []tool.FieldError) *ValidationError {
	if len(probs) > maxProblems {
		more := len(probs) - (maxProblems - 1)
		probs = append(probs[:maxProblems-1:maxProblems-1], tool.FieldError{Path: "plan", Problem: fmt.Sprintf("%d more problem(s) not listed: fix the ones above and submit again", more)})
	}
	return &ValidationError{Problems: probs}
}

// Validate checks the plan against the tools in c under DefaultLimits (see
// ValidateWith).
func (p Plan) Validate(c tool.Catalog) error { return p.ValidateWith(c, DefaultLimits()) }

// ValidateWith checks the plan against the tools in c (nil: the plan's own
// fields and limits only, for a client that does not know the worker's
// tools) and the limits l, and
// returns a *ValidationError listing every problem (at most 20), or nil. It
// is deterministic, for workflows. Besides the tools' schemas (see
// tool.Schema.CheckWith: types, lengths, control characters, secrets, e-mail
// addresses, money ceilings) it checks session_id, turn, request_id and
// requested_by, the number of steps, the plan's encoded size, and that an
// irreversible write is the last step.
func (p Plan) ValidateWith(c tool.Catalog, l Limits) error {
	l = l.WithDefaults()
	var errs []tool.FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, tool.FieldError{Path: path, Problem: fmt.Sprintf(format, args...)})
	}
	switch {
	case p.SessionID == "":
		add("session_id", "is required")
	case len(p.SessionID) > l.MaxSessionIDLen || !sessionChars.MatchString(p.SessionID):
		add("session_id", "must be 1 to %d letters, digits, '.', '_' or '-' (it is part of every operation key), got %q", l.MaxSessionIDLen, tool.Clip(redact.String(p.SessionID), 40))
	}
	if p.Turn < 1 {
		add("turn", "must be an integer >= 1, got %d", p.Turn)
	}
	if p.RequestID != "" {
		if msg := tool.CheckText(p.RequestID, l.MaxRequestIDLen, false); msg != "" {
			add("request_id", "%s", msg)
		}
	}
	if p.RequestedBy != "" {
		if msg := tool.CheckText(p.RequestedBy, l.MaxRequestedByLen, false); msg != "" {
			add("requested_by", "%s", msg)
		} else if err := operators.CheckIdentity(p.RequestedBy); err != nil {
			// Four eyes compares it with the decider: no invisible
			// characters to tell two spellings of one person apart.
			add("requested_by", "%s", strings.TrimPrefix(err.Error(), "operators: "))
		}
	}
	if b, err := json.Marshal(p); err != nil {
		add("plan", "cannot be encoded as JSON (%s): check every step's args", tool.Clip(redact.String(err.Error()), 120))
	} else if len(b) > l.MaxPlanBytes {
		add("plan", "is %d bytes as JSON, the limit is %d bytes (max_plan_bytes): split it into turns", len(b), l.MaxPlanBytes)
	}
	switch {
	case len(p.Steps) == 0:
		add("steps", "must list at least one tool call")
	case len(p.Steps) > l.MaxSteps:
		add("steps", "lists %d tool calls, the limit is %d (max_steps): split the plan into turns; its steps were not checked", len(p.Steps), l.MaxSteps)
		return newValidationError(errs)
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
				prev, n, tool.PathName(s.Tool), prev)
			lastIrreversible = 0
		}
		if s.Tool == "" {
			add(path+".tool", "is required")
			continue
		}
		if c == nil {
			// No catalogue: the plan's own fields only; the tools'
			// checks are the workflow's, against the worker's tools.
			if s.Hold != "" {
				if msg := tool.CheckText(s.Hold, MaxHoldLen, false); msg != "" {
					add(path+".hold", "%s", msg)
				}
			}
			continue
		}
		spec, ok := c.Spec(s.Tool)
		if !ok {
			add(path+".tool", "unknown tool %q: use one the worker registers", tool.Clip(redact.String(s.Tool), 64))
			continue
		}
		if spec.Reversal {
			add(path+".tool", "%s is a reversal used only by compensation: plans cannot call it", s.Tool)
			continue
		}
		errs = append(errs, spec.Args.CheckWith(path+".args", s.Args, l.argLimits(spec))...)
		if s.Hold != "" {
			if msg := tool.CheckText(s.Hold, MaxHoldLen, false); msg != "" {
				add(path+".hold", "%s", msg)
			}
		}
		if spec.Class.IsWrite() && !spec.Compensable() {
			if p.Parallel {
				add(path+".tool", "%s cannot be undone: it cannot run in a parallel plan (a sibling's failure would leave it done); send it in a later turn", s.Tool)
				continue
			}
			lastIrreversible = n
		}
	}
	if len(errs) > 0 {
		return newValidationError(errs)
	}
	return nil
}

// IsValidation reports whether err is a plan validation error.
func IsValidation(err error) bool {
	var v *ValidationError
	return errors.As(err, &v)
}

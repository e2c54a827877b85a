package plan

import (
	"fmt"
	"sort"
	"strings"

	"github.com/agentsaga/agentsaga/tool"
)

// Default limits of a plan (see Limits).
const (
	DefaultMaxPlanBytes      = 256 << 10 // 256 KiB of JSON
	DefaultMaxSteps          = 50
	DefaultMaxSessionIDLen   = 128
	DefaultMaxRequestIDLen   = 128
	DefaultMaxRequestedByLen = 64
	DefaultMaxStringLen      = tool.DefaultMaxStringLen   // 1,000 bytes per string argument
	DefaultMaxAmountMinor    = tool.DefaultMaxAmountMinor // 100,000,000 minor units (1,000,000.00)
)

// maxProblems bounds how many problems one ValidationError lists.
const maxProblems = 20

// Limits bound what a plan may hold. A zero field means its default (see
// DefaultLimits); Parse, ParseWith, Validate and ValidateWith apply them, so
// the CLI refuses a plan before contacting Temporal and the workflow refuses
// the same plan started by another client. Workflows should record the
// limits they validated with, so a replay sees the same verdict.
type Limits struct {
	// MaxPlanBytes is the largest plan, in bytes of JSON (as read, and as
	// the plan encodes). Default 256 KiB.
	MaxPlanBytes int `json:"max_plan_bytes,omitempty"`
	// MaxSteps is the most tool calls one plan may list. Default 50.
	MaxSteps int `json:"max_steps,omitempty"`
	// MaxSessionIDLen bounds session_id, in bytes. Default 128.
	MaxSessionIDLen int `json:"max_session_id_len,omitempty"`
	// MaxRequestIDLen bounds request_id, in bytes. Default 128.
	MaxRequestIDLen int `json:"max_request_id_len,omitempty"`
	// MaxRequestedByLen bounds requested_by, in bytes. Default 64.
	MaxRequestedByLen int `json:"max_requested_by_len,omitempty"`
	// MaxStringLen bounds every string argument, in bytes, unless its
	// field declares tool.Field.MaxLen. Default 1,000.
	MaxStringLen int `json:"max_string_len,omitempty"`
	// MaxAmountMinor is the ceiling of every money argument of a tool that
	// declares no tool.Spec.MaxAmountMinor. Default 100,000,000 minor units.
	MaxAmountMinor int64 `json:"max_amount_minor,omitempty"`
	// ToolMaxAmountMinor overrides the money ceiling of the named tools
	// (above their Spec.MaxAmountMinor), for an operator who must lower or
	// raise one without a new build.
	ToolMaxAmountMinor map[string]int64 `json:"tool_max_amount_minor,omitempty"`
}

// DefaultLimits returns the documented default limits: 256 KiB plans, 50
// steps, session_id and request_id 128 bytes, requested_by 64 bytes, string
// arguments 1,000 bytes (unless the field says), money at most 100,000,000
// minor units unless the tool declares its own ceiling.
func DefaultLimits() Limits {
	return Limits{
		MaxPlanBytes:      DefaultMaxPlanBytes,
		MaxSteps:          DefaultMaxSteps,
		MaxSessionIDLen:   DefaultMaxSessionIDLen,
		MaxRequestIDLen:   DefaultMaxRequestIDLen,
		MaxRequestedByLen: DefaultMaxRequestedByLen,
		MaxStringLen:      DefaultMaxStringLen,
		MaxAmountMinor:    DefaultMaxAmountMinor,
	}
}

// WithDefaults returns l with every zero (or negative) field set to its
// default.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.MaxPlanBytes, d.MaxPlanBytes)
	set(&l.MaxSteps, d.MaxSteps)
	set(&l.MaxSessionIDLen, d.MaxSessionIDLen)
	set(&l.MaxRequestIDLen, d.MaxRequestIDLen)
	set(&l.MaxRequestedByLen, d.MaxRequestedByLen)
	set(&l.MaxStringLen, d.MaxStringLen)
	if l.MaxAmountMinor <= 0 {
		l.MaxAmountMinor = d.MaxAmountMinor
	}
	return l
}

// Check reports a limit that cannot be meant: a negative value, or a tool
// ceiling that is not positive. Flags and configuration should call it.
func (l Limits) Check() error {
	var bad []string
	for name, v := range map[string]int64{
		"max_plan_bytes": int64(l.MaxPlanBytes), "max_steps": int64(l.MaxSteps), "max_session_id_len": int64(l.MaxSessionIDLen),
		"max_request_id_len": int64(l.MaxRequestIDLen), "max_requested_by_len": int64(l.MaxRequestedByLen),
		"max_string_len": int64(l.MaxStringLen), "max_amount_minor": l.MaxAmountMinor,
	} {
		if v < 0 {
			bad = append(bad, fmt.Sprintf("%s is %d", name, v))
		}
	}
	for t, v := range l.ToolMaxAmountMinor {
		if v <= 0 {
			bad = append(bad, fmt.Sprintf("tool_max_amount_minor[%s] is %d", t, v))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("plan limits refused (%s): set positive values, or 0 for a default", strings.Join(bad, "; "))
	}
	return nil
}

// argLimits are the argument limits of one tool under l.
func (l Limits) argLimits(spec tool.Spec) tool.ArgLimits {
	a := tool.ArgLimits{MaxStringLen: l.MaxStringLen, MaxAmountMinor: l.MaxAmountMinor}
	if spec.MaxAmountMinor > 0 {
		a.MaxAmountMinor = spec.MaxAmountMinor
	}
	if v, ok := l.ToolMaxAmountMinor[spec.Name]; ok && v > 0 {
		a.MaxAmountMinor = v
	}
	return a
}

package mcpgw

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/workflows"
)

// The states of a Result besides the turn states (workflows.TurnSucceeded,
// TurnFailed, TurnWaiting, TurnRunning).
const (
	// StateRefused: nothing was run (bad arguments or _meta, or the
	// session refused the turn: a conflict, an ended session, an earlier
	// turn still waiting for a person).
	StateRefused = "refused"
	// StateNoAnswer: the turn did not answer in time or the connection to
	// Temporal failed; repeating the call the same way reads the turn.
	StateNoAnswer = "no_answer"
)

// MetaOperationKey is the field of a result's _meta that holds the call's
// operation key (the result's _meta also holds MetaSession and MetaTurn, so
// a client can resend the call under the same turn).
const MetaOperationKey = "agentsaga/operation_key"

// Result is the structuredContent of every tools/call result.
type Result struct {
	// State is succeeded, failed, waiting or running (the turn's), or
	// refused or no_answer (the gateway's). A suspected duplicate is a turn
	// of its own that waits for a person (Held says of what).
	State   string `json:"state"`
	Tool    string `json:"tool"`
	Session string `json:"session"`
	// Turn and Key name the call's turn and operation key.
	Turn       int             `json:"turn,omitempty"`
	Key        string          `json:"key,omitempty"`
	ExternalID string          `json:"external_id,omitempty"`
	Data       json.RawMessage `json:"result,omitempty"`
	Error      string          `json:"error,omitempty"`
	// Step is the step's full status (attempts, decisions, compensation).
	Step *workflows.StepStatus `json:"step,omitempty"`
	// Question is the open question of a waiting call, with its card.
	Question *workflows.Question `json:"question,omitempty"`
	// Held says which earlier call a suspected duplicate repeats.
	Held *Held `json:"held,omitempty"`
	// Message is the text content.
	Message string `json:"message"`
}

// Held describes the earlier call a suspected duplicate repeats.
type Held struct {
	Reason       string    `json:"reason"` // suspected_duplicate
	Turn         int       `json:"turn"`
	Key          string    `json:"key"`
	At           time.Time `json:"at"`
	Window       string    `json:"window"`
	HeldUntil    time.Time `json:"held_until"`
	EarlierState string    `json:"earlier_state"`
}

// fill copies a turn's result into out and words it.
func fill(out Result, res workflows.TurnResult) Result {
	out.State, out.Error = res.State, res.Error
	if len(res.Steps) > 0 {
		s := res.Steps[0]
		out.Step, out.Key, out.ExternalID, out.Data = &s, s.Key, s.ExternalID, s.Result
		if out.Error == "" && s.LastError != "" && res.State == workflows.TurnFailed {
			out.Error = s.LastError
		}
	}
	out.Question = res.Question
	switch res.State {
	case workflows.TurnSucceeded:
		out.Message = fmt.Sprintf("%s succeeded (turn %d, operation key %s%s).", out.Tool, out.Turn, out.Key, ext(out.ExternalID))
		if len(out.Data) > 0 {
			out.Message += "\nresult: " + string(out.Data)
		}
	case workflows.TurnFailed:
		out.Message = fmt.Sprintf("%s FAILED (turn %d, operation key %s): %s", out.Tool, out.Turn, out.Key, out.Error)
		if s := out.Step; s != nil && s.Compensation != nil {
			out.Message += fmt.Sprintf("\nreversal %s: %s", s.Compensation.Tool, s.Compensation.State)
		}
	case workflows.TurnWaiting:
		out.Message = waitingText(out)
	default:
		out.Message = fmt.Sprintf("%s is still running (turn %d, operation key %s): call this tool again with the same arguments and the same _meta to read its result; it will not run twice.", out.Tool, out.Turn, out.Key)
		if s := out.Step; s != nil && !s.InFlightUntil.IsZero() {
			// The in-flight horizon: say what the call waits for and until when.
			out.Message += fmt.Sprintf("\nIts answer was lost and the provider does not show the effect yet; its request may still land until %s, when the provider is asked again (found: succeeded; still absent: sent again under the same key).",
				s.InFlightUntil.UTC().Format(time.RFC3339))
		}
	}
	return out
}

func ext(id string) string {
	if id == "" {
		return ""
	}
	return ", external id " + id
}

// waitingText words a call that waits for a person, with the card, and
// tells the truth for each kind of question: an approval has not run; an
// unknown outcome may have happened; a reversal failed. It names the command
// that answers it.
func waitingText(out Result) string {
	var b strings.Builder
	wf := workflows.SessionWorkflowID(out.Session)
	step := "N"
	if out.Question != nil {
		step = fmt.Sprint(out.Question.Step)
	}
	var hint string
	switch q := out.Question; {
	case q != nil && q.Kind == workflows.QuestionOutcome:
		fmt.Fprintf(&b, "WAITING FOR A HUMAN: the outcome of %s is UNKNOWN, it MAY HAVE HAPPENED (turn %d, operation key %s): the provider's answer was lost and it could not be looked up; a person checks and says what happened.", out.Tool, out.Turn, out.Key)
		hint = "starter resolve " + wf + " --step " + step + " --outcome succeeded|failed|retry --note TEXT"
	case q != nil && q.Kind == workflows.QuestionReversal:
		fmt.Fprintf(&b, "WAITING FOR A HUMAN: %s was done, and its reversal failed (turn %d, operation key %s); a person says what to do with it.", out.Tool, out.Turn, out.Key)
		hint = "starter resolve " + wf + " --step " + step + " --outcome succeeded|retry|failed --note TEXT"
	default:
		fmt.Fprintf(&b, "WAITING FOR A HUMAN: %s has NOT been done yet, it waits for approval (turn %d, operation key %s).", out.Tool, out.Turn, out.Key)
		hint = "starter approve " + wf + " --step " + step
		if q != nil && q.Card.Clash != "" {
			hint += " --override (the card shows a clash: approving lets the call through it)"
		}
		hint += ", or --reject"
	}
	if q := out.Question; q != nil {
		c := q.Card
		fmt.Fprintf(&b, "\nquestion %s (%s) on step %d of workflow %s; answers: %s", q.ID, q.Kind, q.Step, wf, strings.Join(q.Answers, ", "))
		for _, l := range c.Lines() {
			fmt.Fprintf(&b, "\n  %-12s %s", l.Label+":", l.Value)
		}
		if !q.ExpiresAt.IsZero() {
			fmt.Fprintf(&b, "\n  %-12s %s", "expires:", q.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	b.WriteString("\nA person decides (`" + hint + "`). " +
		"Call this tool again later with the same arguments and the same _meta to read the final result; it will not run twice, " +
		"from any connection. To mean a second, separate call, send it with a new _meta \"" + MetaKey + "\" (a new turn).")
	return b.String()
}

// refusal answers a call that ran nothing.
func refusal(out Result, msg string) *mcp.CallToolResult {
	out.State, out.Error = StateRefused, msg
	out.Message = "REFUSED, nothing was run: " + msg
	r := render(out)
	r.IsError = true
	return r
}

// render makes the MCP result of out: its message as text, out as
// structuredContent, the session, turn and key in _meta. Failed turns are
// errors; waiting and running ones are not (they say what to do next).
func render(out Result) *mcp.CallToolResult {
	// The turn is the engine's counter, never a card number: the model
	// reads it whole (and the key that holds it) to resend the call.
	out.Message = redact.StringKeeping(out.Message, int64(out.Turn))
	r := &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: out.Message}},
		StructuredContent: out,
		IsError:           out.State == workflows.TurnFailed,
	}
	if out.Session != "" {
		r.Meta = mcp.Meta{MetaSession: out.Session}
		if out.Turn != 0 {
			r.Meta[MetaTurn] = out.Turn
			r.Meta[MetaOperationKey] = out.Key
		}
	}
	return r
}

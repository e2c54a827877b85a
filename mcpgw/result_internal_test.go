package mcpgw

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentsaga/agentsaga/workflows"
)

// The waiting text tells the truth for each kind of question and names the
// command that answers it: an approval has not run (approve, --override when
// the card shows a clash), an unknown outcome may have happened (resolve), a
// failed reversal is resolved too.
func TestWaitingTextTellsTheTruth(t *testing.T) {
	base := Result{Tool: "send_email", Turn: 1, Key: "s:1:1:send_email", Session: "s"}
	for _, c := range []struct {
		kind, clash string
		want, not   []string
	}{
		{workflows.QuestionApproval, "", []string{"has NOT been done yet", "starter approve agent-session:s --step 1", "--reject"}, []string{"--override", "resolve"}},
		{workflows.QuestionApproval, "refund re_1 active", []string{"--override"}, nil},
		{workflows.QuestionOutcome, "", []string{"MAY HAVE HAPPENED", "starter resolve agent-session:s --step 1 --outcome succeeded|failed|retry"}, []string{"has NOT been done", "starter approve"}},
		{workflows.QuestionReversal, "", []string{"reversal failed", "starter resolve agent-session:s --step 1"}, []string{"has NOT been done", "starter approve"}},
	} {
		out := base
		out.Question = &workflows.Question{ID: "q1", Kind: c.kind, Step: 1, Answers: []string{"x"}, Card: workflows.Card{Clash: c.clash}}
		got := waitingText(out)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s (clash %q): %q lacks %q", c.kind, c.clash, got, w)
			}
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("%s (clash %q): %q says %q", c.kind, c.clash, got, n)
			}
		}
	}
}

// The turn and key the model reads are whole even when the turn passes the
// Luhn check (a keyed turn has 13 digits: one in ten does); customer text in
// the same message stays masked.
func TestRenderKeepsALuhnValidTurnWhole(t *testing.T) {
	out := Result{Tool: "send_email", Session: "s1", Turn: 1099511640121, Key: "s1:1099511640121:1:send_email", ExternalID: "4111 1111 1111 1111"}
	r := render(fill(out, workflows.TurnResult{State: workflows.TurnSucceeded}))
	got := r.Content[0].(*mcp.TextContent).Text
	want := "send_email succeeded (turn 1099511640121, operation key s1:1099511640121:1:send_email, external id [redacted card ending 1111])."
	if got != want {
		t.Fatalf("the model reads %q, want %q", got, want)
	}
}

// A call whose step waits out the in-flight horizon says what it waits for
// and until when, and that nothing is sent twice.
func TestRunningTextNamesTheInFlightHorizon(t *testing.T) {
	until := time.Date(2026, 12, 6, 21, 0, 30, 0, time.UTC)
	out := Result{Tool: "create_record", Session: "s", Turn: 3}
	step := workflows.StepStatus{Key: "s:3:1:create_record", InFlightUntil: until}
	got := fill(out, workflows.TurnResult{State: workflows.TurnRunning, Steps: []workflows.StepStatus{step}}).Message
	for _, w := range []string{"still running", "may still land until 2026-12-06T21:00:30Z", "same key"} {
		if !strings.Contains(got, w) {
			t.Errorf("%q lacks %q", got, w)
		}
	}
	plain := fill(out, workflows.TurnResult{State: workflows.TurnRunning, Steps: []workflows.StepStatus{{Key: step.Key}}}).Message
	if strings.Contains(plain, "may still land") {
		t.Errorf("a step with no horizon says it waits for one: %q", plain)
	}
}

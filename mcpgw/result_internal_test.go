package mcpgw

import (
	"strings"
	"testing"

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

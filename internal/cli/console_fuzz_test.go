package cli

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/workflows"
)

// FuzzDecideRequest feeds arbitrary bytes to the console's parser of POST
// /api/decide bodies: whatever it accepts is one JSON object whose every
// field is valid UTF-8 within its limit, with a known action and a
// well-formed card digest; it never panics. Seeds are nasty cases.
// Long run: go test -fuzz FuzzDecideRequest -fuzztime 10m ./internal/cli/
func FuzzDecideRequest(f *testing.F) {
	digest := workflows.CardDigest(workflows.Card{})
	for _, seed := range []string{
		`{"workflow_id":"agent-plan:s:1","question_id":"q1-step1-approval","action":"approve","reason":"ok","card_digest":"` + digest + `"}`,
		`{"workflow_id":"agent-plan:s:1","question_id":"q2-step2-outcome","action":"succeeded","external_id":"msg_1","reason":"seen","card_digest":"` + digest + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","action":"reject","reason":"x","card_digest":"` + digest + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","reason":"x","card_digest":"` + digest + `"}{"action":"reject"}`,
		`{"workflow_id":"a","question_id":"q","action":"APPROVE","reason":"x","card_digest":"` + digest + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","reason":"   ","card_digest":"` + digest + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","reason":"x\u0000y","card_digest":"` + digest + `"}`,
		"{\"workflow_id\":\"a\xff\",\"question_id\":\"q\",\"action\":\"approve\",\"reason\":\"x\",\"card_digest\":\"" + digest + "\"}",
		`{"workflow_id":"a","question_id":"q","action":"failed","external_id":"x","reason":"x","card_digest":"` + digest + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","reason":"x","card_digest":"sha256:` + strings.Repeat("G", 64) + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","reason":"x","card_digest":"` + digest + `","__proto__":{}}`,
		`[{"workflow_id":"a"}]`, `null`, `"approve"`, ``, `{`, `{"reason":1e999}`,
		`{"workflow_id":"` + strings.Repeat("w", 600) + `","question_id":"q","action":"approve","reason":"x","card_digest":"` + digest + `"}`,
		`{"workflow_id":"a","question_id":"q","action":"approve","reason":"` + strings.Repeat("\u202e", 700) + `","card_digest":"` + digest + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"reason":"` + strings.Repeat("r", 20000) + `"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := parseDecideRequest(body)
		if err != nil {
			return
		}
		for _, fl := range []struct {
			name, v string
			limit   int
		}{{"workflow_id", d.WorkflowID, maxConsoleWorkflowID}, {"question_id", d.QuestionID, workflows.MaxQuestionIDLen},
			{"reason", d.Reason, workflows.MaxNoteLen}, {"external_id", d.ExternalID, workflows.MaxExternalIDLen}} {
			if len(fl.v) > fl.limit || !utf8.ValidString(fl.v) {
				t.Fatalf("accepted %s of %d bytes (limit %d) or not UTF-8", fl.name, len(fl.v), fl.limit)
			}
		}
		if strings.TrimSpace(d.Reason) == "" || d.WorkflowID == "" || d.QuestionID == "" {
			t.Fatalf("accepted a request without reason, workflow or question: %+v", d)
		}
		if workflows.CheckCardDigest(d.CardDigest) != nil || d.CardDigest == "" {
			t.Fatalf("accepted card_digest %q", d.CardDigest)
		}
		switch d.Action {
		case "approve", "reject", "override", "succeeded", "failed", "retry":
		default:
			t.Fatalf("accepted action %q", d.Action)
		}
	})
}

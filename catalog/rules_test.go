package catalog_test

import (
	"strings"
	"testing"
)

// An error rule may not make a write that may have happened final: a 5xx,
// a 408 timeout or a 3xx with outcome rejected or conflict, or a codes-only
// rule (which matches any status) with a final outcome. A READ may; a
// retryable outcome may; a named 4xx may.
func TestErrorRulesNeverMakeAWritesUnknownFinal(t *testing.T) {
	for _, c := range []struct {
		name, class, rule, want string
	}{
		{"5xx rejected", "IDEMPOTENT_WRITE", `{status: [500], outcome: rejected}`, "tools[0].errors.rules[0].status[0]: 500 with outcome rejected would make a write's 5xx final"},
		{"504 conflict", "NON_IDEMPOTENT_WRITE", `{status: [400, 504], outcome: conflict}`, "tools[0].errors.rules[0].status[1]: 504 with outcome conflict would make a write's 5xx final"},
		{"timeout", "CONDITIONAL_WRITE", `{status: [408], outcome: rejected}`, "tools[0].errors.rules[0].status[0]: 408 with outcome rejected would make a write's timeout final"},
		{"codes only", "IDEMPOTENT_WRITE", `{codes: [card_declined], outcome: rejected}`, "tools[0].errors.rules[0].status: is missing: a codes-only rule matches every status"},
		{"3xx", "IDEMPOTENT_WRITE", `{status: [302], outcome: rejected}`, "tools[0].errors.rules[0].status[0]: 302 is a redirect"},
		{"3xx unavailable", "IDEMPOTENT_WRITE", `{status: [307], outcome: unavailable}`, "tools[0].errors.rules[0].status[0]: 307 is a redirect"},
		{"5xx unavailable", "IDEMPOTENT_WRITE", `{status: [500, 503], outcome: unavailable}`, ""},
		{"5xx in flight", "NON_IDEMPOTENT_WRITE", `{codes: [busy], outcome: in_flight}`, ""},
		{"4xx rejected", "IDEMPOTENT_WRITE", `{status: [400, 402, 422], codes: [card_declined], outcome: rejected}`, ""},
		{"read 5xx rejected", "READ", `{status: [500], outcome: rejected}`, ""},
		{"read codes only", "READ", `{codes: [gone], outcome: rejected}`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			lookup := ""
			if c.class != "READ" {
				lookup = `
    request: {method: POST, path: /w, key: {header: Idempotency-Key}}
    response: {external_id: /id}
    no_lookup: true`
			} else {
				lookup = `
    request: {path: /w}`
			}
			yaml := `version: 1
systems: [{name: a, base_url: "https://a.example.com"}]
tools:
  - name: w
    description: W.
    system: a
    class: ` + c.class + `
    timeout: 1s` + lookup + `
    errors:
      rules:
        - ` + c.rule + "\n"
			err := parse(t, yaml, nil)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v; want a problem %q", err, c.want)
			}
			wantProblems(t, err, c.want)
		})
	}
}

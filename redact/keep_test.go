package redact_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/redact"
)

// luhnTurn is a keyed MCP turn (2^40 and up, 13 digits) that passes the
// Luhn check: String takes it for a card number.
const luhnTurn = 1099511640121

func TestStringKeepingKeepsTheEnginesCounters(t *testing.T) {
	if !redact.LooksLikeCardNumber("1099511640121") {
		t.Fatal("the test's turn must look like a card number")
	}
	for _, c := range []struct{ in, want string }{
		// The engine's identifiers: whole.
		{"send_email succeeded (turn 1099511640121, operation key s1:1099511640121:1:send_email).",
			"send_email succeeded (turn 1099511640121, operation key s1:1099511640121:1:send_email)."},
		{"agent-plan:s1:1099511640121", "agent-plan:s1:1099511640121"},
		// Customer input around it: masked as always.
		{"turn 1099511640121: card 4111 1111 1111 1111", "turn 1099511640121: card [redacted card ending 1111]"},
		// A session id that is a card number stays masked.
		{"4111111111111111:1099511640121:1:x", "[redacted card ending 1111]:1099511640121:1:x"},
		// The counter only a part of a longer grouped number: masked.
		{"4 1099511640121", "4 [redacted card ending 0121]"},
		{"password=1099511640121", "password=[redacted]"},
	} {
		if got := redact.StringKeeping(c.in, luhnTurn); got != c.want {
			t.Errorf("StringKeeping(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := redact.String("turn 1099511640121"); !strings.Contains(got, "redacted") {
		t.Errorf("String without the counter kept %q: the test proves nothing", got)
	}
	if got := redact.StringKeeping("turn 4111111111111111", luhnTurn); got != "turn [redacted card ending 1111]" {
		t.Errorf("another number kept: %q", got)
	}
}

// The log handler writes a Counter as its number and an Identifier with its
// counters whole, its other parts masked.
func TestHandlerKeepsCountersAndIdentifiers(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(redact.NewHandler(slog.NewTextHandler(&buf, nil)))
	log.Info("call", "turn", redact.Counter(luhnTurn),
		"key", redact.Identifier{Text: "4111111111111111:1099511640121:1:x", Counters: []int64{luhnTurn}},
		"plain", int64(luhnTurn))
	got := buf.String()
	for _, want := range []string{"turn=1099511640121", "key=\"[redacted card ending 1111]:1099511640121:1:x\"", "plain=\"[redacted card ending 0121]\""} {
		if !strings.Contains(got, want) {
			t.Errorf("log line %q lacks %s", got, want)
		}
	}
}

package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/activities"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/tool"
)

// What a card shows of a call is masked, on one line and bounded: a
// secret in an argument or a provider's answer never reaches the card, a
// long value is clipped to its bound, and only the latest MaxCardCalls
// calls are kept, the earlier counted.
func TestCardMasksAndBoundsWhatItShows(t *testing.T) {
	spec := tool.Spec{Name: "pay", Args: tool.Schema{Fields: []tool.Field{
		{Name: "order_id", Type: tool.String}, {Name: "amount_minor", Type: tool.Money}, {Name: "note", Type: tool.String}}}}
	args := map[string]any{"order_id": "o1", "amount_minor": json.Number("150000"), "currency": "eur",
		"note": "card 4111 1111 1111 1111\nline two " + strings.Repeat("x", 400), "token": "sk_live_51HxYzABCDEFGHIJKLMNOP"}
	got := argumentsOf(spec, args)
	require.Equal(t, "order_id: o1", got[0])
	require.Equal(t, "amount_minor: 1,500.00 EUR", got[1])
	require.NotContains(t, got[2], "4111", "masked")
	require.NotContains(t, got[2], "\n", "one line")
	require.LessOrEqual(t, len(got[2]), len("note: ")+MaxCardValueLen+len("…"), "clipped")
	require.Equal(t, []string{"currency: eur", "token"}, []string{got[3], got[4][:5]}, "other arguments after the tool's, by name")
	require.NotContains(t, got[4], "sk_live_51HxYzABCDEFGHIJKLMNOP", "masked")
	// A secret-named argument is masked whatever its value looks like.
	plain := argumentsOf(tool.Spec{}, map[string]any{"auth_token": "abc123xyz", "pin": json.Number("1234"), "city": "Bonn"})
	require.Equal(t, []string{"auth_token: [redacted]", "city: Bonn", "pin: [redacted]"}, plain)
	secretObject := tool.Spec{Args: tool.Schema{Fields: []tool.Field{{Name: "card_token", Type: tool.String, Required: true}}}}
	require.Equal(t, "card_token [redacted]", objectOf(secretObject, map[string]any{"card_token": "tok_abc123"}))
	reason := reasonOf(map[string]any{"note": "card 4111 1111 1111 1111\nline two"}, "")
	require.NotContains(t, reason, "4111 1111", "masked")
	require.True(t, strings.HasSuffix(reason, " line two"), "one line: %s", reason)

	many := map[string]any{}
	for i := range MaxCardArguments + 3 {
		many[fmt.Sprintf("a%02d", i)] = i
	}
	got = argumentsOf(tool.Spec{}, many)
	require.Len(t, got, MaxCardArguments+1)
	require.Equal(t, "(3 more arguments not shown)", got[MaxCardArguments])

	r := newRunState(&Saga{}, tool.Specs{}, plan.Plan{SessionID: "s", Turn: 1})
	at := time.Date(2026, 12, 6, 22, 10, 1, 0, time.UTC)
	for i := range MaxCardCalls + 2 {
		r.logCall("k", at.Add(time.Duration(i)*time.Second), spec, 1, activities.Output{}, errors.New("declined Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl "+strings.Repeat("y", 500)))
	}
	r.logCall("k", at.Add(time.Minute), spec, 2, activities.Output{}, context.DeadlineExceeded)
	lines, _ := r.callLines("k")
	require.Len(t, lines, MaxCardCalls+1)
	require.Equal(t, "(3 earlier calls not shown)", lines[0])
	for _, l := range lines[1:] {
		require.NotContains(t, l, "eyJzdWIiOiIxIn0", "masked")
		require.LessOrEqual(t, len(l), MaxCardLineLen+len("…"))
	}
	require.Equal(t, "2026-12-06 22:11:01Z, 2 attempts: context deadline exceeded", lines[MaxCardCalls])

	r.logLookup("k", at, tool.Lookup{Status: tool.Absent, Authoritative: true, NotBefore: at.Add(10 * time.Second)}, nil)
	r.logLookup("k", at.Add(time.Second), tool.Lookup{Status: tool.Absent, Authoritative: true}, nil)
	_, look := r.callLines("k")
	require.Equal(t, "2026-12-06 22:10:02Z (lookup 2): absent (the provider's word)", look)
}

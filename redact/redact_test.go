package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/redact"
)

const visa = "4111111111111111"

func TestLooksLikeCardNumber(t *testing.T) {
	for s, want := range map[string]bool{
		visa:                   true,
		"4111 1111 1111 1111":  true,
		"4111-1111-1111-1111":  true,
		"5500005555555559":     true,
		"4111111111111112":     false, // Luhn fails
		"411111111111":         false, // 12 digits
		"41111111111111111111": false, // 20 digits
		"4111x1111111111111":   false,
		"":                     false,
		"order-1234":           false,
	} {
		require.Equal(t, want, redact.LooksLikeCardNumber(s), "%q", s)
	}
}

func TestString(t *testing.T) {
	for in, want := range map[string]string{
		"card " + visa + " declined":       "card [redacted] declined",
		"card 4111 1111 1111 1111, exp 12": "card [redacted], exp 12",
		"4111-1111-1111-1111 12/25":        "[redacted] 12/25",
		"4111 1111 1111 1111 12":           "[redacted] 12",
		"tok_" + visa:                      "tok_[redacted]",
		"order 4111111111111112 refunded":  "order 4111111111111112 refunded",
		"id 41111111111111111111":          "id 41111111111111111111",
		"amount 12900, order 1234":         "amount 12900, order 1234",
		"no digits":                        "no digits",
	} {
		require.Equal(t, want, redact.String(in), "%q", in)
	}
}

func TestSensitiveKey(t *testing.T) {
	for _, k := range []string{"card", "Card_Number", "PAN", "cvv", "CVC", "token", "access_token", "payment-token",
		"secret", "client_secret", "password", "api_key", "X-Api-Key", "Authorization", "card.number"} {
		require.True(t, redact.SensitiveKey(k), k)
	}
	for _, k := range []string{"company", "span", "order_id", "amount_minor", "card_brand", "idempotency_key", "status"} {
		require.False(t, redact.SensitiveKey(k), k)
	}
}

func TestJSON(t *testing.T) {
	in := `{"refund_id":"re_1","amount_minor":12900,"card_number":"` + visa + `","nested":{"Access_Token":"abc",
	"list":["` + visa + `", {"note":"paid with ` + visa + `"}, 4111111111111111, 129.00]},"password":null,"card_brand":"visa"}`
	out := redact.JSON(json.RawMessage(in))
	require.True(t, json.Valid(out), string(out))
	require.NotContains(t, string(out), visa)
	require.NotContains(t, string(out), "abc")
	require.JSONEq(t, `{"refund_id":"re_1","amount_minor":12900,"card_number":"[redacted]","nested":{"Access_Token":"[redacted]",
	"list":["[redacted]", {"note":"paid with [redacted]"}, "[redacted]", 129.00]},"password":null,"card_brand":"visa"}`, string(out))
	require.Contains(t, string(out), "129.00", "numbers are kept as written")
}

func TestJSONEdges(t *testing.T) {
	require.Nil(t, redact.JSON(nil))
	require.Nil(t, redact.JSON(json.RawMessage("  ")))
	out := redact.JSON(json.RawMessage("not json " + visa))
	require.True(t, json.Valid(out))
	require.False(t, strings.Contains(string(out), visa))
	require.Equal(t, `"[redacted]"`, string(redact.JSON(json.RawMessage(`"`+visa+`"`))))
	require.Equal(t, `"<a&b>"`, string(redact.JSON(json.RawMessage(`"<a&b>"`))))
}

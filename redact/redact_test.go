package redact_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

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
		"card " + visa + " declined":        "card [redacted card ending 1111] declined",
		"card 4111 1111 1111 1111, exp 12":  "card [redacted card ending 1111], exp 12",
		"4111-1111-1111-1111 12/25":         "[redacted card ending 1111] 12/25",
		"4111 1111 1111 1111 12":            "[redacted card ending 1111] 12",
		"tok_" + visa:                       "tok_[redacted card ending 1111]",
		"two " + visa + " 5500005555555559": "two [redacted card ending 1111] [redacted card ending 5559]",
		"order 4111111111111112 refunded":   "order 4111111111111112 refunded",
		"id 41111111111111111111":           "id 41111111111111111111",
		"amount 12900, order 1234":          "amount 12900, order 1234",
		"no digits":                         "no digits",
		// IBANs, with or without spaces, any case; a wrong check digit is kept.
		"pay DE89 3704 0044 0532 0130 00 now": "pay [redacted IBAN DE ending 3000] now",
		"GB82WEST12345698765432.":             "[redacted IBAN GB ending 5432].",
		"iban: de89370400440532013000":        "iban: [redacted IBAN DE ending 3000]",
		"DE88370400440532013000":              "DE88370400440532013000",
		"XDE89370400440532013000":             "XDE89370400440532013000",
		// API keys of known shapes keep their prefix.
		"key sk_live_51HxYzABCDEFGHIJKLMNOP":                    "key sk_live_[redacted]",
		"rk_test_abcdefgh12, pk_live_ABCDEFGH1234":              "rk_test_[redacted], pk_live_[redacted]",
		"slack xoxb-123456789012-abcdefghij":                    "slack xoxb-[redacted]",
		"gh ghp_abcdefghijklmnopqrstuvwxyz0123":                 "gh ghp_[redacted]",
		"aws AKIAIOSFODNN7EXAMPLE":                              "aws AKIA[redacted]",
		"openai sk-proj-abcdefghijklmnopqrstuvwx":               "openai sk-[redacted]",
		"task_live_abcdefghijk":                                 "task_live_abcdefghijk",
		"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl": "jwt [redacted token]",
		// Bearer tokens and Authorization values keep their scheme.
		"Authorization: Bearer abc.DEF-123":   "Authorization: Bearer [redacted]",
		"authorization: Basic dXNlcjpwYXNz":   "authorization: Basic [redacted]",
		`{"Authorization":"Token t0k3n-xyz"}`: `{"Authorization":"Token [redacted]"}`,
		"sent with bearer Zm9vYmFyYmF6":       "sent with bearer [redacted]",
		"the bearer receives the goods":       "the bearer receives the goods",
		// Secret assignments.
		"api_key=zzzz1234&x=1":              "api_key=[redacted]&x=1",
		`{"client_secret": "s3cr3t-value"}`: `{"client_secret": "[redacted]"}`,
		"password: hunter22 and more":       "password: [redacted] and more",
		"X-Api-Key: abcd1234":               "X-Api-Key: [redacted]",
		"the password policy changed":       "the password policy changed",
		"declined card 4111 1111 1111 1111 for Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl key sk_live_51HxYzABCDEFGHIJKLMNOP": "declined card [redacted card ending 1111] for Bearer [redacted] key sk_live_[redacted]",
	} {
		got := redact.String(in)
		require.Equal(t, want, got, "%q", in)
		require.Equal(t, got, redact.String(got), "idempotent on %q", in)
	}
}

func TestFind(t *testing.T) {
	for in, want := range map[string]redact.Kind{
		"card 4111 1111 1111 1111":                          redact.Card,
		"DE89 3704 0044 0532 0130 00":                       redact.IBAN,
		"sk_live_51HxYzABCDEFGHIJKLMNOP":                    redact.APIKey,
		"Bearer abc.DEF-123":                                redact.BearerToken,
		"Authorization: Basic dXNlcjpwYXNz":                 redact.BearerToken,
		"api_key=zzzz1234":                                  redact.Credential,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl": redact.APIKey,
	} {
		k, ok := redact.Find(in)
		require.True(t, ok, in)
		require.Equal(t, want, k, in)
	}
	for _, in := range []string{"", "ord_1001", "tok_visa", "cus_ana", "refund 12900 EUR", "[redacted card ending 1111]"} {
		_, ok := redact.Find(in)
		require.False(t, ok, in)
	}
}

func TestLooksLikeIBAN(t *testing.T) {
	require.True(t, redact.LooksLikeIBAN("DE89 3704 0044 0532 0130 00"))
	require.True(t, redact.LooksLikeIBAN("NL91ABNA0417164300"))
	require.False(t, redact.LooksLikeIBAN("NL91ABNA041716430"), "one character short")
	require.False(t, redact.LooksLikeIBAN("ZZ89370400440532013000"), "no such country")
	require.False(t, redact.LooksLikeIBAN("DE89370400440532013001"), "check digits wrong")
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
	"list":["` + visa + `", {"note":"paid with ` + visa + ` from DE89370400440532013000"}, 4111111111111111, 129.00]},"password":null,"card_brand":"visa",
	"` + visa + `":1}`
	out := redact.JSON(json.RawMessage(in))
	require.True(t, json.Valid(out), string(out))
	require.NotContains(t, string(out), visa)
	require.NotContains(t, string(out), "abc")
	require.JSONEq(t, `{"refund_id":"re_1","amount_minor":12900,"card_number":"[redacted]","nested":{"Access_Token":"[redacted]",
	"list":["[redacted card ending 1111]", {"note":"paid with [redacted card ending 1111] from [redacted IBAN DE ending 3000]"},
	"[redacted card ending 1111]", 129.00]},"password":null,"card_brand":"visa","[redacted card ending 1111]":1}`, string(out))
	require.Contains(t, string(out), "129.00", "numbers are kept as written")
	require.Equal(t, string(out), string(redact.JSON(out)), "idempotent")
}

func TestJSONEdges(t *testing.T) {
	require.Nil(t, redact.JSON(nil))
	require.Nil(t, redact.JSON(json.RawMessage("  ")))
	out := redact.JSON(json.RawMessage("not json " + visa))
	require.True(t, json.Valid(out))
	require.False(t, strings.Contains(string(out), visa))
	require.Equal(t, `"[redacted card ending 1111]"`, string(redact.JSON(json.RawMessage(`"`+visa+`"`))))
	require.Equal(t, `"<a&b>"`, string(redact.JSON(json.RawMessage(`"<a&b>"`))))
}

// Card numbers in every shape a person or a model might write them are
// found: other separators, line breaks, full-width and other scripts'
// digits, invisible characters between the groups.
func TestCardNumbersInOtherShapes(t *testing.T) {
	for _, s := range []string{
		"4242.4242.4242.4242",
		"4242/4242/4242/4242",
		"4242\n4242\n4242\n4242",
		"4242\r\n4242\r\n4242\r\n4242",
		"4242\t4242\t4242\t4242",
		"4242_4242_4242_4242",
		"4242\u00a04242\u00a04242\u00a04242", // no-break space
		"4242\u20134242\u20134242\u20134242", // en dash
		"4242\u200b4242\u200b4242\u200b4242", // zero-width space
		"４２４２４２４２４２４２４２４２",                   // full-width digits
		"４２４２　４２４２　４２４２　４２４２",                // full-width digits, ideographic space
		"٤٢٤٢٤٢٤٢٤٢٤٢٤٢٤٢",                   // Arabic-Indic digits
		"４２４２.4242/4242\n4242",               // mixed
	} {
		require.True(t, redact.LooksLikeCardNumber(s), "%q", s)
		kind, ok := redact.Find("pay with " + s + " please")
		require.True(t, ok, "%q", s)
		require.Equal(t, redact.Card, kind, "%q", s)
		got := redact.String("pay with " + s + " please")
		require.Equal(t, "pay with [redacted card ending 4242] please", got, "%q", s)
	}
	for _, s := range []string{
		"4242..4242.4242.4242", // two separators: not one number
		"4242.4242.4242.4241",  // Luhn fails
		"version 1.2.3.4",
		"2026/12/01",
	} {
		require.False(t, redact.LooksLikeCardNumber(s), "%q", s)
	}
}

// A UUID's digit groups are not a card number, even when they pass Luhn:
// session ids and keys made from UUIDs stay as they are.
func TestUUIDIsNotACard(t *testing.T) {
	for _, s := range []string{
		"mcp-7e72f28a-5619-4387-8331-0611038c016f",
		"agent-session:mcp-7e72f28a-5619-4387-8331-0611038c016f:1:1:apply_refund",
		"12345678-1234-1234-1234-123456789012",
	} {
		require.Equal(t, s, redact.String(s))
	}
	require.Equal(t, "[redacted card ending 1111] in 7e72f28a-5619-4387-8331-0611038c016f", redact.String(visa+" in 7e72f28a-5619-4387-8331-0611038c016f"))
}

// Every range of Unicode's decimal digits starts at a zero and holds whole
// runs of ten, which is what digitValue relies on (a digit's value is its
// distance from its range's start, mod 10); and digits of several scripts
// make the same card number.
func TestDigitValueOfEveryScript(t *testing.T) {
	for _, rg := range unicode.Nd.R16 {
		require.EqualValues(t, 1, rg.Stride)
		require.Zero(t, (rg.Hi-rg.Lo+1)%10, "range %U-%U", rg.Lo, rg.Hi)
	}
	for _, rg := range unicode.Nd.R32 {
		require.EqualValues(t, 1, rg.Stride)
		require.Zero(t, (rg.Hi-rg.Lo+1)%10, "range %U-%U", rg.Lo, rg.Hi)
	}
	for _, zero := range []rune{'0', '٠', '۰', '०', '๐', '０', 0x1d7ce} {
		card := strings.Map(func(r rune) rune { return zero + (r - '0') }, visa)
		require.True(t, redact.LooksLikeCardNumber(card), "%U: %q", zero, card)
		require.Equal(t, "[redacted card ending 1111]", redact.String(card), "%U", zero)
	}
}

// A password in a URL's user information is a credential: masked, and
// found (so a plan carrying it is refused).
func TestURLCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"see https://user:password@host.example/x":     "see https://user:[redacted]@host.example/x",
		"postgres://postgres:PW@db:5432/app":           "postgres://postgres:[redacted]@db:5432/app",
		"ftp://ana:p@ss@files.example":                 "ftp://ana:[redacted]@files.example",
		"https://host.example/path?x=1":                "https://host.example/path?x=1",
		"https://ana@host.example/":                    "https://ana@host.example/",
		"malformed postgres://postgres:PW@[::1 at end": "malformed postgres://postgres:[redacted]@[::1 at end",
	} {
		require.Equal(t, want, redact.String(in), "%q", in)
		_, found := redact.Find(in)
		require.Equal(t, want != in, found, "%q", in)
	}
}

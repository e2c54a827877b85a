package redact_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/agentsaga/agentsaga/redact"
)

// cardFrom makes a Luhn-valid card number of 13 to 19 digits out of seed's
// digits, written in one of sixteen styles (plain, spaces, dashes, mixed,
// dots, slashes, line feeds, CRLF, tabs, zero-width spaces, ideographic
// spaces, underscores, en dashes, and full-width digits plain, dotted or
// split by line feeds).
func cardFrom(seed string, style uint8) string {
	var d []byte
	for i := 0; i < len(seed); i++ {
		if seed[i] >= '0' && seed[i] <= '9' {
			d = append(d, seed[i])
		}
	}
	n := 13 + int(style/16)%7
	for len(d) < n-1 {
		d = append(d, '4')
	}
	d = d[:n-1]
	// The check digit that makes the Luhn sum a multiple of 10.
	sum := 0
	for i := range d {
		v := int(d[len(d)-1-i] - '0')
		if i%2 == 0 {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
	}
	d = append(d, byte('0'+(10-sum%10)%10))
	seps := []string{"", " ", "-", "", ".", "/", "\n", "\r\n", "\t", "\u200b", "\u3000", "_", "\u2013", "", ".", "\n"}
	k := int(style % 16)
	var b strings.Builder
	for i, c := range d {
		if i > 0 && i%4 == 0 {
			if k == 3 {
				b.WriteByte(" -"[i/4%2])
			}
			b.WriteString(seps[k])
		}
		if k >= 13 {
			b.WriteRune('０' + rune(c-'0')) // full-width digit
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// noDigits replaces the digits of s (of any script) by letters, so that s
// cannot run into the card number put next to it (a longer digit run is not
// a card).
func noDigits(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Nd, r) {
			return 'a' + r%10
		}
		return r
	}, s)
}

// FuzzRedact: a Luhn-valid card number put anywhere in any text never
// survives String or JSON; String and JSON are idempotent and leave nothing
// Find would report. Seeds: testdata/fuzz/FuzzRedact. Long run:
//
//	go test -fuzz FuzzRedact -fuzztime 10m ./redact/
func FuzzRedact(f *testing.F) {
	f.Add("card ", "4111111111111111", uint8(1), ", exp 12")
	f.Add("tok_", "5500005555555559", uint8(0), "")
	f.Add("iban DE89 3704 0044 0532 0130 00 ", "378282246310005", uint8(2), " Bearer abc.DEF-123")
	f.Add("pay ", "4242424242424242", uint8(4), " now")             // dots
	f.Add("pay ", "4242424242424242", uint8(6), "\nthanks")         // line feeds
	f.Add("card: ", "4242424242424242", uint8(13), "")              // full-width
	f.Add("url https://u:pw@h/ ", "4242424242424242", uint8(9), "") // zero-width spaces
	f.Add("", "4000056655665556", uint8(0x3f), ".")
	f.Fuzz(func(t *testing.T, prefix, digits string, style uint8, suffix string) {
		card := cardFrom(digits, style)
		if !redact.LooksLikeCardNumber(card) {
			t.Fatalf("generator made %q, not a card number", card)
		}
		in := noDigits(prefix) + card + noDigits(suffix)
		out := redact.String(in)
		if strings.Contains(out, card) {
			t.Fatalf("card %q survived in %q -> %q", card, in, out)
		}
		checkStable(t, in)
		checkStable(t, prefix+digits+suffix)
		doc := map[string]any{prefix: in}
		if plain := asciiDigits(card); plain[0] != '0' {
			doc["n"] = json.Number(plain) // a JSON number has no leading zero
		}
		raw, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("marshal %v: %v", doc, err)
		}
		js := redact.JSON(raw)
		if !json.Valid(js) || strings.Contains(string(js), card) {
			t.Fatalf("JSON kept card %q or is invalid: %s", card, js)
		}
		if again := redact.JSON(js); string(again) != string(js) {
			t.Fatalf("JSON is not idempotent: %s -> %s", js, again)
		}
	})
}

// asciiDigits returns the digits of a card number cardFrom wrote (ASCII
// or full-width digits), in ASCII.
func asciiDigits(card string) string {
	var b strings.Builder
	for _, r := range card {
		switch {
		case r >= '0' && r <= '9':
			b.WriteRune(r)
		case r >= '０' && r <= '９':
			b.WriteRune('0' + r - '０')
		}
	}
	return b.String()
}

// checkStable asserts that String(s) is a fixed point holding no secret.
func checkStable(t *testing.T, s string) {
	t.Helper()
	out := redact.String(s)
	if again := redact.String(out); again != out {
		t.Fatalf("String is not idempotent on %q: %q -> %q", s, out, again)
	}
	if k, ok := redact.Find(out); ok {
		t.Fatalf("String(%q) = %q still holds a %s", s, out, k)
	}
}

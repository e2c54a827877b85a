package cli

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestSafeNeutralisesEscapes(t *testing.T) {
	cases := map[string]string{
		"plain ord_1001 1,500.00 EUR":  "plain ord_1001 1,500.00 EUR",
		"Grüße, 日本":                    "Grüße, 日本",
		"\x1b[31mred\x1b[0m":           `\x1b[31mred\x1b[0m`,
		"\x1b]0;owned\x07":             `\x1b]0;owned\x07`,
		"line\nstep 4 approved by cfo": `line\nstep 4 approved by cfo`,
		"col\tumn\r":                   `col\tumn\r`,
		"del\x7f":                      `del\x7f`,
		"c1 csi \u009b2J":              `c1 csi \u009b2J`,
		"bidi \u202etxt.exe":           `bidi \u202etxt.exe`,
		"zero\u200bwidth":              `zero\u200bwidth`,
		"raw byte \x9b and \xff":       `raw byte \x9b and \xff`,
		"sep\u2028x":                   `sep\u2028x`,
		"tag \U000E0041":               `tag \ue0041`,
		"backspace\x08\x08\x08fake":    `backspace\x08\x08\x08fake`,
		"":                             "",
	}
	for in, want := range cases {
		require.Equal(t, want, safe(in), "%q", in)
	}
}

func TestJSONSafeKeepsTheValue(t *testing.T) {
	in := map[string]string{"note": "a\u009b2J \u202e \x7f \U000E0041 \x1b ok"}
	raw, err := json.Marshal(in)
	require.NoError(t, err)
	out := jsonSafe(raw)
	for _, r := range string(out) {
		require.False(t, unsafeRune(r), "%U left raw in %s", r, out)
	}
	var back map[string]string
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, in, back)
}

func FuzzSafe(f *testing.F) {
	for _, s := range []string{"ok", "\x1b[2J", "\u009b", "\u202e", "\xff\xfe", "a\nb", "\U000E0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := safe(s)
		if !utf8.ValidString(out) {
			t.Fatalf("safe(%q) = %q is not valid UTF-8", s, out)
		}
		for _, r := range out {
			if unsafeRune(r) {
				t.Fatalf("safe(%q) = %q keeps %U", s, out, r)
			}
		}
		clean := utf8.ValidString(s)
		for _, r := range s {
			clean = clean && !unsafeRune(r)
		}
		if clean && out != s {
			t.Fatalf("safe changed clean text %q to %q", s, out)
		}
		// JSON output: same value, nothing a terminal obeys.
		raw, _ := json.Marshal(s)
		js := jsonSafe(raw)
		for _, r := range string(js) {
			if unsafeRune(r) {
				t.Fatalf("jsonSafe(%s) keeps %U", raw, r)
			}
		}
		var a, b string
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(js, &b); err != nil || a != b {
			t.Fatalf("jsonSafe changed the value: %q -> %q (%v)", a, b, err)
		}
		if !bytes.Equal(raw, js) && clean {
			t.Fatalf("jsonSafe changed clean JSON %s", raw)
		}
	})
}

package operators

import (
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// confusables maps characters that look like a Latin letter or digit to the
// Latin character (lower case) they pass for: a subset of the Unicode
// TS #39 confusables.txt, the part that spoofs Latin names, since no
// confusables table ships with golang.org/x/text. It is applied after NFKC
// and case folding (see Skeleton), so it lists lower-case forms only, and
// full-width and other compatibility forms (ａ, ℓ, ﬁ) need no entry: NFKC
// has made them ASCII already. Covered:
//
//   - Cyrillic: а е о р с у х і ј ѕ ԁ һ ԛ ԝ ӏ ү ѵ and the lower-case forms
//     of the capitals that pass for Latin ones (в к м н т from В К М Н Т);
//   - Greek: α ο ρ ι υ ν κ τ χ ε and the lower-case forms of the capitals
//     that pass for Latin ones (β η μ ζ from Β Η Μ Ζ);
//   - Latin look-alikes: ı (dotless i), ɑ, ɡ, ǀ, and the digits 0 and 1
//     (as o and l).
//
// Not covered: multi-character look-alikes (rn for m, vv for w) and other
// scripts (Armenian, Cherokee, ...). A name mixing scripts is refused
// anyway (CheckScripts).
var confusables = map[rune]rune{
	// Cyrillic
	'а': 'a', 'е': 'e', 'о': 'o', 'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x', 'і': 'i', 'ј': 'j', 'ѕ': 's',
	'ԁ': 'd', 'һ': 'h', 'ԛ': 'q', 'ԝ': 'w', 'ӏ': 'l', 'ү': 'y', 'ѵ': 'v',
	'в': 'b', 'к': 'k', 'м': 'm', 'н': 'h', 'т': 't',
	// Greek
	'α': 'a', 'ο': 'o', 'ρ': 'p', 'ι': 'i', 'υ': 'u', 'ν': 'v', 'κ': 'k', 'τ': 't', 'χ': 'x', 'ε': 'e',
	'β': 'b', 'η': 'h', 'μ': 'm', 'ζ': 'z',
	// Latin look-alikes and digits
	'ı': 'i', 'ɑ': 'a', 'ɡ': 'g', 'ǀ': 'l', '0': 'o', '1': 'l',
}

// Skeleton is the form in which two identities are compared (four eyes,
// the operators file): NFKC (so full-width ａｌｉｃｅ is alice), white space
// collapsed to one U+0020 between words, invisible characters dropped, case
// folded, then every character of the confusables table replaced by the
// Latin one it passes for (Unicode TS #39's skeleton, over the subset the
// table documents). "ａｌｉｃｅ", "аlice" (Cyrillic а), "ALICE" and "alice"
// have one skeleton. Two names with one skeleton are one person.
func Skeleton(name string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case invisible(r):
			return -1
		}
		return r
	}, norm.NFKC.String(strings.ToValidUTF8(name, "\uFFFD")))
	s = norm.NFKC.String(cases.Fold().String(strings.Join(strings.Fields(s), " ")))
	s = strings.Map(func(r rune) rune {
		if c, ok := confusables[r]; ok {
			return c
		}
		return r
	}, s)
	return norm.NFC.String(s)
}

// scriptSets are the combinations of scripts one name may mix (TS #39's
// "highly restrictive" level): Japanese, Chinese with Bopomofo, Korean,
// each with Latin.
var scriptSets = [][]string{
	{"Latin", "Han", "Hiragana", "Katakana"},
	{"Latin", "Han", "Bopomofo"},
	{"Latin", "Han", "Hangul"},
}

// CheckScripts refuses a name whose letters come from more than one script
// (Common and Inherited characters, such as digits, spaces and combining
// marks, count for none), except the combinations of scriptSets: "аlice"
// with a Cyrillic а is refused, "李雷 Li" is not.
func CheckScripts(name string) error {
	seen := map[string]bool{}
	var order []string
	for _, r := range norm.NFKC.String(name) {
		if !unicode.IsLetter(r) {
			continue
		}
		sc := scriptOf(r)
		if sc == "" || sc == "Common" || sc == "Inherited" || seen[sc] {
			continue
		}
		seen[sc] = true
		order = append(order, sc)
	}
	if len(order) <= 1 {
		return nil
	}
sets:
	for _, set := range scriptSets {
		for _, sc := range order {
			if !contains(set, sc) {
				continue sets
			}
		}
		return nil
	}
	return fmt.Errorf("%w: it mixes the scripts %s, as a look-alike of another name does; write it in one script", ErrBadName, strings.Join(order, " and "))
}

func contains(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}

// scriptOf names the script of r, or "".
func scriptOf(r rune) string {
	if r < 0x80 {
		return "Latin"
	}
	for name, t := range unicode.Scripts {
		if unicode.Is(t, r) {
			return name
		}
	}
	return ""
}

package operators

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// ErrInvisible: an identity holds a character that shows nothing, or
// changes how the text around it reads (control and format characters,
// zero-width and other default-ignorable characters, spaces other than
// U+0020, unassigned code points), so two names that look alike could be
// different people.
var ErrInvisible = errors.New("operators: identity holds an invisible or formatting character")

// CheckIdentity refuses an identity (an operator's name, a decision's `by`,
// a plan's `requested_by`) that is not valid UTF-8 or holds an invisible
// character (see ErrInvisible). It says nothing about length or emptiness.
func CheckIdentity(name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: it is not valid UTF-8", ErrBadName)
	}
	for i, r := range name {
		if invisible(r) {
			return fmt.Errorf("%w (%U at byte %d): send the name as plain printable text", ErrInvisible, r, i)
		}
	}
	return nil
}

// invisible reports a character that is not printable (unicode.IsPrint
// admits letters, marks, numbers, punctuation, symbols and the ASCII space)
// or is default-ignorable (rendered as nothing: the Hangul fillers, the
// combining grapheme joiner, variation selectors).
func invisible(r rune) bool {
	return !unicode.IsPrint(r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) ||
		unicode.Is(unicode.Variation_Selector, r)
}

// Canonical is the form in which identities were compared before Skeleton
// (SameCanonical): white space
// trimmed and collapsed to one U+0020 between words, invisible characters dropped (an identity holding one is
// refused wherever it is given; dropping them keeps a comparison safe for
// records made before that rule), Unicode NFC and case folding. "José" in
// NFC and in NFD, "Alice" and "alice" are one identity.
func Canonical(name string) string {
	s := strings.Map(func(r rune) rune {
		switch {
		case unicode.IsSpace(r):
			return ' '
		case invisible(r):
			return -1
		}
		return r
	}, norm.NFC.String(strings.ToValidUTF8(name, "\uFFFD")))
	// One space between words; folding may decompose: recompose.
	return norm.NFC.String(cases.Fold().String(strings.Join(strings.Fields(s), " ")))
}

// SameIdentity reports whether a and b name the same person: they have
// one Skeleton (NFKC, case folding and the confusables of TS #39). Empty
// names are nobody: SameIdentity("", "") is false.
func SameIdentity(a, b string) bool {
	ca, cb := Skeleton(a), Skeleton(b)
	return ca != "" && ca == cb
}

// SameCanonical reports whether a and b have one Canonical form (NFC and
// case folding, no confusables): four eyes as plans that took a decision
// before the skeleton compared. New code uses SameIdentity.
func SameCanonical(a, b string) bool {
	ca, cb := Canonical(a), Canonical(b)
	return ca != "" && ca == cb
}

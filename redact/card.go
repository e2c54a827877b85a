package redact

import "strings"

// LooksLikeCardNumber reports whether s is a payment card number: 13 to 19
// digits (spaces and dashes allowed between them) that pass the Luhn check.
func LooksLikeCardNumber(s string) bool {
	n := 0
	var digits [19]byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if n == len(digits) {
				return false
			}
			digits[n] = c - '0'
			n++
		case c == ' ' || c == '-':
		default:
			return false
		}
	}
	return n >= 13 && luhn(digits[:n])
}

// luhn reports whether the digits (values 0-9) pass the Luhn check.
func luhn(digits []byte) bool {
	sum := 0
	for i := range digits {
		d := int(digits[len(digits)-1-i])
		if i%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}

// cardMask is the mask of the card number written as s: its last four
// digits only.
func cardMask(s string) string {
	var last []byte
	for i := len(s) - 1; i >= 0 && len(last) < 4; i-- {
		if isDigit(s[i]) {
			last = append([]byte{s[i]}, last...)
		}
	}
	return "[redacted card ending " + string(last) + "]"
}

// rewriteCards masks every card number in s. A card number is a run of 13
// to 19 digits, possibly grouped by single spaces or dashes, that passes the
// Luhn check. Within a run of groups, candidates are whole groups, tried from
// the left, the longest first: "4111 1111 1111 1111 12" masks the card and
// keeps "12", and two cards in one run are both masked. An unbroken run of
// more than 19 digits is an identifier, not a card, and is kept.
func rewriteCards(s string) (string, bool) {
	var b strings.Builder
	last := 0 // s[last:] is not yet copied
	for i := 0; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		end, groups := scanRun(s, i)
		for _, c := range cardsIn(s, groups) {
			b.WriteString(s[last:c.from])
			b.WriteString(cardMask(s[c.from:c.to]))
			last = c.to
		}
		i = end
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// span is one part of s, s[from:to].
type span struct{ from, to int }

// scanRun reads the run of digit groups that starts at s[i]: groups of digits
// joined by exactly one space or dash. It returns where the run ends and its
// groups.
func scanRun(s string, i int) (end int, groups []span) {
	for {
		g := span{from: i}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		g.to = i
		groups = append(groups, g)
		if i+1 < len(s) && (s[i] == ' ' || s[i] == '-') && isDigit(s[i+1]) {
			i++
			continue
		}
		return i, groups
	}
}

// cardsIn returns the card numbers among groups, left to right: from each
// group, the longest sequence of whole groups whose digits form a card
// number; after a card, the search goes on after it. A card made of whole
// groups is therefore always masked, at least in part (a longer card that
// starts before it may cover it). It is linear in the number of groups.
func cardsIn(s string, groups []span) []span {
	var out []span
	var digits [19]byte
	for a := 0; a < len(groups); {
		n, best := 0, -1
	extend:
		for z := a; z < len(groups); z++ {
			for k := groups[z].from; k < groups[z].to; k++ {
				if n == len(digits) {
					break extend
				}
				digits[n] = s[k] - '0'
				n++
			}
			if n >= 13 && luhn(digits[:n]) {
				best = z
			}
		}
		if best < 0 {
			a++
			continue
		}
		out = append(out, span{groups[a].from, groups[best].to})
		a = best + 1
	}
	return out
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

package redact

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// LooksLikeCardNumber reports whether s is a payment card number: 13 to 19
// digits that pass the Luhn check, possibly grouped by single separators
// (see cardSeparator). Digits of any script count (full-width "４２４２",
// Arabic-Indic, ...): they are read by their value.
func LooksLikeCardNumber(s string) bool {
	n := 0
	var digits [19]byte
	prevSep := true // no separator may lead
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch d, ok := digitValue(r); {
		case ok:
			if n == len(digits) {
				return false
			}
			digits[n] = d
			n++
			prevSep = false
		case cardSeparator(r) && !prevSep:
			prevSep = true
			if r == '\r' && i+1 < len(s) && s[i+1] == '\n' {
				size++ // CRLF is one separator
			}
		default:
			return false
		}
		i += size
	}
	return n >= 13 && !prevSep && luhn(digits[:n])
}

// digitValue returns the value of a decimal digit of any script (Unicode
// category Nd): '7', '７' and '٧' are all 7.
func digitValue(r rune) (byte, bool) {
	if r >= '0' && r <= '9' {
		return byte(r - '0'), true
	}
	if r < utf8.RuneSelf || !unicode.Is(unicode.Nd, r) {
		return 0, false
	}
	// Every range of the Nd table starts at a digit zero and holds whole
	// runs of ten (checked by TestDigitValueOfEveryScript).
	for _, rg := range unicode.Nd.R16 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return byte((r - rune(rg.Lo)) % 10), true
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if r >= rune(rg.Lo) && r <= rune(rg.Hi) {
			return byte((r - rune(rg.Lo)) % 10), true
		}
	}
	return 0, false
}

// cardSeparator reports whether r may stand between two groups of a card
// number: a space of any kind, a line feed or other line break, a tab, a
// dash of any kind, a dot, a slash, an underscore (their full-width forms
// too), or an invisible formatting character such as U+200B.
func cardSeparator(r rune) bool {
	switch r {
	case '.', '/', '_', '\u00b7', '\u2022', '\u2027', '\u2212', '\u30fb', '\uff0e', '\uff0f', '\uff3f', '\uff65':
		return true
	}
	return unicode.IsSpace(r) || unicode.Is(unicode.Pd, r) || unicode.Is(unicode.Cf, r)
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
// digits only, in ASCII.
func cardMask(s string) string {
	var last []byte
	for i := len(s); i > 0 && len(last) < 4; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		if d, ok := digitValue(r); ok {
			last = append([]byte{'0' + d}, last...)
		}
		i -= size
	}
	return "[redacted card ending " + string(last) + "]"
}

// rewriteCards masks every card number in s. A card number is a run of 13
// to 19 digits (of any script), possibly grouped by single separators (see
// cardSeparator; CRLF counts as one), that passes the Luhn check. Within a
// run of groups, candidates are whole groups, tried from the left, the
// longest first: "4111 1111 1111 1111 12" masks the card and keeps "12", and
// two cards in one run are both masked. An unbroken run of more than 19
// digits is an identifier, not a card, and is kept.
func rewriteCards(s string) (string, bool) {
	if fewASCIIDigits(s) {
		return s, false
	}
	return maskCards(s)
}

// maskCards is rewriteCards without the quick check.
func maskCards(s string) (string, bool) { return maskCardsKeeping(s, nil) }

// maskCardsKeeping is maskCards that keeps a lone run of digits whose text is
// in keep (see StringKeeping).
func maskCardsKeeping(s string, keep map[string]bool) (string, bool) {
	var b strings.Builder
	last := 0 // s[last:] is not yet copied
	uuids := uuidPattern.FindAllStringIndex(s, -1)
	for i := 0; i < len(s); {
		if len(uuids) > 0 && i >= uuids[0][0] {
			// A UUID's groups of digits are not a card number (session
			// ids such as mcp-7e72f28a-5619-4387-8331-0611038c016f).
			if i < uuids[0][1] {
				i = uuids[0][1]
			}
			uuids = uuids[1:]
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isDigitRune(r) {
			i += size
			continue
		}
		end, groups := scanRun(s, i)
		if len(groups) == 1 && keep[s[groups[0].from:groups[0].to]] {
			i = end
			continue
		}
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

// fewASCIIDigits reports whether s is ASCII and holds fewer digits than the
// shortest card number: then it holds no card, and the scan is skipped.
// Text beyond ASCII is always scanned (digits of other scripts count).
func fewASCIIDigits(s string) bool {
	digits := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf:
			return false
		case isDigit(c):
			digits++
		}
	}
	return digits < 13
}

// uuidPattern matches a UUID written in its usual form.
var uuidPattern = regexp.MustCompile(`(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// span is one part of s, s[from:to].
type span struct{ from, to int }

// scanRun reads the run of digit groups that starts at s[i]: groups of digits
// joined by exactly one separator. It returns where the run ends and its
// groups.
func scanRun(s string, i int) (end int, groups []span) {
	for {
		g := span{from: i}
		i = digitsEnd(s, i)
		g.to = i
		groups = append(groups, g)
		if i >= len(s) {
			return i, groups
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if !cardSeparator(r) {
			return i, groups
		}
		next := i + size
		if r == '\r' && next < len(s) && s[next] == '\n' {
			next++
		}
		if next >= len(s) {
			return i, groups
		}
		if nr, _ := utf8.DecodeRuneInString(s[next:]); !isDigitRune(nr) {
			return i, groups
		}
		i = next
	}
}

// digitsEnd returns where the digits that start at s[i] end.
func digitsEnd(s string, i int) int {
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !isDigitRune(r) {
			break
		}
		i += size
	}
	return i
}

func isDigitRune(r rune) bool {
	_, ok := digitValue(r)
	return ok
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
			for k := groups[z].from; k < groups[z].to; {
				if n == len(digits) {
					break extend
				}
				r, size := utf8.DecodeRuneInString(s[k:])
				digits[n], _ = digitValue(r)
				n++
				k += size
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

// StringKeeping is String, except that a number the engine counts (a turn
// or step number, passed in counters) is never taken for a card number: a
// run of ASCII digits that stands alone (no separator joins it to more
// digits) and is exactly one of counters is kept whole, so a Luhn-valid
// 13-digit turn reads the same in the text a model or an operator reads.
// Everything else is masked as String masks it: customer text around the
// counter, a session id inside an operation key, and a card number that a
// counter is only a part of.
func StringKeeping(s string, counters ...int64) string {
	if len(counters) == 0 {
		return String(s)
	}
	keep := make(map[string]bool, len(counters))
	for _, c := range counters {
		if c > 0 {
			keep[strconv.FormatInt(c, 10)] = true
		}
	}
	ps := make([]pass, len(passes))
	copy(ps, passes)
	for i := range ps {
		if ps[i].kind == Card {
			ps[i].rewrite = func(s string) (string, bool) {
				if fewASCIIDigits(s) {
					return s, false
				}
				return maskCardsKeeping(s, keep)
			}
		}
	}
	for range maxRounds {
		changed := false
		for _, p := range ps {
			if out, ok := p.rewrite(s); ok {
				s, changed = out, true
			}
		}
		if !changed {
			break
		}
	}
	return s
}

// Counter is a number the engine counts, such as a turn or step number:
// never a card number. NewHandler writes an attribute of this type as the
// number it is.
type Counter int64

// Identifier is a text the engine makes that holds its counters, such as an
// operation key ({session}:{turn}:{step}:{tool}) or a workflow id.
// NewHandler masks it with StringKeeping(Text, Counters...): the counters
// stay whole, the parts that came from outside (a session id, a tool name)
// are masked as any text is.
type Identifier struct {
	Text     string
	Counters []int64
}

// String implements fmt.Stringer: the text as is (NewHandler masks it).
func (i Identifier) String() string { return i.Text }

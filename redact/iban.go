package redact

import "strings"

// ibanLengths is the length of an IBAN, by country code (the SWIFT IBAN
// registry). A country not listed has no IBAN.
var ibanLengths = map[string]int{
	"AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BI": 27,
	"BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27, "DK": 18, "DO": 28,
	"EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23,
	"GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27,
	"JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25,
	"MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18,
	"NO": 15, "OM": 23, "PK": 24, "PL": 28, "PS": 29, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
	"SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28, "TL": 23,
	"TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}

// LooksLikeIBAN reports whether s is an IBAN: a country code, two check
// digits and the country's number of letters and digits (spaces allowed
// between groups), whose check digits are right (ISO 13616, mod 97).
func LooksLikeIBAN(s string) bool {
	end, ok := ibanAt(s, 0)
	return ok && end == len(s)
}

// ibanAt reports whether an IBAN starts at s[i] and where it ends. It must
// not follow or run into a letter or digit.
func ibanAt(s string, i int) (int, bool) {
	if i > 0 && isAlnum(s[i-1]) {
		return 0, false
	}
	if i+4 > len(s) || !isLetter(s[i]) || !isLetter(s[i+1]) || !isDigit(s[i+2]) || !isDigit(s[i+3]) {
		return 0, false
	}
	want, ok := ibanLengths[strings.ToUpper(s[i:i+2])]
	if !ok {
		return 0, false
	}
	compact := make([]byte, 0, want)
	j := i
	for j < len(s) && len(compact) < want {
		switch c := s[j]; {
		case isAlnum(c):
			compact = append(compact, upper(c))
			j++
		case c == ' ' && j+1 < len(s) && isAlnum(s[j+1]) && len(compact) >= 4:
			j++
		default:
			return 0, false
		}
	}
	if len(compact) < want || (j < len(s) && isAlnum(s[j])) {
		return 0, false
	}
	return j, ibanChecks(compact)
}

// ibanChecks verifies the check digits of a compact, upper-case IBAN: its
// first four characters moved to the end, letters read as 10 to 35, the
// number is 1 modulo 97.
func ibanChecks(iban []byte) bool {
	rem := 0
	for k := range iban {
		c := iban[(k+4)%len(iban)]
		switch {
		case isDigit(c):
			rem = (rem*10 + int(c-'0')) % 97
		default:
			rem = (rem*100 + int(c-'A'+10)) % 97
		}
	}
	return rem == 1
}

// rewriteIBANs masks every IBAN in s, keeping its country and last four
// characters.
func rewriteIBANs(s string) (string, bool) {
	var b strings.Builder
	last := 0
	for i := 0; i+4 <= len(s); i++ {
		if !isLetter(s[i]) {
			continue
		}
		end, ok := ibanAt(s, i)
		if !ok {
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString("[redacted IBAN " + strings.ToUpper(s[i:i+2]) + " ending " + lastAlnum(s[i:end], 4) + "]")
		last, i = end, end-1
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// lastAlnum returns the last n letters and digits of s.
func lastAlnum(s string, n int) string {
	var out []byte
	for i := len(s) - 1; i >= 0 && len(out) < n; i-- {
		if isAlnum(s[i]) {
			out = append([]byte{s[i]}, out...)
		}
	}
	return string(out)
}

func isLetter(c byte) bool { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') }
func isAlnum(c byte) bool  { return isLetter(c) || isDigit(c) }

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

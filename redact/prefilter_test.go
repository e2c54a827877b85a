package redact

import "testing"

// FuzzQuickChecksMissNothing: a text the quick checks pass over (no secret
// name in ASCII text, fewer than 13 ASCII digits) is one the full scans
// would have left unchanged. Break a check (drop "pwd" from assignHints, or
// make fewASCIIDigits want 17) and the seeds fail.
func FuzzQuickChecksMissNothing(f *testing.F) {
	for _, s := range []string{
		"apply_refund order_id ord_1001, 129.00 EUR s-1:1:1:apply_refund",
		"API_KEY=abcd1234", "x-Api-Secret: abcdefgh", "pwd=hunter22", "Passphrase: correct-horse",
		"api_\u212aey=abcd1234", // the Kelvin sign folds to k
		"\u017fecret=abcdefgh",  // the long s folds to s
		"4111111111111111", "4111 1111 1111 1111", "411111111111", "４１１１１１１１１１１１１１１１",
		"order 1234567890123 paid", "", ":", "=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if noAssignment(s) {
			if out, ok := maskAssignments(s); ok {
				t.Fatalf("quick check passed over %q, which masks to %q", s, out)
			}
		}
		if fewASCIIDigits(s) {
			if out, ok := maskCards(s); ok {
				t.Fatalf("quick check passed over %q, which masks to %q", s, out)
			}
		}
	})
}

// The quick checks are what make a clean text cheap: a step's summary goes
// through String several times per step (issue 22: 16 µs before them).
func BenchmarkStringOfASummary(b *testing.B) {
	s := "apply_refund order_id ord_1001, 129.00 EUR s-1:1:1:apply_refund"
	b.ReportAllocs()
	for b.Loop() {
		if String(s) != s {
			b.Fatal("a clean summary changed")
		}
	}
}

package operators

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	joseNFC = "Jos\u00e9"  // é as one code point
	joseNFD = "Jose\u0301" // e and a combining acute accent
)

func TestIdentitiesCompareInOneNormalForm(t *testing.T) {
	require.NotEqual(t, joseNFC, joseNFD, "the two spellings differ byte for byte")
	for _, pair := range [][2]string{
		{joseNFC, joseNFD},
		{"alice", "Alice"},
		{"alice", " alice "},
		{"Straße", "STRASSE"},
		{"alice", "alice\u200b"},      // zero-width space
		{"alice", "al\u00adice"},      // soft hyphen
		{"alice", "ali\u034fce"},      // combining grapheme joiner
		{"alice", "alice\ufe0f"},      // variation selector
		{"alice", "\u3164alice"},      // Hangul filler
		{"mary ann", "mary\u00a0ann"}, // no-break space
	} {
		require.True(t, SameIdentity(pair[0], pair[1]), "%q and %q", pair[0], pair[1])
	}
	require.False(t, SameIdentity("alice", "alicia"))
	require.False(t, SameIdentity("", ""), "nobody is not somebody")
	require.False(t, SameIdentity("\u200b", ""))
}

func TestIdentitiesWithInvisibleCharactersAreRefused(t *testing.T) {
	for _, name := range []string{"alice", joseNFC, joseNFD, "CFO Jane Doe", "李雷"} {
		require.NoError(t, CheckIdentity(name), name)
		require.NoError(t, ValidName(name), name)
	}
	for _, name := range []string{
		"alice\u200b", "al\u00adice", "ali\u034fce", "alice\ufe0f", "\u3164alice", "mary\u00a0ann",
		"\u202eecila", "ali\nce", "ali\tce", "alice\x00", "ali\u2028ce", "alice\U000E0041",
	} {
		require.ErrorIs(t, CheckIdentity(name), ErrInvisible, "%q", name)
		require.ErrorIs(t, ValidName(name), ErrBadName, "%q", name)
	}
	require.ErrorIs(t, CheckIdentity("\xff"), ErrBadName)
}

// Two entries that are one person in another Unicode form are one name
// listed twice.
func TestOperatorsFileRefusesTheSameNameInAnotherForm(t *testing.T) {
	for _, names := range [][2]string{{joseNFC, joseNFD}, {"alice", "ALICE"}} {
		b, err := json.Marshal(File{Operators: []Operator{seeded(t, names[0], 1).Entry(), seeded(t, names[1], 2).Entry()}})
		require.NoError(t, err)
		_, err = Parse(b)
		require.ErrorContains(t, err, "listed twice", "%q and %q", names[0], names[1])
	}
}

// Issue 35, item 2: look-alike spellings are one person (TS #39 skeleton
// after NFKC and case folding), names mixing scripts are refused, and an
// operators file whose names collide is refused.
func TestConfusableSpellingsAreOnePerson(t *testing.T) {
	for _, s := range []string{"ａｌｉｃｅ", "ＡＬＩＣＥ", "\u0430lice", "\u0430\u04cf\u0456\u0441\u0435", "\u0391LICE", "a1ice", "al\u0131ce"} {
		require.True(t, SameIdentity("alice", s), "%q", s)
	}
	for _, s := range []string{"alicia", "bob", "alicé", "李雷"} {
		require.False(t, SameIdentity("alice", s), "%q", s)
	}
	for _, s := range []string{"\u0430lice", "p\u0430ypal", "\u03b1lice", "Ivan Иванов"} {
		require.ErrorIs(t, ValidName(s), ErrBadName, "%q mixes scripts", s)
	}
	for _, s := range []string{"alice", "ａｌｉｃｅ", "Иван", "Ελένη", "李雷", "田中 たなか", "김 Kim", "José", "o'brien-2"} {
		require.NoError(t, ValidName(s), "%q", s)
	}
	for _, names := range [][2]string{{"alice", "ａｌｉｃｅ"}, {"alice", "\u0430\u04cf\u0456\u0441\u0435"}, {"Alice", "ALICE"}} {
		b, err := json.Marshal(File{Operators: []Operator{seeded(t, names[0], 1).Entry(), seeded(t, names[1], 2).Entry()}})
		require.NoError(t, err)
		_, err = Parse(b)
		require.ErrorContains(t, err, "listed twice", "%q and %q", names[0], names[1])
	}
	mixed := seeded(t, "mallory", 2).Entry()
	mixed.Name = "\u0430lice"
	b, err := json.Marshal(File{Operators: []Operator{seeded(t, "alice", 1).Entry(), mixed}})
	require.NoError(t, err)
	_, err = Parse(b)
	require.ErrorContains(t, err, "mixes the scripts")
}

// FuzzSkeleton: for any name, Skeleton is idempotent, and an ASCII name is
// one person with its upper-case and full-width spellings. Seeds: the
// look-alikes above. Long run:
//
//	go test -fuzz FuzzSkeleton -fuzztime 5m ./operators/
func FuzzSkeleton(f *testing.F) {
	for _, s := range []string{"alice", "ａｌｉｃｅ", "\u0430lice", "\u0430\u04cf\u0456\u0441\u0435", "Straße", "Jose\u0301", "a\u200bb", "ǅ", "ﬁ", "İstanbul", "\xff", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k := Skeleton(s)
		if Skeleton(k) != k {
			t.Fatalf("Skeleton(%q) = %q, whose skeleton is %q", s, k, Skeleton(k))
		}
		_ = CheckScripts(s)
		ascii := s != ""
		var wide []rune
		for _, r := range s {
			if r < '!' || r > '~' {
				ascii = false
				break
			}
			wide = append(wide, r-'!'+'！')
		}
		if ascii {
			if !SameIdentity(s, strings.ToUpper(s)) || !SameIdentity(s, string(wide)) {
				t.Fatalf("%q: its upper-case %q or full-width %q is another person", s, strings.ToUpper(s), string(wide))
			}
		}
	})
}

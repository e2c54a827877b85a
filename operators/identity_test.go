package operators

import (
	"encoding/json"
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

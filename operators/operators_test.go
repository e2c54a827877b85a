package operators

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// seeded returns a deterministic key: tests never depend on chance.
func seeded(t testing.TB, name string, seed byte) *Key {
	k, err := NewKey(name, bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	require.NoError(t, err)
	return k
}

func ring(t testing.TB, entries ...Operator) *Keyring {
	b, err := json.Marshal(File{Operators: entries})
	require.NoError(t, err)
	k, err := Parse(b)
	require.NoError(t, err)
	return k
}

var msg = []byte("agentsaga-decision-v1\n{\"workflow_id\":\"agent-plan:s:1\",\"kind\":\"approve\",\"decision\":{\"step\":3}}")

func TestSignedDecisionVerifies(t *testing.T) {
	alice := seeded(t, "alice", 1)
	k := ring(t, alice.Entry())
	require.NoError(t, k.Verify("alice", ActionApprove, msg, Sign(alice, msg)))
	require.NoError(t, k.Verify("alice", ActionResolve, msg, Sign(alice, msg)))
	require.Equal(t, []string{"alice"}, k.Names())
}

func TestAnyChangedByteIsRefused(t *testing.T) {
	alice := seeded(t, "alice", 1)
	k := ring(t, alice.Entry())
	sig := Sign(alice, msg)
	for i := range msg {
		for _, flip := range []byte{0x01, 0x80} {
			m := bytes.Clone(msg)
			m[i] ^= flip
			err := k.Verify("alice", ActionApprove, m, sig)
			require.ErrorIs(t, err, ErrBadSignature, "byte %d ^ %#x accepted", i, flip)
		}
	}
	// A truncated or extended message, and a tampered signature.
	require.ErrorIs(t, k.Verify("alice", ActionApprove, msg[:len(msg)-1], sig), ErrBadSignature)
	require.ErrorIs(t, k.Verify("alice", ActionApprove, append(bytes.Clone(msg), ' '), sig), ErrBadSignature)
	raw, _ := base64.StdEncoding.DecodeString(sig)
	for i := range raw {
		r := bytes.Clone(raw)
		r[i] ^= 0x01
		require.ErrorIs(t, k.Verify("alice", ActionApprove, msg, base64.StdEncoding.EncodeToString(r)), ErrBadSignature, "signature byte %d", i)
	}
}

func TestWrongOperatorIsRefused(t *testing.T) {
	alice, bob := seeded(t, "alice", 1), seeded(t, "bob", 2)
	k := ring(t, alice.Entry(), bob.Entry())
	// Bob signs but claims to be alice; alice's signature sent as bob.
	require.ErrorIs(t, k.Verify("alice", ActionApprove, msg, Sign(bob, msg)), ErrBadSignature)
	require.ErrorIs(t, k.Verify("bob", ActionApprove, msg, Sign(alice, msg)), ErrBadSignature)
	// Someone not in the file, even with a valid signature of their own.
	mallory := seeded(t, "mallory", 3)
	err := k.Verify("mallory", ActionApprove, msg, Sign(mallory, msg))
	require.ErrorIs(t, err, ErrUnknownOperator)
	require.ErrorContains(t, err, "starter operator keygen --name mallory")
	// Case and lookalikes are different names.
	require.ErrorIs(t, k.Verify("Alice", ActionApprove, msg, Sign(alice, msg)), ErrUnknownOperator)
}

func TestWrongActionIsRefused(t *testing.T) {
	bob := seeded(t, "bob", 2)
	k := ring(t, bob.Entry(ActionResolve))
	err := k.Verify("bob", ActionApprove, msg, Sign(bob, msg))
	require.ErrorIs(t, err, ErrNotAllowed)
	require.ErrorContains(t, err, "bob may not approve")
	require.ErrorIs(t, k.Verify("bob", "terminate", msg, Sign(bob, msg)), ErrNotAllowed)
	require.NoError(t, k.Verify("bob", ActionResolve, msg, Sign(bob, msg)))
}

func TestMissingAndMalformedSignatures(t *testing.T) {
	alice := seeded(t, "alice", 1)
	k := ring(t, alice.Entry())
	sig := Sign(alice, msg)
	for _, s := range []string{"", "not base64!", sig[:len(sig)-4], sig + "AAAA", " " + sig, strings.TrimRight(sig, "=")} {
		require.ErrorIs(t, k.Verify("alice", ActionApprove, msg, s), ErrBadSignature, "%q", s)
	}
	require.ErrorContains(t, k.Verify("alice", ActionApprove, msg, ""), "--key")
}

func TestNilKeyringIsDevMode(t *testing.T) {
	var k *Keyring
	require.ErrorIs(t, k.Verify("anyone", ActionApprove, msg, ""), ErrUnverified)
	require.Nil(t, k.Names())
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"a", "alice", "Jane Doe", "ö", strings.Repeat("x", 64), strings.Repeat("é", 64)} {
		require.NoError(t, ValidName(ok), "%q", ok)
	}
	for _, bad := range []string{"", " alice", "alice ", strings.Repeat("x", 65), "al\x1b[31mice", "a\nb", "a\tb", "\xff", "a\u202eb", "a\u0085b"} {
		require.ErrorIs(t, ValidName(bad), ErrBadName, "%q", bad)
	}
	alice := seeded(t, "alice", 1)
	require.ErrorIs(t, ring(t, alice.Entry()).Verify("al\x1bice", ActionApprove, msg, Sign(alice, msg)), ErrBadName)
}

func TestParseNamesEveryProblem(t *testing.T) {
	alice, bob := seeded(t, "alice", 1), seeded(t, "bob", 2)
	cases := map[string]string{
		`{}`:                     "no operators listed",
		`[]`:                     "not an operators file",
		`{"operators":[],"x":1}`: "not an operators file",
		`{"operators":[{"name":"a","public_key":"` + alice.PublicKey() + `","may":["approve"],"admin":true}]}`: "not an operators file",
		`{"operators":[{"name":"a","public_key":"` + alice.PublicKey() + `","may":["approve"]}]} {}`:           "trailing data",
	}
	for in, want := range cases {
		_, err := Parse([]byte(in))
		require.ErrorContains(t, err, want, in)
	}
	f := File{Operators: []Operator{
		{Name: "", PublicKey: alice.PublicKey(), May: []string{"approve"}},
		{Name: "alice", PublicKey: alice.PublicKey(), May: []string{"approve"}},
		{Name: "alice", PublicKey: bob.PublicKey(), May: []string{"approve"}},
		{Name: "carol", PublicKey: alice.PublicKey(), May: []string{"approve"}},
		{Name: "dave", PublicKey: "AAAA", May: []string{"approve"}},
		{Name: "erin", PublicKey: bob.PublicKey(), May: nil},
		{Name: "frank", PublicKey: bob.PublicKey(), May: []string{"terminate"}},
	}}
	b, _ := json.Marshal(f)
	_, err := Parse(b)
	for _, want := range []string{"operators[0].name", "(alice): the name is listed twice", "(carol).public_key: the same key belongs to alice",
		"(dave).public_key: not a base64", "(erin).may: empty", `(frank).may: unknown action "terminate"`} {
		require.ErrorContains(t, err, want)
	}
}

func TestKeyFileRoundTripAndPermissions(t *testing.T) {
	dir := t.TempDir()
	alice := seeded(t, "alice", 1)
	path := filepath.Join(dir, "alice.key")
	require.NoError(t, alice.Write(path))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.ErrorContains(t, alice.Write(path), "never overwritten")

	back, err := LoadKey(path)
	require.NoError(t, err)
	require.Equal(t, "alice", back.Name)
	require.Equal(t, alice.PublicKey(), back.PublicKey())
	require.NoError(t, ring(t, alice.Entry()).Verify("alice", ActionApprove, msg, Sign(back, msg)))

	require.NoError(t, os.Chmod(path, 0o640))
	_, err = LoadKey(path)
	require.ErrorContains(t, err, "chmod 600")

	// The key never shows in formatting or logs.
	raw, _ := os.ReadFile(path)
	var kf keyFile
	require.NoError(t, json.Unmarshal(raw, &kf))
	for _, s := range []string{fmt.Sprint(back), fmt.Sprintf("%+v", back), fmt.Sprintf("%#v", back), back.LogValue().String()} {
		require.NotContains(t, s, kf.PrivateKey)
		require.Contains(t, s, "alice")
	}

	_, err = ParseKey([]byte(`{"kind":"something-else","name":"a","private_key":""}`))
	require.ErrorContains(t, err, "not an agentsaga operator key")
	require.Equal(t, "", Sign(nil, msg))
}

func TestLoadRefusesAFileOthersMayWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "operators.json")
	b, _ := json.Marshal(File{Operators: []Operator{seeded(t, "alice", 1).Entry()}})
	require.NoError(t, os.WriteFile(path, b, 0o644))
	k, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, []string{"alice"}, k.Names())
	for _, mode := range []os.FileMode{0o666, 0o664, 0o620, 0o602} {
		require.NoError(t, os.Chmod(path, mode))
		_, err = Load(path)
		require.ErrorContains(t, err, "writable by others than its owner", "mode %o", mode)
		require.ErrorContains(t, err, "chmod go-w")
	}
	_, err = Load(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
}

// FuzzVerify: whatever the name, action, message and signature, Verify
// accepts only alice's real signature of exactly that message for an action
// she may take, and never panics.
func FuzzVerify(f *testing.F) {
	alice := seeded(f, "alice", 1)
	k := ring(f, alice.Entry(ActionApprove))
	f.Add("alice", "approve", msg, Sign(alice, msg))
	f.Add("alice", "resolve", msg, Sign(alice, msg))
	f.Add("alice\x00", "approve", msg, Sign(alice, msg))
	f.Add("", "", []byte{}, "")
	f.Add("alice", "approve", []byte("\x1b]0;pwned\x07"), "////////////////////////////////////////////////////////////////////////////////////////==")
	f.Fuzz(func(t *testing.T, by, action string, m []byte, sig string) {
		err := k.Verify(by, action, m, sig)
		if err == nil {
			if by != "alice" || action != ActionApprove || sig != Sign(alice, m) {
				t.Fatalf("accepted by=%q action=%q sig=%q", by, action, sig)
			}
			return
		}
		if !errors.Is(err, ErrBadName) && !errors.Is(err, ErrUnknownOperator) && !errors.Is(err, ErrNotAllowed) && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("refusal without a sentinel: %v", err)
		}
	})
}

// FuzzParse: any bytes either fail to parse or give a keyring whose every
// name is valid; never a panic.
func FuzzParse(f *testing.F) {
	b, _ := json.Marshal(File{Operators: []Operator{seeded(f, "alice", 1).Entry(), seeded(f, "bob", 2).Entry(ActionResolve)}})
	f.Add(b)
	f.Add([]byte(`{"operators":[{"name":"\u001b[2J","public_key":"","may":["approve"]}]}`))
	f.Add([]byte(`{"operators":null}`))
	f.Add([]byte(`{"operators":[{"name":"a","public_key":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","may":["approve","approve"]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := Parse(data)
		if err != nil {
			return
		}
		names := k.Names()
		if len(names) == 0 {
			t.Fatal("a keyring without operators was accepted")
		}
		for _, n := range names {
			if ValidName(n) != nil {
				t.Fatalf("invalid name %q accepted", n)
			}
		}
		_, _ = ParseKey(data)
	})
}

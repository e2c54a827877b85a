package operators

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strings"
	"unicode/utf8"
)

// Actions an operator may be allowed to take. They are the names of the
// workflow's Updates (and signals).
const (
	ActionApprove = "approve"
	ActionResolve = "resolve"
)

// MaxNameLen is the longest operator name, in characters.
const MaxNameLen = 64

// maxFileSize bounds what Load and LoadKey read.
const maxFileSize = 1 << 20

// keyKind versions the private key file format.
const keyKind = "agentsaga-operator-key-v1"

var (
	// ErrUnverified is returned by Verify on a nil *Keyring (no operators
	// file): the caller records the typed name as unverified.
	ErrUnverified = errors.New("operators: no operators file on the worker; the name is recorded as typed, unverified")
	// ErrUnknownOperator: the name is not in the operators file.
	ErrUnknownOperator = errors.New("operators: unknown operator")
	// ErrNotAllowed: the operator may not take this action.
	ErrNotAllowed = errors.New("operators: operator may not take this action")
	// ErrBadSignature: the signature is missing, malformed, or does not
	// match the decision and the operator's public key.
	ErrBadSignature = errors.New("operators: bad signature")
	// ErrBadName: the name is empty, too long or not printable.
	ErrBadName = errors.New("operators: bad operator name")
)

// Operator is one entry of the operators file.
type Operator struct {
	Name      string   `json:"name"`
	PublicKey string   `json:"public_key"` // standard base64 of the 32-byte Ed25519 public key
	May       []string `json:"may"`        // approve, resolve
}

// File is the operators file: {"operators": [...]}.
type File struct {
	Operators []Operator `json:"operators"`
}

type entry struct {
	pub ed25519.PublicKey
	may map[string]bool
}

// Keyring holds the operators the worker trusts. A nil *Keyring is the dev
// mode: Verify returns ErrUnverified.
type Keyring struct {
	ops map[string]entry
}

// ValidName reports whether name is 1 to MaxNameLen printable characters,
// valid UTF-8, without spaces at either end and without invisible
// characters (see ErrInvisible).
func ValidName(name string) error {
	n := utf8.RuneCountInString(name)
	switch {
	case name == "":
		return fmt.Errorf("%w: it is empty; give 1 to %d printable characters", ErrBadName, MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: it is not valid UTF-8", ErrBadName)
	case n > MaxNameLen:
		return fmt.Errorf("%w: %d characters, at most %d", ErrBadName, n, MaxNameLen)
	case strings.TrimSpace(name) != name:
		return fmt.Errorf("%w: it starts or ends with a space", ErrBadName)
	}
	for _, r := range name {
		if invisible(r) {
			return fmt.Errorf("%w: it holds the unprintable or invisible character %U", ErrBadName, r)
		}
	}
	return CheckScripts(name)
}

func validAction(a string) bool { return a == ActionApprove || a == ActionResolve }

// Load reads an operators file. It refuses a file that others may write
// (whoever can edit it can add themselves), unknown fields, duplicate names,
// a public key shared by two operators, and unknown actions, naming each
// problem.
func Load(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open operators file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat operators file %s: %w", path, err)
	}
	// As ssh does for authorized_keys: a file others than its owner may
	// write lets them add themselves as operators.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("operators file %s is writable by others than its owner (mode %v): they could add themselves as operators; run chmod go-w %s", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read operators file %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("operators file %s is larger than %d bytes; it holds only names and public keys", path, maxFileSize)
	}
	k, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("operators file %s: %w", path, err)
	}
	return k, nil
}

// Parse reads the JSON of an operators file (see Load).
func Parse(data []byte) (*Keyring, error) {
	var f File
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		return nil, fmt.Errorf(`not an operators file ({"operators": [{"name", "public_key", "may"}]}): %w`, err)
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the operators object; give one JSON object")
	}
	if len(f.Operators) == 0 {
		return nil, errors.New(`no operators listed; add entries printed by "starter operator keygen"`)
	}
	var problems []string
	k := &Keyring{ops: map[string]entry{}}
	keyOwner := map[string]string{}
	canonical := map[string]string{} // Skeleton(name) -> name

	for i, o := range f.Operators {
		at := fmt.Sprintf("operators[%d]", i)
		if err := ValidName(o.Name); err != nil {
			problems = append(problems, fmt.Sprintf("%s.name: %v", at, err))
			continue
		}
		at = fmt.Sprintf("operators[%d] (%s)", i, o.Name)
		if prev, dup := canonical[Skeleton(o.Name)]; dup {
			problems = append(problems, fmt.Sprintf("%s: the name is listed twice (as %q; names are compared by their Unicode TS #39 skeleton: NFKC, case folded, look-alike letters as the Latin ones)", at, prev))
			continue
		}
		raw, err := base64.StdEncoding.Strict().DecodeString(o.PublicKey)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			problems = append(problems, at+".public_key: not a base64 Ed25519 public key (32 bytes); paste the line printed by starter operator keygen")
			continue
		}
		if prev, dup := keyOwner[string(raw)]; dup {
			problems = append(problems, fmt.Sprintf("%s.public_key: the same key belongs to %s; each person needs their own key", at, prev))
			continue
		}
		if len(o.May) == 0 {
			problems = append(problems, at+`.may: empty; list the actions, such as ["approve", "resolve"]`)
			continue
		}
		may := map[string]bool{}
		for _, a := range o.May {
			if !validAction(a) {
				problems = append(problems, fmt.Sprintf("%s.may: unknown action %q; give approve and/or resolve", at, a))
				continue
			}
			may[a] = true
		}
		keyOwner[string(raw)] = o.Name
		canonical[Skeleton(o.Name)] = o.Name
		k.ops[o.Name] = entry{pub: ed25519.PublicKey(raw), may: may}
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return k, nil
}

// Names lists the operators, sorted. Nil for a nil Keyring.
func (k *Keyring) Names() []string {
	if k == nil {
		return nil
	}
	out := make([]string, 0, len(k.ops))
	for n := range k.ops {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Verify checks that sig is operator by's signature of msg and that by may
// take action. A nil Keyring returns ErrUnverified. Every other refusal wraps
// ErrBadName, ErrUnknownOperator, ErrNotAllowed or ErrBadSignature and says
// what to do.
func (k *Keyring) Verify(by, action string, msg []byte, sig string) error {
	if k == nil {
		return ErrUnverified
	}
	if err := ValidName(by); err != nil {
		return fmt.Errorf("by: %w", err)
	}
	e, ok := k.ops[by]
	if !ok {
		return fmt.Errorf("%w %q: not in the worker's operators file; an administrator adds the entry printed by `starter operator keygen --name %s`", ErrUnknownOperator, by, by)
	}
	if !validAction(action) {
		return fmt.Errorf("%w: %q is not an action (approve or resolve)", ErrNotAllowed, action)
	}
	if !e.may[action] {
		return fmt.Errorf("%w: %s may not %s; ask an operator who may, or an administrator to add %q to their \"may\" list", ErrNotAllowed, by, action, action)
	}
	if sig == "" {
		return fmt.Errorf("%w: the decision is not signed; sign it with --key FILE (env AGENTSAGA_OPERATOR_KEY)", ErrBadSignature)
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(sig)
	if err != nil || len(raw) != ed25519.SignatureSize {
		return fmt.Errorf("%w: not a base64 Ed25519 signature; send the decision again with the CLI and your key", ErrBadSignature)
	}
	if !ed25519.Verify(e.pub, msg, raw) {
		return fmt.Errorf("%w: it does not match this decision and %s's public key; sign with %s's own key, and do not edit a signed decision", ErrBadSignature, by, by)
	}
	return nil
}

// Key is an operator's private signing key. Its String, GoString and
// LogValue never show the key material.
type Key struct {
	Name string
	// May are the actions the key was made for (keygen --may), recorded
	// in its file so its entry can be printed again without widening it;
	// empty for a key file made before they were recorded.
	May  []string
	priv ed25519.PrivateKey
}

// NewKey makes a key for name from random (crypto/rand when nil).
func NewKey(name string, random io.Reader) (*Key, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if random == nil {
		random = rand.Reader
	}
	_, priv, err := ed25519.GenerateKey(random)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return &Key{Name: name, priv: priv}, nil
}

// PublicKey is the standard base64 of the public key, as the operators file
// holds it.
func (k *Key) PublicKey() string {
	return base64.StdEncoding.EncodeToString(k.priv.Public().(ed25519.PublicKey))
}

// Entry is the operators-file entry of k allowed to take the given actions
// (when none are given, those the key was made for, else approve and
// resolve).
func (k *Key) Entry(may ...string) Operator {
	if len(may) == 0 {
		may = k.May
	}
	if len(may) == 0 {
		may = []string{ActionApprove, ActionResolve}
	}
	return Operator{Name: k.Name, PublicKey: k.PublicKey(), May: may}
}

// String names the key's owner, never the key.
func (k *Key) String() string { return "operator key of " + k.Name }

// GoString names the key's owner, never the key.
func (k *Key) GoString() string { return k.String() }

// LogValue names the key's owner, never the key.
func (k *Key) LogValue() slog.Value { return slog.StringValue(k.String()) }

type keyFile struct {
	Kind       string   `json:"kind"`
	Name       string   `json:"name"`
	PrivateKey string   `json:"private_key"` // base64 of the 32-byte seed
	May        []string `json:"may,omitempty"`
}

// Write saves k to a new file readable only by its owner (0600). It refuses
// to overwrite an existing file.
func (k *Key) Write(path string) error {
	b, err := json.Marshal(keyFile{Kind: keyKind, Name: k.Name, PrivateKey: base64.StdEncoding.EncodeToString(k.priv.Seed()), May: k.May})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create key file (an existing key is never overwritten): %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	return f.Close()
}

// LoadKey reads a private key file made by Key.Write. It refuses a file that
// group or others may read: run chmod 600 on it.
func LoadKey(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open operator key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat operator key: %w", err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("operator key %s may be read by others (mode %v): run chmod 600 %s, and make a new key if others may have read it", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize))
	if err != nil {
		return nil, fmt.Errorf("read operator key %s: %w", path, err)
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("operator key %s: %w", path, err)
	}
	return k, nil
}

// ParseKey reads the contents of a key file (see LoadKey).
func ParseKey(data []byte) (*Key, error) {
	var kf keyFile
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&kf); err != nil || kf.Kind != keyKind {
		return nil, fmt.Errorf("not an agentsaga operator key (make one with starter operator keygen)")
	}
	if err := ValidName(kf.Name); err != nil {
		return nil, err
	}
	seed, err := base64.StdEncoding.Strict().DecodeString(kf.PrivateKey)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("private_key is not a base64 Ed25519 seed (32 bytes)")
	}
	for _, a := range kf.May {
		if a != ActionApprove && a != ActionResolve {
			return nil, fmt.Errorf("may: unknown action %q: a key is made for approve and/or resolve", a)
		}
	}
	return &Key{Name: kf.Name, May: kf.May, priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// Sign returns the standard base64 Ed25519 signature of msg by key, or ""
// for a nil key.
func Sign(key *Key, msg []byte) string {
	if key == nil || len(key.priv) != ed25519.PrivateKeySize {
		return ""
	}
	return base64.StdEncoding.EncodeToString(ed25519.Sign(key.priv, msg))
}

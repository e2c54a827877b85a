package codec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Where keys come from.
const (
	// EnvKeys holds a keyring inline, in either file format (lines may also
	// be separated by commas or spaces).
	EnvKeys = "AGENTSAGA_CODEC_KEYS"
	// EnvKeysFile names a keyring file.
	EnvKeysFile = "AGENTSAGA_CODEC_KEYS_FILE"
	// KeysFileName is the keyring file the dev stack keeps in its data
	// directory.
	KeysFileName = "codec-keys.json"
)

// KeySize is the size of every key: 32 bytes, AES-256.
const KeySize = 32

// maxKeyringBytes bounds a keyring file or variable.
const maxKeyringBytes = 1 << 20

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Keyring is a set of named 32-byte keys, one of them current: Encode seals
// with the current key, Decode opens with the key a payload names. A Keyring
// never prints its keys. It is immutable and safe for concurrent use.
type Keyring struct {
	current string
	ids     []string // in the order given, current last when read from lines
	*material
}

// material holds the keys behind a pointer, so even a dereferenced Keyring
// printed field by field (fmt's %+v of *k) shows an address, not a key.
type material struct {
	secrets map[string][]byte
	aeads   map[string]cipher.AEAD
}

// NewKeyring returns a keyring of keys (id -> 32-byte key) that encrypts
// with current. Ids are 1 to 64 characters of letters, digits, '.', '_' and
// '-', starting with a letter or digit. The keys are copied.
func NewKeyring(current string, keys map[string][]byte) (*Keyring, error) {
	ids := make([]string, 0, len(keys))
	for id := range keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return newKeyring(current, ids, keys)
}

func newKeyring(current string, ids []string, keys map[string][]byte) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("codec: the keyring holds no key: give at least one id:base64-key")
	}
	k := &Keyring{current: current, material: &material{secrets: map[string][]byte{}, aeads: map[string]cipher.AEAD{}}}
	for _, id := range ids {
		key := keys[id]
		if !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("codec: key id %q is not 1-64 letters, digits, '.', '_' or '-' starting with a letter or digit: rename it", clip(id))
		}
		if len(key) != KeySize {
			return nil, fmt.Errorf("codec: key %q is %d bytes; AES-256 needs exactly %d (make one with `head -c 32 /dev/urandom | base64`)", id, len(key), KeySize)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("codec: key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("codec: key %q: %w", id, err)
		}
		k.ids = append(k.ids, id)
		k.secrets[id] = bytes.Clone(key)
		k.aeads[id] = aead
	}
	if _, ok := k.aeads[current]; !ok {
		return nil, fmt.Errorf("codec: the current key %q is not in the keyring (it holds %s): name one of them current", clip(current), strings.Join(k.ids, ", "))
	}
	return k, nil
}

// GenerateKeyring returns a keyring of one fresh random key named id.
func GenerateKeyring(id string) (*Keyring, error) {
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("codec: draw a key: %w", err)
	}
	return NewKeyring(id, map[string][]byte{id: key})
}

// Rotate returns a keyring holding k's keys and a fresh random key named
// id, which becomes current. Payloads sealed with the old keys still read.
func (k *Keyring) Rotate(id string) (*Keyring, error) {
	if _, ok := k.secrets[id]; ok {
		return nil, fmt.Errorf("codec: key id %q is already in the keyring: choose a new id", id)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("codec: draw a key: %w", err)
	}
	keys := map[string][]byte{id: key}
	for kid, s := range k.secrets {
		keys[kid] = s
	}
	return newKeyring(id, append(append([]string{}, k.ids...), id), keys)
}

// Current returns the id of the key new payloads are sealed with.
func (k *Keyring) Current() string { return k.current }

// IDs returns the ids of every key, in the keyring's order.
func (k *Keyring) IDs() []string { return append([]string{}, k.ids...) }

func (k *Keyring) currentAEAD() (string, cipher.AEAD) { return k.current, k.aeads[k.current] }

func (k *Keyring) aead(id string) (cipher.AEAD, bool) {
	a, ok := k.aeads[id]
	return a, ok
}

// String describes the keyring by its key ids; keys are never shown.
func (k *Keyring) String() string {
	if k == nil {
		return "codec.Keyring(none)"
	}
	return fmt.Sprintf("codec.Keyring(current %s, ids %s, keys masked)", k.current, strings.Join(k.ids, ","))
}

// GoString is String, so %#v shows no key either.
func (k *Keyring) GoString() string { return k.String() }

// Format prints String for every verb, so no fmt verb (%x, %+v, ...) can
// reach the key bytes.
func (k *Keyring) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue shows the key ids in structured logs, never the keys.
func (k *Keyring) LogValue() slog.Value {
	if k == nil {
		return slog.StringValue("none")
	}
	return slog.GroupValue(slog.String("current", k.current), slog.String("ids", strings.Join(k.ids, ",")), slog.String("keys", "masked"))
}

// MarshalJSON shows the key ids only. Use MarshalKeyFile to write keys.
func (k *Keyring) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Current string   `json:"current"`
		IDs     []string `json:"ids"`
		Keys    string   `json:"keys"`
	}{k.current, k.ids, "masked"})
}

// keyFile is the JSON keyring format.
type keyFile struct {
	Current string            `json:"current"`
	Keys    map[string]string `json:"keys"`
}

// MarshalKeyFile returns the keyring in the JSON file format that
// ParseKeyring reads: {"current": ID, "keys": {ID: base64-key, ...}}. It
// holds the keys: write it only to a file of mode 0600 (see WriteKeyFile).
func (k *Keyring) MarshalKeyFile() ([]byte, error) {
	f := keyFile{Current: k.current, Keys: map[string]string{}}
	for id, s := range k.secrets {
		f.Keys[id] = base64.StdEncoding.EncodeToString(s)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("codec: encode the keyring: %w", err)
	}
	return append(b, '\n'), nil
}

// WriteKeyFile writes the keyring to path with mode 0600, creating the file
// (and replacing an existing one) through a temporary file in the same
// directory, so a reader never sees half a keyring.
func (k *Keyring) WriteKeyFile(path string) error {
	b, err := k.MarshalKeyFile()
	if err != nil {
		return err
	}
	return writeSecretFile(path, b)
}

// writeSecretFile writes data to path atomically with mode 0600.
func writeSecretFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("codec: create a file next to %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("codec: make %s private: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("codec: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("codec: sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("codec: close %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("codec: put %s in place: %w", path, err)
	}
	return nil
}

// ParseKeyring reads a keyring in either format:
//
//   - JSON: {"current": "k2", "keys": {"k1": "<base64>", "k2": "<base64>"}}
//     ("current" may be left out when there is one key);
//   - lines "id:base64-key", one key a line (blank lines and lines starting
//     with '#' are skipped); the last line's key is current, so rotating is
//     appending a line.
//
// Keys are standard or URL-safe base64, padded or not, of exactly 32 bytes.
// Errors name the key id or the line, never a key.
func ParseKeyring(data []byte) (*Keyring, error) {
	if len(data) > maxKeyringBytes {
		return nil, fmt.Errorf("codec: keyring of %d bytes is over the %d-byte limit", len(data), maxKeyringBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("codec: the keyring is empty: give at least one id:base64-key")
	}
	if trimmed[0] == '{' {
		return parseJSONKeyring(trimmed)
	}
	return parseLineKeyring(strings.Split(string(trimmed), "\n"))
}

func parseJSONKeyring(data []byte) (*Keyring, error) {
	var f keyFile
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&f); err != nil {
		// The decoder's message can quote a character of the input: keep
		// only where it failed.
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return nil, fmt.Errorf("codec: the keyring is not valid JSON (at byte %d): write {\"current\": ID, \"keys\": {ID: BASE64}}", syn.Offset)
		}
		return nil, errors.New(`codec: the keyring JSON is not {"current": ID, "keys": {ID: BASE64}}: only those two fields, string values`)
	}
	if len(f.Keys) == 0 {
		return nil, errors.New(`codec: the keyring JSON has no "keys"`)
	}
	keys := map[string][]byte{}
	ids := make([]string, 0, len(f.Keys))
	for id, enc := range f.Keys {
		key, err := decodeKey(enc)
		if err != nil {
			return nil, fmt.Errorf("codec: key %q: %w", clip(id), err)
		}
		keys[id] = key
		ids = append(ids, id)
	}
	sort.Strings(ids)
	cur := f.Current
	if cur == "" {
		if len(ids) != 1 {
			return nil, fmt.Errorf(`codec: the keyring holds %d keys and no "current": name the key to encrypt with`, len(ids))
		}
		cur = ids[0]
	}
	return newKeyring(cur, ids, keys)
}

func parseLineKeyring(lines []string) (*Keyring, error) {
	keys := map[string][]byte{}
	var ids []string
	for n, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, enc, ok := strings.Cut(line, ":")
		id = strings.TrimSpace(id)
		if !ok || id == "" {
			return nil, fmt.Errorf("codec: keyring line %d is not id:base64-key", n+1)
		}
		if _, dup := keys[id]; dup {
			return nil, fmt.Errorf("codec: keyring line %d: key id %q appears twice: give each key its own id", n+1, clip(id))
		}
		key, err := decodeKey(strings.TrimSpace(enc))
		if err != nil {
			return nil, fmt.Errorf("codec: keyring line %d, key %q: %w", n+1, clip(id), err)
		}
		keys[id] = key
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, errors.New("codec: the keyring holds no key: give at least one id:base64-key")
	}
	return newKeyring(ids[len(ids)-1], ids, keys)
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) != KeySize {
				return nil, fmt.Errorf("it is %d bytes; AES-256 needs exactly %d (make one with `head -c 32 /dev/urandom | base64`)", len(b), KeySize)
			}
			return b, nil
		}
	}
	return nil, errors.New("it is not base64")
}

// KeyringFile reads a keyring file (see ParseKeyring for its formats).
func KeyringFile(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("codec: open the keyring %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyringBytes+1))
	if err != nil {
		return nil, fmt.Errorf("codec: read the keyring %s: %w", path, err)
	}
	k, err := ParseKeyring(data)
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return k, nil
}

// KeyringFromEnv reads the keyring in AGENTSAGA_CODEC_KEYS (nil, nil when it
// is unset). Keys in "id:base64" form may be separated by newlines, commas
// or spaces; the last is current.
func KeyringFromEnv() (*Keyring, error) {
	v := os.Getenv(EnvKeys)
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		k, err := ParseKeyring([]byte(v))
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, EnvKeys)
		}
		return k, nil
	}
	k, err := parseLineKeyring(strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '\n' || r == ' ' || r == '\t' || r == '\r' }))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, EnvKeys)
	}
	return k, nil
}

// KeyringFromEnvironment reads the keyring file named by
// $AGENTSAGA_CODEC_KEYS_FILE, else the keys in $AGENTSAGA_CODEC_KEYS, and
// says which; nil, "", nil when neither is set.
func KeyringFromEnvironment() (*Keyring, string, error) {
	if f := os.Getenv(EnvKeysFile); f != "" {
		k, err := KeyringFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("env %s: %w", EnvKeysFile, err)
		}
		return k, f, nil
	}
	k, err := KeyringFromEnv()
	if err != nil || k == nil {
		return nil, "", err
	}
	return k, "env " + EnvKeys, nil
}

// LoadOrCreate reads the keyring file at path, or, when there is none,
// generates a keyring of one key (id "dev-1") and writes it there with mode
// 0600. created reports which happened.
func LoadOrCreate(path string) (k *Keyring, created bool, err error) {
	k, err = KeyringFile(path)
	if err == nil {
		return k, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	if k, err = GenerateKeyring("dev-1"); err != nil {
		return nil, false, err
	}
	if err := k.WriteKeyFile(path); err != nil {
		return nil, false, err
	}
	return k, true, nil
}

// readSmall reads the file at path, refusing one over max bytes.
func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("codec: open %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("codec: read %s: %w", path, err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("codec: %s is over %d bytes", path, max)
	}
	return data, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

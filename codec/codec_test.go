package codec_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/codec"
)

// key returns a deterministic 32-byte key filled with b.
func key(b byte) []byte { return bytes.Repeat([]byte{b}, codec.KeySize) }

func ring(t *testing.T, current string, keys map[string][]byte) *codec.Keyring {
	t.Helper()
	k, err := codec.NewKeyring(current, keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type order struct {
	OrderID string `json:"order_id"`
	Note    string `json:"note"`
}

// A value round-trips through the codec data converter, and what leaves
// it is encrypted: encoding binary/encrypted, the key id, no plaintext.
func TestRoundTripEncrypts(t *testing.T) {
	k := ring(t, "k1", map[string][]byte{"k1": key(1)})
	dc := codec.NewDataConverter(k)
	in := order{OrderID: "ord_RT_8812", Note: "customer prefers a call"}
	p, err := dc.ToPayload(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p.Metadata[converter.MetadataEncoding]); got != codec.EncodingEncrypted {
		t.Errorf("encoding %q, want %q", got, codec.EncodingEncrypted)
	}
	if got := string(p.Metadata[codec.MetadataKeyID]); got != "k1" {
		t.Errorf("key id %q, want k1", got)
	}
	for _, plain := range []string{"ord_RT_8812", "customer prefers", "json/plain", "order_id"} {
		if bytes.Contains(p.Data, []byte(plain)) {
			t.Errorf("the encrypted payload holds %q in plain", plain)
		}
	}
	var out order
	if err := dc.FromPayload(p, &out); err != nil {
		t.Fatal(err)
	}
	if out != in {
		t.Errorf("round trip gave %+v, want %+v", out, in)
	}
	// Two encodings of one value differ (random nonce).
	p2, _ := dc.ToPayload(in)
	if bytes.Equal(p.Data, p2.Data) {
		t.Error("two encryptions of one value are identical: the nonce is not random")
	}
}

// Any change to the ciphertext, the nonce or the key id is refused.
func TestTamperIsRefused(t *testing.T) {
	// "alias" holds the very key of "k1": only the binding of the key id
	// into the ciphertext tells the two apart.
	k := ring(t, "k1", map[string][]byte{"k1": key(1), "alias": key(1)})
	c := codec.New(k)
	enc, err := c.Encode([]*commonpb.Payload{{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"secret note"`)}})
	if err != nil {
		t.Fatal(err)
	}
	orig := enc[0]
	for _, pos := range []int{0, codec.NonceSize, len(orig.Data) - 1} {
		bad := &commonpb.Payload{Metadata: orig.Metadata, Data: bytes.Clone(orig.Data)}
		bad.Data[pos] ^= 0x01
		if _, err := c.Decode([]*commonpb.Payload{bad}); !errors.Is(err, codec.ErrTampered) {
			t.Errorf("byte %d flipped: Decode error %v, want ErrTampered", pos, err)
		}
	}
	// The key id is bound: relabelling under another known key fails.
	relabel := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte(codec.EncodingEncrypted), codec.MetadataKeyID: []byte("alias")}, Data: orig.Data}
	if _, err := c.Decode([]*commonpb.Payload{relabel}); !errors.Is(err, codec.ErrTampered) {
		t.Errorf("relabelled payload: Decode error %v, want ErrTampered", err)
	}
	short := &commonpb.Payload{Metadata: orig.Metadata, Data: orig.Data[:10]}
	if _, err := c.Decode([]*commonpb.Payload{short}); !errors.Is(err, codec.ErrMalformed) {
		t.Errorf("truncated payload: Decode error %v, want ErrMalformed", err)
	}
	noID := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte(codec.EncodingEncrypted)}, Data: orig.Data}
	if _, err := c.Decode([]*commonpb.Payload{noID}); !errors.Is(err, codec.ErrMalformed) {
		t.Errorf("payload without key id: Decode error %v, want ErrMalformed", err)
	}
}

// After a rotation new payloads use the new key and old ones still read.
func TestRotation(t *testing.T) {
	old := ring(t, "2024-01", map[string][]byte{"2024-01": key(1)})
	oldDC := codec.NewDataConverter(old)
	p, err := oldDC.ToPayload("written before the rotation")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := old.Rotate("2024-06")
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Current() != "2024-06" {
		t.Fatalf("current after Rotate = %s", rotated.Current())
	}
	newDC := codec.NewDataConverter(rotated)
	var s string
	if err := newDC.FromPayload(p, &s); err != nil || s != "written before the rotation" {
		t.Fatalf("old payload under the rotated keyring: %q, %v", s, err)
	}
	p2, err := newDC.ToPayload("after")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(p2.Metadata[codec.MetadataKeyID]); got != "2024-06" {
		t.Errorf("new payload sealed with %q, want the new current key", got)
	}
	if _, err := old.Rotate("2024-01"); err == nil {
		t.Error("Rotate to an id already in the keyring succeeded")
	}
}

// A payload under a key the keyring lacks is a clear error naming the id.
func TestUnknownKeyID(t *testing.T) {
	a := codec.New(ring(t, "alpha", map[string][]byte{"alpha": key(1)}))
	b := codec.New(ring(t, "beta", map[string][]byte{"beta": key(2)}))
	enc, err := a.Encode([]*commonpb.Payload{{Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Decode(enc)
	if !errors.Is(err, codec.ErrUnknownKey) {
		t.Fatalf("Decode error %v, want ErrUnknownKey", err)
	}
	for _, want := range []string{`"alpha"`, "beta"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	// Without any keyring: the error says how to configure one.
	_, err = codec.New(nil).Decode(enc)
	if !errors.Is(err, codec.ErrNoKeys) || !strings.Contains(err.Error(), codec.EnvKeysFile) {
		t.Errorf("Decode without keyring: %v; want ErrNoKeys naming %s", err, codec.EnvKeysFile)
	}
	// A codec without keyring encrypts nothing and passes plain payloads.
	plain := []*commonpb.Payload{{Data: []byte("x")}}
	if out, err := codec.New(nil).Encode(plain); err != nil || out[0] != plain[0] {
		t.Errorf("Encode without keyring changed the payload: %v", err)
	}
	if out, err := b.Decode(plain); err != nil || out[0] != plain[0] {
		t.Errorf("Decode of a plain payload changed it: %v", err)
	}
}

func TestKeyLengthAndIDs(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33, 64} {
		if _, err := codec.NewKeyring("k", map[string][]byte{"k": make([]byte, n)}); err == nil || !strings.Contains(err.Error(), fmt.Sprint(n)) {
			t.Errorf("key of %d bytes: %v, want an error naming its length", n, err)
		}
	}
	for _, id := range []string{"", "a b", "-x", strings.Repeat("a", 65), "a\nb"} {
		if _, err := codec.NewKeyring(id, map[string][]byte{id: key(1)}); err == nil {
			t.Errorf("key id %q accepted", id)
		}
	}
	if _, err := codec.NewKeyring("missing", map[string][]byte{"k": key(1)}); err == nil {
		t.Error("a current id not in the keyring was accepted")
	}
	short := base64.StdEncoding.EncodeToString(make([]byte, 16))
	if _, err := codec.ParseKeyring([]byte("k1:" + short)); err == nil || !strings.Contains(err.Error(), "16 bytes") {
		t.Errorf("16-byte key in a file: %v, want an error naming the length", err)
	}
}

func TestParseFormats(t *testing.T) {
	b1, b2 := base64.StdEncoding.EncodeToString(key(1)), base64.RawURLEncoding.EncodeToString(key(2))
	cases := map[string]struct {
		in      string
		current string
		ids     int
	}{
		"lines, last current":       {"# keys\nk1:" + b1 + "\n\nk2:" + b2 + "\n", "k2", 2},
		"json with current":         {`{"current":"k1","keys":{"k1":"` + b1 + `","k2":"` + b2 + `"}}`, "k1", 2},
		"json, one key, no current": {`{"keys":{"only":"` + b1 + `"}}`, "only", 1},
	}
	for name, tc := range cases {
		k, err := codec.ParseKeyring([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if k.Current() != tc.current || len(k.IDs()) != tc.ids {
			t.Errorf("%s: current %s, %d ids; want %s, %d", name, k.Current(), len(k.IDs()), tc.current, tc.ids)
		}
	}
	secret := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdeX"))
	for name, in := range map[string]string{
		"empty":           "  \n",
		"no colon":        "k1" + b1,
		"duplicate":       "k1:" + b1 + "\nk1:" + b2,
		"not base64":      "k1:" + secret[:20] + "!!!",
		"json two no cur": `{"keys":{"a":"` + b1 + `","b":"` + b2 + `"}}`,
		"json unknown":    `{"keys":{"a":"` + b1 + `"},"extra":1}`,
		"json syntax":     `{"keys":{"a":"` + secret + `"`,
		"json bad key":    `{"keys":{"a":"` + secret[:30] + `"}}`,
	} {
		_, err := codec.ParseKeyring([]byte(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), secret[:16]) || strings.Contains(err.Error(), b1[:16]) {
			t.Errorf("%s: the error shows key material: %v", name, err)
		}
	}
}

func TestKeyringFromEnv(t *testing.T) {
	t.Setenv(codec.EnvKeys, "")
	if k, err := codec.KeyringFromEnv(); k != nil || err != nil {
		t.Fatalf("unset: %v, %v", k, err)
	}
	t.Setenv(codec.EnvKeys, "old:"+base64.StdEncoding.EncodeToString(key(1))+", new:"+base64.StdEncoding.EncodeToString(key(2)))
	k, err := codec.KeyringFromEnv()
	if err != nil || k.Current() != "new" {
		t.Fatalf("two keys in the variable: %v, %v", k, err)
	}
	t.Setenv(codec.EnvKeys, "broken")
	if _, err := codec.KeyringFromEnv(); err == nil || !strings.Contains(err.Error(), codec.EnvKeys) {
		t.Errorf("a broken variable: %v, want an error naming %s", err, codec.EnvKeys)
	}
}

// No way of printing a keyring shows a key.
func TestKeyringNeverPrintsKeys(t *testing.T) {
	raw := []byte("THIS-IS-THE-SECRET-KEY-32-BYTES!")
	k := ring(t, "k1", map[string][]byte{"k1": raw})
	b64 := base64.StdEncoding.EncodeToString(raw)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("keyring", "ring", k)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("keyring", "ring", k)
	js, err := json.Marshal(map[string]any{"ring": k})
	if err != nil {
		t.Fatal(err)
	}
	outs := []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s %x %q", k, k, k, k, k, k), fmt.Sprintf("%+v", *k), logs.String(), string(js)}
	for _, out := range outs {
		if strings.Contains(out, string(raw)) || strings.Contains(out, b64) || strings.Contains(out, fmt.Sprintf("%x", raw)) ||
			strings.Contains(out, "84 72 73 83") || strings.Contains(out, "[84 72") {
			t.Errorf("a key is printed: %s", out)
		}
		if !strings.Contains(out, "k1") {
			t.Errorf("the key id is not shown: %s", out)
		}
	}
}

func TestKeyFileRoundTripAndMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, codec.KeysFileName)
	k, created, err := codec.LoadOrCreate(path)
	if err != nil || !created {
		t.Fatalf("first LoadOrCreate: %v, created %v", err, created)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	again, created, err := codec.LoadOrCreate(path)
	if err != nil || created {
		t.Fatalf("second LoadOrCreate: %v, created %v", err, created)
	}
	p, err := codec.NewDataConverter(k).ToPayload("x")
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := codec.NewDataConverter(again).FromPayload(p, &s); err != nil || s != "x" {
		t.Errorf("the reloaded keyring does not read what the first sealed: %q %v", s, err)
	}
	tok, err := codec.LoadOrCreateToken(filepath.Join(dir, codec.TokenFileName))
	if err != nil || len(tok) < 32 {
		t.Fatalf("token: %d chars, %v", len(tok), err)
	}
	tok2, err := codec.LoadOrCreateToken(filepath.Join(dir, codec.TokenFileName))
	if err != nil || tok2 != tok {
		t.Errorf("the token changed on reload")
	}
	if fi, _ := os.Stat(filepath.Join(dir, codec.TokenFileName)); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
}

// The decoder survives any input: errors, never panics.
func FuzzDecode(f *testing.F) {
	k, err := codec.NewKeyring("k1", map[string][]byte{"k1": key(1)})
	if err != nil {
		f.Fatal(err)
	}
	c := codec.New(k)
	good, err := c.Encode([]*commonpb.Payload{{Metadata: map[string][]byte{"encoding": []byte("json/plain")}, Data: []byte(`"hi"`)}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(codec.EncodingEncrypted), []byte("k1"), good[0].Data)
	f.Add([]byte(codec.EncodingEncrypted), []byte("k1"), []byte{})
	f.Add([]byte(codec.EncodingEncrypted), []byte("nope"), good[0].Data)
	f.Add([]byte(codec.EncodingEncrypted), []byte{}, []byte("garbage"))
	f.Add([]byte("json/plain"), []byte("k1"), []byte(`"x"`))
	f.Fuzz(func(t *testing.T, enc, id, data []byte) {
		p := &commonpb.Payload{Metadata: map[string][]byte{"encoding": enc, codec.MetadataKeyID: id}, Data: data}
		out, err := c.Decode([]*commonpb.Payload{p})
		if err == nil && len(out) != 1 {
			t.Fatalf("Decode returned %d payloads for 1", len(out))
		}
		if err != nil && len(err.Error()) > 1000 {
			t.Fatalf("error of %d bytes", len(err.Error()))
		}
	})
}

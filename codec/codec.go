// Package codec encrypts Temporal payloads: every workflow argument, result,
// signal, update, query answer, memo, activity summary and (with the failure
// converter) error message leaves the process sealed with AES-256-GCM, so the
// Temporal server, its database and its Web UI hold only ciphertext.
//
// A payload is encrypted whole: its metadata and data are marshalled and
// sealed under a random 96-bit nonce with the keyring's current key. The
// encrypted payload says "binary/encrypted" in its "encoding" metadata and
// names the key in "encryption-key-id", so a keyring that holds old keys next
// to the current one still reads what they sealed (key rotation). The key id
// is bound to the ciphertext as associated data.
//
// Keys are read from a file (KeyringFile) or the AGENTSAGA_CODEC_KEYS
// environment variable (KeyringFromEnv), never from a flag's value, and a
// Keyring never prints its keys (String, GoString, LogValue and MarshalJSON
// show key ids only).
//
// Server serves Temporal's codec server protocol (POST /encode and /decode,
// as the Web UI and the temporal CLI call them) behind a token, so an
// authorised operator reads plain values in the UI.
package codec

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"
)

// Metadata of an encrypted payload.
const (
	// EncodingEncrypted is the "encoding" metadata of an encrypted payload.
	EncodingEncrypted = "binary/encrypted"
	// MetadataKeyID is the metadata field naming the key that sealed it.
	MetadataKeyID = "encryption-key-id"
)

// NonceSize is the size of the random nonce in front of every ciphertext
// (96 bits, GCM's standard nonce).
const NonceSize = 12

// Errors a Decode may wrap; test with errors.Is.
var (
	// ErrUnknownKey: the payload names a key id the keyring does not hold.
	ErrUnknownKey = errors.New("payload encrypted with a key that is not in the keyring")
	// ErrNoKeys: the payload is encrypted and no keyring is configured.
	ErrNoKeys = errors.New("payload is encrypted and no codec keys are configured")
	// ErrTampered: the ciphertext does not authenticate under the named key.
	ErrTampered = errors.New("encrypted payload does not authenticate")
	// ErrMalformed: the encrypted payload is not in this codec's format.
	ErrMalformed = errors.New("encrypted payload is malformed")
)

// Codec is a converter.PayloadCodec that encrypts payloads with the current
// key of a Keyring and decrypts them with whichever key they name. Payloads
// that are not encrypted are decoded unchanged (histories written before the
// codec was on still read). A Codec without keyring passes payloads through
// on Encode and refuses to decode encrypted ones, saying how to configure
// keys. It is safe for concurrent use.
type Codec struct {
	ring *Keyring
}

var _ converter.PayloadCodec = (*Codec)(nil)

// New returns a codec over ring. A nil ring encrypts nothing (see Codec).
func New(ring *Keyring) *Codec { return &Codec{ring: ring} }

// Keyring returns the codec's keyring (nil when it has none).
func (c *Codec) Keyring() *Keyring { return c.ring }

// Enabled reports whether the codec encrypts (it has a keyring).
func (c *Codec) Enabled() bool { return c.ring != nil }

// aad is the associated data of a ciphertext: it binds the key id.
func aad(keyID string) []byte { return []byte("agentsaga/codec/v1\x00" + keyID) }

// Encode seals each payload with the current key. Without keyring it
// returns the payloads unchanged.
func (c *Codec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	if c.ring == nil {
		return payloads, nil
	}
	id, aead := c.ring.currentAEAD()
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return payloads, fmt.Errorf("codec: marshal payload %d for encryption: %w", i, err)
		}
		sealed := make([]byte, NonceSize, NonceSize+len(plain)+aead.Overhead())
		if _, err := rand.Read(sealed); err != nil {
			return payloads, fmt.Errorf("codec: draw a nonce: %w", err)
		}
		sealed = aead.Seal(sealed, sealed[:NonceSize], plain, aad(id))
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{
				converter.MetadataEncoding: []byte(EncodingEncrypted),
				MetadataKeyID:              []byte(id),
			},
			Data: sealed,
		}
	}
	return out, nil
}

// Decode opens each encrypted payload with the key it names and returns
// other payloads unchanged. It never panics on any input: a payload under
// an unknown key id, tampered with or malformed is an error naming the
// payload's index (and key id), wrapping ErrUnknownKey, ErrTampered,
// ErrMalformed or ErrNoKeys.
func (c *Codec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if p == nil || string(p.GetMetadata()[converter.MetadataEncoding]) != EncodingEncrypted {
			out[i] = p
			continue
		}
		d, err := c.open(p)
		if err != nil {
			return payloads, fmt.Errorf("codec: decode payload %d: %w", i, err)
		}
		out[i] = d
	}
	return out, nil
}

func (c *Codec) open(p *commonpb.Payload) (*commonpb.Payload, error) {
	rawID, ok := p.GetMetadata()[MetadataKeyID]
	if !ok || len(rawID) == 0 {
		return nil, fmt.Errorf("%w: it has no %s metadata", ErrMalformed, MetadataKeyID)
	}
	id := printableID(rawID)
	if c.ring == nil {
		return nil, fmt.Errorf("%w (it names key %s): set --codec-keys FILE, %s or %s (worker --dev keeps its keys at <data-dir>/%s)",
			ErrNoKeys, id, EnvKeysFile, EnvKeys, KeysFileName)
	}
	aead, ok := c.ring.aead(string(rawID))
	if !ok {
		return nil, fmt.Errorf("%w: it names key %s, the keyring holds %s; add that key to the keyring (rotation keeps old keys next to the current one)",
			ErrUnknownKey, id, strings.Join(c.ring.IDs(), ", "))
	}
	data := p.GetData()
	if len(data) < NonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a nonce and a tag", ErrMalformed, len(data))
	}
	plain, err := aead.Open(nil, data[:NonceSize], data[NonceSize:], aad(string(rawID)))
	if err != nil {
		return nil, fmt.Errorf("%w under key %s: it was altered, or the key with that id is not the one that sealed it", ErrTampered, id)
	}
	var d commonpb.Payload
	if err := proto.Unmarshal(plain, &d); err != nil {
		return nil, fmt.Errorf("%w: the plaintext under key %s is not a payload: %v", ErrMalformed, id, err)
	}
	return &d, nil
}

// printableID quotes a key id taken from a payload for an error message,
// clipped so that a hostile payload cannot flood a log.
func printableID(b []byte) string {
	const max = 64
	if len(b) > max {
		return fmt.Sprintf("%q...", b[:max])
	}
	return fmt.Sprintf("%q", b)
}

// NewDataConverter returns the SDK's default data converter wrapped with a
// codec over ring: what every client and worker of the project uses. A nil
// ring encrypts nothing and refuses to read encrypted payloads (see Codec).
func NewDataConverter(ring *Keyring) converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), New(ring))
}

// NewFailureConverter returns a failure converter that moves error messages
// and stack traces into an encoded payload of dc (so a codec encrypts them
// too); clients with that converter read them back in plain.
func NewFailureConverter(dc converter.DataConverter) converter.FailureConverter {
	return temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc, EncodeCommonAttributes: true})
}

// ClientOptions sets opts' data converter and failure converter to encrypt
// with ring (see NewDataConverter and NewFailureConverter). With a nil ring
// it sets converters that encrypt nothing and explain, on an encrypted
// payload, how to configure the keys.
func ClientOptions(opts *client.Options, ring *Keyring) {
	dc := NewDataConverter(ring)
	opts.DataConverter = dc
	if ring != nil {
		opts.FailureConverter = NewFailureConverter(dc)
	}
}

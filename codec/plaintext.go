package codec

import (
	"encoding/json"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// EncodingPlaintextRefused is the encoding a strict codec gives a payload
// that arrived unencrypted: its value is gone, and decoding it is refused.
const EncodingPlaintextRefused = "agentsaga/plaintext-refused"

// ErrPlaintext: a worker with codec keys was sent a payload in the clear.
var ErrPlaintext = errors.New("payload is not encrypted, and this worker has codec keys and refuses plaintext payloads: " +
	"configure the client with the worker's keyring (--codec-keys FILE, " + EnvKeysFile + " or " + EnvKeys +
	"; the Temporal CLI and UI through the codec endpoint), or start the worker with --allow-plaintext-payloads to accept them")

// refusedJSON is what a refused plaintext payload decodes to when the
// target is raw JSON (a workflow's input), so the workflow can refuse it
// with ErrPlaintext's message (see IsRefusedPlaintext).
var refusedJSON = json.RawMessage(`{"agentsaga/refused":"plaintext payload"}`)

// IsRefusedPlaintext reports whether raw is what a strict worker's data
// converter gave for a payload that arrived unencrypted.
func IsRefusedPlaintext(raw json.RawMessage) bool { return string(raw) == string(refusedJSON) }

// strict is a Codec that replaces every payload that arrives unencrypted by
// an EncodingPlaintextRefused payload, so the plaintext never reaches the
// worker's code: a workflow's input decodes to refusedJSON (the workflow
// fails, naming ErrPlaintext), an Update's arguments fail to decode (the
// Update is rejected with ErrPlaintext), and a signal is dropped by the SDK
// as corrupt. Payloads without data (binary/null) pass.
type strict struct{ *Codec }

func (s strict) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		enc := string(p.GetMetadata()[converter.MetadataEncoding])
		if p != nil && enc != EncodingEncrypted && enc != converter.MetadataEncodingNil {
			out[i] = &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(EncodingPlaintextRefused)}}
			continue
		}
		out[i] = p
	}
	return s.Codec.Decode(out)
}

// refusedConverter reads EncodingPlaintextRefused payloads: raw JSON gets
// refusedJSON, anything else ErrPlaintext. It never encodes.
type refusedConverter struct{}

func (refusedConverter) ToPayload(any) (*commonpb.Payload, error) { return nil, nil }

func (refusedConverter) FromPayload(_ *commonpb.Payload, valuePtr any) error {
	if raw, ok := valuePtr.(*json.RawMessage); ok {
		*raw = append(json.RawMessage(nil), refusedJSON...)
		return nil
	}
	return ErrPlaintext
}

func (refusedConverter) ToString(*commonpb.Payload) string { return "[plaintext payload refused]" }

func (refusedConverter) Encoding() string { return EncodingPlaintextRefused }

// NewWorkerDataConverter returns the data converter of a worker: as
// NewDataConverter, and, when ring is set and allowPlaintext is not, one
// that refuses payloads a client sent unencrypted (see ErrPlaintext).
func NewWorkerDataConverter(ring *Keyring, allowPlaintext bool) converter.DataConverter {
	if ring == nil || allowPlaintext {
		return NewDataConverter(ring)
	}
	inner := converter.NewCompositeDataConverter(
		converter.NewNilPayloadConverter(),
		converter.NewByteSlicePayloadConverter(),
		converter.NewProtoJSONPayloadConverter(),
		converter.NewProtoPayloadConverter(),
		converter.NewJSONPayloadConverter(),
		refusedConverter{},
	)
	return converter.NewCodecDataConverter(inner, strict{New(ring)})
}

// WorkerClientOptions sets opts' converters for a worker (and the client it
// shares): as ClientOptions, with NewWorkerDataConverter's refusal of
// plaintext payloads unless allowPlaintext.
func WorkerClientOptions(opts *client.Options, ring *Keyring, allowPlaintext bool) {
	ClientOptions(opts, ring)
	if ring != nil && !allowPlaintext {
		opts.DataConverter = NewWorkerDataConverter(ring, false)
		opts.FailureConverter = NewFailureConverter(opts.DataConverter)
	}
}

// PlaintextError is the error a workflow returns when its input arrived
// unencrypted at a strict worker.
func PlaintextError(what string) error {
	return fmt.Errorf("%s: %w", what, ErrPlaintext)
}

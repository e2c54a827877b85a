package codec_test

import (
	"encoding/json"
	"errors"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/codec"
)

// A worker with keys refuses what a client without them sends: raw JSON (a
// workflow's input) decodes to the refusal marker, a struct (an Update's or
// a signal's argument) fails with ErrPlaintext, and nothing of the plaintext
// reaches the worker. Its own encrypted payloads, and empty ones, still read.
func TestWorkerRefusesPlaintextPayloads(t *testing.T) {
	k := ring(t, "k1", map[string][]byte{"k1": key(1)})
	worker := codec.NewWorkerDataConverter(k, false)
	plain, err := converter.GetDefaultDataConverter().ToPayload(order{OrderID: "ord_PLAIN_1"})
	if err != nil {
		t.Fatal(err)
	}

	var raw json.RawMessage
	if err := worker.FromPayload(plain, &raw); err != nil {
		t.Fatalf("raw JSON target: %v", err)
	}
	if !codec.IsRefusedPlaintext(raw) {
		t.Fatalf("raw JSON target got %s, want the refusal marker", raw)
	}
	var o order
	err = worker.FromPayload(plain, &o)
	if !errors.Is(err, codec.ErrPlaintext) {
		t.Fatalf("struct target: %v, want ErrPlaintext", err)
	}
	if o.OrderID != "" {
		t.Fatalf("the plaintext reached the worker: %+v", o)
	}

	// The worker's own payloads are encrypted and read back.
	enc, err := worker.ToPayload(order{OrderID: "ord_ENC_1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.FromPayload(enc, &o); err != nil || o.OrderID != "ord_ENC_1" {
		t.Fatalf("encrypted round trip: %+v %v", o, err)
	}
	// nil arguments are not plaintext.
	null, err := worker.ToPayload(nil)
	if err != nil {
		t.Fatal(err)
	}
	var p *order
	if err := worker.FromPayload(null, &p); err != nil || p != nil {
		t.Fatalf("nil payload: %v %v", p, err)
	}

	// Allowed explicitly, or without keys, plaintext reads as before.
	for _, dc := range []converter.DataConverter{codec.NewWorkerDataConverter(k, true), codec.NewWorkerDataConverter(nil, false)} {
		var o order
		if err := dc.FromPayload(plain, &o); err != nil || o.OrderID != "ord_PLAIN_1" {
			t.Fatalf("plaintext allowed: %+v %v", o, err)
		}
	}
}

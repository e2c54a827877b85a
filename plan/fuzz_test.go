package plan_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode"

	"github.com/agentsaga/agentsaga/internal/demotools"
	"github.com/agentsaga/agentsaga/plan"
	"github.com/agentsaga/agentsaga/redact"
	"github.com/agentsaga/agentsaga/tool"
)

// FuzzParse runs the plan parser and validator against the demo tools. For
// any input they never panic, and a plan they accept is bounded (size,
// steps), holds no secret and no control character outside multi-line
// fields, and survives a round trip through JSON unchanged. With pad > 0
// the input is instead a plan whose subject is pad bytes long (up to 3 MB,
// too big for a seed file): it is refused by size, naming the limit.
// Seeds: testdata/fuzz/FuzzParse. Long run:
//
//	go test -fuzz FuzzParse -fuzztime 10m ./plan/
func FuzzParse(f *testing.F) {
	f.Add([]byte(planWith(ticket)), uint32(0))
	f.Add([]byte(planWith(ticket)), uint32(2<<20))
	// Shapes of secrets and money the checks must refuse.
	f.Add([]byte(planWith(`{"tool":"send_email","args":{"to":"a@example.com","subject":"s","body":"4242.4242\n4242/4242"}}`)), uint32(0))
	f.Add([]byte(planWith(`{"tool":"create_ticket","args":{"subject":"４２４２４２４２４２４２４２４２"}}`)), uint32(0))
	f.Add([]byte(planWith(`{"tool":"create_ticket","args":{"subject":"https://u:p4ss@h.example/"}}`)), uint32(0))
	f.Add([]byte(planWith(`{"tool":"apply_refund","args":{"order_id":"o","amount_minor":12345678901234567890,"currency":"eur","reason":"r"}}`)), uint32(0))
	f.Add([]byte(planWith(`{"tool":"apply_refund","args":{"order_id":"o","amount_minor":1,"currency":"XYZ","reason":"r"}}`)), uint32(0))
	specs := demotools.Specs()
	f.Fuzz(func(t *testing.T, data []byte, pad uint32) {
		if pad > 0 {
			data = []byte(planWith(`{"tool":"create_ticket","args":{"subject":"` + strings.Repeat("x", int(pad%(3<<20))) + `"}}`))
		}
		p, err := plan.ParseBytes(data, plan.Limits{})
		if err == nil {
			err = p.Validate(specs)
		}
		if len(data) > plan.DefaultMaxPlanBytes {
			if err == nil || !strings.Contains(err.Error(), "max_plan_bytes") {
				t.Fatalf("a plan of %d bytes was not refused by size: %v", len(data), err)
			}
			return
		}
		if err != nil {
			if !plan.IsValidation(err) {
				t.Fatalf("refusal is not a *ValidationError: %v", err)
			}
			if len(err.Error()) > 64<<10 {
				t.Fatalf("refusal of %d bytes: problems must stay small", len(err.Error()))
			}
			return
		}
		if len(p.Steps) == 0 || len(p.Steps) > plan.DefaultMaxSteps {
			t.Fatalf("accepted a plan of %d steps", len(p.Steps))
		}
		checkText(t, "request_id", p.RequestID, false)
		checkText(t, "requested_by", p.RequestedBy, false)
		for i, s := range p.Steps {
			spec, _ := specs.Spec(s.Tool)
			args, err := tool.DecodeObject(s.Args)
			if err != nil {
				t.Fatalf("accepted steps[%d].args that are not an object: %v", i+1, err)
			}
			for name, v := range args {
				f, _ := spec.Args.Field(name)
				if str, ok := v.(string); ok {
					checkText(t, name, str, f.Multiline)
				}
			}
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("accepted plan does not encode: %v", err)
		}
		q, err := plan.ParseBytes(again, plan.Limits{})
		if err != nil {
			t.Fatalf("accepted plan refused after a round trip: %v\n%s", err, again)
		}
		if err := q.Validate(specs); err != nil {
			t.Fatalf("accepted plan invalid after a round trip: %v", err)
		}
		f1, _ := p.Fingerprint()
		f2, _ := q.Fingerprint()
		if f1 != f2 {
			t.Fatalf("round trip changed the plan: %s != %s", f1, f2)
		}
	})
}

func checkText(t *testing.T, field, s string, multiline bool) {
	t.Helper()
	if k, ok := redact.Find(s); ok {
		t.Fatalf("accepted %s holding a %s: %q", field, k, s)
	}
	for _, r := range s {
		if unicode.IsControl(r) && !(multiline && (r == '\n' || r == '\t')) {
			t.Fatalf("accepted %s holding %U", field, r)
		}
		if r == unicode.ReplacementChar {
			// Only a literal U+FFFD may pass, never a replaced byte.
			continue
		}
	}
}

// FuzzReadLimited: ReadLimited returns the input exactly when it fits the
// limit, and refuses it naming the limit otherwise.
func FuzzReadLimited(f *testing.F) {
	f.Add([]byte("{}"), uint16(2))
	f.Add([]byte("{}"), uint16(1))
	f.Add([]byte(""), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, limit uint16) {
		out, err := plan.ReadLimited(context.Background(), bytes.NewReader(data), int(limit))
		switch {
		case len(data) <= int(limit) && (err != nil || !bytes.Equal(out, data)):
			t.Fatalf("input of %d bytes under limit %d: %v", len(data), limit, err)
		case len(data) > int(limit) && (err == nil || !strings.Contains(err.Error(), "the limit is")):
			t.Fatalf("input of %d bytes over limit %d accepted: %v", len(data), limit, err)
		}
	})
}

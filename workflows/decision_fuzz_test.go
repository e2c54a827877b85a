package workflows_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/operators"
	"github.com/agentsaga/agentsaga/workflows"
)

// FuzzDecisionPayload feeds arbitrary JSON to the decision payload checks the
// Update validators and the signal path run first: whatever they accept has a
// name and texts within their limits (fingerprint, run_id and signature
// included), valid UTF-8, and no control, formatting or other invisible
// character in `by`, and they never panic. Seeds are below.
// Long run: go test -fuzz FuzzDecisionPayload -fuzztime 10m ./workflows/
func FuzzDecisionPayload(f *testing.F) {
	for _, seed := range []string{
		`{"step":1,"fingerprint":"ab","by":"alice","approved":true}`,
		`{"step":1,"by":"CFO Jane Doe","outcome":"succeeded","external_id":"tkt_DOES_NOT_EXIST"}`,
		`{"step":1,"by":"al\u001b[2Jice","approved":true}`,
		`{"step":1,"by":"bob","note":"nul\u0000byte","outcome":"failed"}`,
		`{"step":1,"by":"bob","outcome":"maybe"}`,
		`{"step":1,"by":"","approved":true}`,
		`{"step":1,"by":"\u202eecila","approved":true}`,
		`{"step":-1,"by":"bob","question_id":"q1-step1-approval\n","approved":true}`,
		"{\"by\":\"\xff\xfe\",\"outcome\":\"retry\"}",
		`{"step":1,"by":"alice\u200b","approved":true}`,
		`{"step":1,"by":"Jose\u0301","approved":true}`,
		`{"step":1,"by":"\u3164alice","approved":true}`,
		`{"step":1,"by":"ali\tce","outcome":"failed"}`,
		`{"step":1,"by":"bob","run_id":"` + strings.Repeat("r", 65) + `","approved":true}`,
		`{"step":1,"by":"bob","signature":"` + strings.Repeat("s", 129) + `","outcome":"retry"}`,
		`{"step":1,"by":"bob","card_digest":"sha256:` + strings.Repeat("a", 64) + `","approved":true}`,
		`{"step":1,"by":"bob","card_digest":"sha256:` + strings.Repeat("A", 64) + `","approved":true}`,
		`{"step":1,"by":"bob","card_digest":"sha256:` + strings.Repeat("a", 63) + `\u00e9","outcome":"failed"}`,
		`{"step":1,"by":"bob","card_digest":"md5:` + strings.Repeat("a", 67) + `","outcome":"failed"}`,
		`{"step":1,"by":"bob","card_digest":"sha256:` + strings.Repeat("a", 6400) + `","approved":true}`,
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"by":"` + strings.Repeat("a", 1500000) + `","outcome":"retry"}`))
	f.Add([]byte(`{"by":"bob","fingerprint":"` + strings.Repeat("f", 1500000) + `","approved":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a workflows.ApproveSignal
		if json.Unmarshal(data, &a) == nil && workflows.CheckApprove(a) == nil {
			okText(t, "by", a.By, workflows.MaxByLen, true)
			okText(t, "reason", a.Reason, workflows.MaxNoteLen, false)
			okBounded(t, a.Fingerprint, a.RunID, a.Signature)
			okDigest(t, a.CardDigest)
		}
		var s workflows.ResolveSignal
		if json.Unmarshal(data, &s) == nil && workflows.CheckResolve(s) == nil {
			okText(t, "by", s.By, workflows.MaxByLen, true)
			okText(t, "note", s.Note, workflows.MaxNoteLen, false)
			okText(t, "external_id", s.ExternalID, workflows.MaxExternalIDLen, false)
			okBounded(t, "", s.RunID, s.Signature)
			okDigest(t, s.CardDigest)
			switch s.Outcome {
			case workflows.OutcomeSucceeded, workflows.OutcomeFailed, workflows.OutcomeRetry:
			default:
				t.Fatalf("accepted outcome %q", s.Outcome)
			}
		}
	})
}

func okText(t *testing.T, field, v string, limit int, name bool) {
	t.Helper()
	switch {
	case name && v == "":
		t.Fatalf("accepted an empty %s", field)
	case len(v) > limit:
		t.Fatalf("accepted %s of %d bytes (limit %d)", field, len(v), limit)
	case !utf8.ValidString(v):
		t.Fatalf("accepted invalid UTF-8 in %s", field)
	}
	for _, c := range v {
		if unicode.IsControl(c) && (name || (c != '\n' && c != '\t')) {
			t.Fatalf("accepted control character %U in %s", c, field)
		}
		if name && unicode.Is(unicode.Cf, c) {
			t.Fatalf("accepted formatting character %U in %s", c, field)
		}
	}
	if name && operators.CheckIdentity(v) != nil {
		t.Fatalf("accepted an invisible character in %s %q", field, v)
	}
}

func okBounded(t *testing.T, fingerprint, runID, sig string) {
	t.Helper()
	if len(fingerprint) > workflows.MaxFingerprintLen || len(runID) > workflows.MaxRunIDLen || len(sig) > workflows.MaxSignatureLen {
		t.Fatalf("accepted an oversize fingerprint (%d), run_id (%d) or signature (%d)", len(fingerprint), len(runID), len(sig))
	}
}

func okDigest(t *testing.T, d string) {
	t.Helper()
	if d == "" {
		return
	}
	if len(d) != workflows.MaxCardDigestLen || !strings.HasPrefix(d, workflows.CardDigestPrefix) || strings.Trim(d[len(workflows.CardDigestPrefix):], "0123456789abcdef") != "" {
		t.Fatalf("accepted card_digest %q", d)
	}
}

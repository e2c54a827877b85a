package workflows_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/agentsaga/agentsaga/workflows"
)

// FuzzDecisionPayload feeds arbitrary JSON to the decision payload checks the
// Update validators and the signal path run first: whatever they accept has a
// name and texts within their limits, valid UTF-8, and no control or
// formatting character in `by`, and they never panic. Seeds are below.
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
	} {
		f.Add([]byte(seed))
	}
	f.Add([]byte(`{"by":"` + strings.Repeat("a", 1500000) + `","outcome":"retry"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var a workflows.ApproveSignal
		if json.Unmarshal(data, &a) == nil && workflows.CheckApprove(a) == nil {
			okText(t, "by", a.By, workflows.MaxByLen, true)
			okText(t, "reason", a.Reason, workflows.MaxNoteLen, false)
		}
		var s workflows.ResolveSignal
		if json.Unmarshal(data, &s) == nil && workflows.CheckResolve(s) == nil {
			okText(t, "by", s.By, workflows.MaxByLen, true)
			okText(t, "note", s.Note, workflows.MaxNoteLen, false)
			okText(t, "external_id", s.ExternalID, workflows.MaxExternalIDLen, false)
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
}

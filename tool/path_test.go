package tool_test

import (
	"net/url"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/agentsaga/agentsaga/tool"
)

// The dot segments and their encodings a normaliser turns into "." or
// "..", and ids that only look close.
var dotSeeds = map[string]bool{
	".": true, "..": true, "%2e": true, "%2E": true, "%2e%2e": true, "%2E%2e": true, ".%2E": true, "%2e.": true,
	"%252e%252e": true, "%25252E": true, "．．": true, "．": true, "a/..": true, "../a": true, `..\x`: true,
	"a%2F..": true, "a%2f%2e%2e": true, "./": true,
	"...": false, "a..b": false, "..a": false, ".a": false, "v1.2": false, "%2e%2e%2e": false, "%zz..": false,
	"u-42": false, "a%2Fb": false, "%": false, "%2": false, "..%": false,
}

func TestDotSegment(t *testing.T) {
	for s, want := range dotSeeds {
		if got := tool.DotSegment(s); got != want {
			t.Errorf("DotSegment(%q) = %v, want %v", s, got, want)
		}
	}
}

// A path argument refused at plan validation names the field.
func TestPathSegmentArgumentRefusedNamingTheField(t *testing.T) {
	s := tool.Schema{Fields: []tool.Field{{Name: "session", Type: tool.String, Required: true, PathSegment: true}, {Name: "note", Type: tool.String}}}
	errs := s.Check("steps[0].args", []byte(`{"session":"%2E%2e","note":".."}`))
	if len(errs) != 1 || errs[0].Path != "steps[0].args.session" || !strings.Contains(errs[0].Problem, `".."`) {
		t.Fatalf("refusals %v; want one naming steps[0].args.session (note fills no path segment)", errs)
	}
}

// normalise is what a provider's front does to a path before routing: it
// decodes percent-encodings (some layers more than once), applies NFKC,
// reads '\' as '/', and removes dot segments as RFC 3986, section 5.2.4
// says.
func normalise(p string) string {
	for range 5 {
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
	p = strings.ReplaceAll(norm.NFKC.String(p), `\`, "/")
	var out []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case ".":
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
		}
	}
	return strings.Join(out, "/")
}

// FuzzDotSegment: a value DotSegment accepts, escaped into a path segment as
// the catalogue does, stays below its parent at a normalising provider:
// `/v1/users/u-42/sessions/{session}` never becomes the user or another
// user. Seeds: the table above. Long run:
//
//	go test -fuzz FuzzDotSegment -fuzztime 5m ./tool/
func FuzzDotSegment(f *testing.F) {
	for s := range dotSeeds {
		f.Add(s)
	}
	const parent = "/v1/users/u-42/sessions/"
	f.Fuzz(func(t *testing.T, s string) {
		if s == "" || tool.DotSegment(s) {
			return
		}
		got := normalise(parent + url.PathEscape(s))
		if !strings.HasPrefix(got, parent) && got+"/" != parent {
			t.Fatalf("%q was accepted and reached %q, outside %s", s, got, parent)
		}
		if got+"/" == parent || got == parent {
			t.Fatalf("%q was accepted and reached the parent %q itself", s, got)
		}
	})
}

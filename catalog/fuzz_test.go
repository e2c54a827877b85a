package catalog_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentsaga/agentsaga/catalog"
)

// nasty is the seed corpus of hostile catalogue files, each with whether the
// loader must refuse it.
func nasty() map[string]string {
	example, _ := os.ReadFile("examples/sandbox.yaml")
	provider, _ := os.ReadFile("testdata/provider.yaml")
	laughs := "version: 1\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
	for i, prev := 'b', 'a'; i <= 'j'; i, prev = i+1, i {
		laughs += string(i) + ": &" + string(i) + " [" + strings.Repeat("*"+string(prev)+",", 8) + "*" + string(prev) + "]\n"
	}
	laughs += "systems: *j\n"
	return map[string]string{
		"example":         string(example),
		"provider":        string(provider),
		"huge":            "version: 1\n#" + strings.Repeat("x", catalog.MaxFileBytes+10),
		"deep_flow":       "version: 1\nsystems: " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + "\n",
		"deep_block":      "version: 1\nsystems:\n" + deepBlock(200),
		"billion_laughs":  laughs,
		"merge_key":       "version: 1\nx: &x {name: a}\nsystems: [{<<: *x, base_url: \"https://a.example.com\"}]\n",
		"duplicate_keys":  "version: 1\nsystems: []\nsystems: []\n",
		"duplicate_tool":  "version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\"}]\ntools: [{name: t, description: T., system: a, class: READ, timeout: 1s, request: {path: /x}}, {name: t, description: T., system: a, class: READ, timeout: 1s, request: {path: /x}}]\n",
		"invalid_utf8":    "version: 1\nsystems: [{name: \"\xc3\x28\", base_url: \"https://a.example.com\"}]\n",
		"inline_secret":   "version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\", headers: [{name: X-Auth, value: \"sk_live_51HqLyjWDarjtT1zdp7dcXIg9lbTXYG2A4w1fPaNo\"}]}]\n",
		"inline_token":    "version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\", headers: [{name: X-Trace, value: \"ghp_16C7e42F292c6912E7710c838347Ae178B4a\"}]}]\n",
		"userinfo":        "version: 1\nsystems: [{name: a, base_url: \"https://ana:hunter2@a.example.com\"}]\n",
		"two_documents":   "version: 1\n---\nversion: 1\n",
		"tags":            "version: !!str 1\nsystems: !!map {}\n",
		"null":            "~\n",
		"empty":           "",
		"nul":             "version: 1\x00\n",
		"long_key":        "version: 1\n" + strings.Repeat("k", 100000) + ": 1\n",
		"many_tools_flow": "version: 1\ntools: [" + strings.Repeat("{},", 600) + "{}]\n",
		"secret_in_env":   "version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\", headers: [{name: Authorization, from_env: SECRET}]}]\ntools: [{name: 'x y', description: T., system: a, class: READ, timeout: 1s, request: {path: /x}}]\n",
	}
}

func deepBlock(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(strings.Repeat("  ", i+1) + "- \n")
	}
	return b.String()
}

// refused lists the seeds the loader must refuse.
var refused = []string{"huge", "deep_flow", "deep_block", "billion_laughs", "merge_key", "duplicate_keys", "duplicate_tool",
	"invalid_utf8", "inline_secret", "inline_token", "userinfo", "two_documents", "null", "empty", "nul", "long_key", "many_tools_flow", "secret_in_env"}

// because names what the refusal of some seeds must say.
var because = map[string]string{
	"huge":           "the limit is 1048576",
	"deep_flow":      "nests collections 100000 deep",
	"deep_block":     "nests collections",
	"billion_laughs": "uses YAML anchors, aliases or merge keys",
	"merge_key":      "uses YAML anchors, aliases or merge keys",
	"invalid_utf8":   "is not valid UTF-8",
	"inline_secret":  "carries a credential",
	"inline_token":   "looks like a secret",
	"userinfo":       "holds credentials",
	"secret_in_env":  "is not a name",
}

const fuzzSecret = "fuzz-secret-value-4242"

func fuzzParse(data []byte) (*catalog.Catalog, error) {
	return catalog.ParseWith(catalog.Options{
		Getenv:   func(k string) (string, bool) { return fuzzSecret, k == "SECRET" },
		ReadFile: func(string) ([]byte, error) { return []byte(fuzzSecret), nil },
	}, catalog.Source{Name: "fuzz.yaml", Data: data})
}

func TestNastySeedsAreRefusedQuickly(t *testing.T) {
	seeds := nasty()
	for _, name := range refused {
		start := time.Now()
		_, err := fuzzParse([]byte(seeds[name]))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if w := because[name]; !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v, want it to say %q", name, err, w)
		}
		var ce *catalog.Error
		if !errors.As(err, &ce) {
			t.Errorf("%s: %T %v, want a *catalog.Error", name, err, err)
		}
		if strings.Contains(err.Error(), fuzzSecret) || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "sk_live_") {
			t.Errorf("%s: the error shows a secret: %v", name, err)
		}
		if len(err.Error()) > 64<<10 {
			t.Errorf("%s: a %d-byte error", name, len(err.Error()))
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: took %s", name, d)
		}
	}
	for _, name := range []string{"example", "provider"} {
		if _, err := fuzzParse([]byte(seeds[name])); err == nil {
			// They need their environment; with the fuzz env their
			// base URLs are not set, so they are refused naming that.
			t.Errorf("%s: accepted without its environment", name)
		} else if !strings.Contains(err.Error(), "is not set") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzParse: whatever the bytes, the loader returns (never panics, never
// hangs), and an error never shows a secret it read.
func FuzzParse(f *testing.F) {
	for _, s := range nasty() {
		if len(s) < 64<<10 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := fuzzParse(data)
		if err != nil {
			if strings.Contains(err.Error(), fuzzSecret) {
				t.Fatalf("the error shows a secret: %v", err)
			}
			return
		}
		for _, tl := range c.Tools() {
			if tl.Spec().Name == "" {
				t.Fatal("a tool without a name")
			}
		}
	})
}

// A file with thousands of mistakes gets a bounded message.
func TestProblemsAreBounded(t *testing.T) {
	src := "version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\"}]\ntools:\n  - name: t\n    args:\n" + strings.Repeat("      - {name: n, type: text}\n", 400)
	_, err := fuzzParse([]byte(src))
	var ce *catalog.Error
	if !errors.As(err, &ce) || len(ce.Problems) != catalog.MaxProblems || ce.More == 0 {
		t.Fatalf("%d problems listed, %d more; want %d listed and the rest counted", len(ce.Problems), ce.More, catalog.MaxProblems)
	}
}

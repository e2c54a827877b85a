package catalog_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/catalog"
)

func parse(t *testing.T, yaml string, env map[string]string) error {
	t.Helper()
	_, err := catalog.ParseWith(catalog.Options{
		Getenv:   func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		ReadFile: func(p string) ([]byte, error) { return nil, os.ErrNotExist },
	}, catalog.Source{Name: "t.yaml", Data: []byte(yaml)})
	return err
}

// wantProblems checks err is a *catalog.Error naming every want (each a
// substring of one problem) and nothing else.
func wantProblems(t *testing.T, err error, want ...string) {
	t.Helper()
	var ce *catalog.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a *catalog.Error", err)
	}
	used := make([]bool, len(ce.Problems))
	for _, w := range want {
		found := false
		for i, p := range ce.Problems {
			if !used[i] && strings.Contains(p, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no problem names %q", w)
		}
	}
	for i, p := range ce.Problems {
		if !used[i] {
			t.Errorf("unexpected problem: %s", p)
		}
	}
}

// Every problem of a file is named at once, each with its YAML path.
func TestValidationNamesEveryProblem(t *testing.T) {
	err := parse(t, `version: 1
systems:
  - name: pay
    base_url: https://user:pw@pay.example.com
    headers:
      - {name: Authorization, value: "Bearer abc"}
      - {name: X-Key, from_env: MISSING}
  - {name: pay, base_url: https://x.example.com}
tools:
  - name: refund
    description: Refund.
    system: nowhere
    class: WRITE
    timeout: ten
    args:
      - {name: order_id, type: string, required: true}
      - {name: note, type: text}
      - {name: key, type: string}
    approval: {field: note, above_minor: 5}
    guard: {scope: g, fields: [order]}
    match:
      - {arg: amount, result: amount}
    compensator: undo
    request:
      method: POST
      path: /v1/orders/{order}/refunds
      query: {x: "{unclosed"}
    response: {external_id: id}
  - name: refund
    description: Twice.
    system: pay
    class: READ
    timeout: 1s
    request: {path: /x}
`, nil)
	wantProblems(t, err,
		"t.yaml: systems[0].base_url: holds credentials",
		"t.yaml: systems[0].headers[0].value: header Authorization carries a credential",
		"t.yaml: systems[0].headers[1].from_env: environment variable MISSING is not set",
		`t.yaml: systems[1].name: system "pay" is declared twice`,
		`t.yaml: tools[1].name: tool "refund" is declared twice`,
		`t.yaml: tools[0].class: "WRITE" is not a class`,
		`t.yaml: tools[0].timeout: "ten" is not a positive duration`,
		`t.yaml: tools[0].args[1].type: "text" is not a type`,
		`t.yaml: tools[0].args[2].name: "key" is reserved`,
		`t.yaml: tools[0].approval.field: "note" is not a declared integer or money argument`,
		`t.yaml: tools[0].guard.fields[0]: "order" is not a declared argument`,
		`t.yaml: tools[0].match[0].arg: "amount" is not a declared argument`,
		`t.yaml: tools[0].match[0].result: "amount" is not a kept result field`,
		`t.yaml: tools[0].system: "nowhere" is not a declared system`,
		`t.yaml: tools[0].compensator: "undo" is not a tool of the catalogue`,
		"t.yaml: tools[0].request.path: {order} is not a declared argument",
		"t.yaml: tools[0].request.query.x: has a '{' without its '}'",
		`t.yaml: tools[0].response.external_id: "id" is not a JSON pointer`,
	)
}

// Unknown keys are errors, every one, with its path.
func TestValidationUnknownKeys(t *testing.T) {
	err := parse(t, `version: 1
systems: [{name: a, base_url: "https://a.example.com", tls: {}}]
tools:
  - name: t
    descripton: typo
    system: a
    class: READ
    timeout: 1s
    request: {path: /x, verb: GET}
`, nil)
	wantProblems(t, err,
		"t.yaml: systems[0].tls: is not a known key",
		"t.yaml: tools[0].descripton: is not a known key",
		"t.yaml: tools[0].request.verb: is not a known key",
	)
}

// A secret written inline is refused wherever a header value is written.
func TestValidationInlineSecrets(t *testing.T) {
	err := parse(t, `version: 1
systems:
  - name: a
    base_url: https://a.example.com
    headers:
      - {name: X-Api-Key, value: plain}
      - {name: X-Thing, value: "sk_live_51HqLyjWDarjtT1zdp7dcXIg9lbTXYG2A4w1fPaNo"}
tools:
  - name: t
    description: T.
    system: a
    class: READ
    timeout: 1s
    request: {path: /x, headers: {Authorization: "Bearer abc"}}
`, nil)
	wantProblems(t, err,
		"systems[0].headers[0].value: header X-Api-Key carries a credential",
		"systems[0].headers[1].value: looks like a secret",
		"tools[0].request.headers.Authorization: carries a credential",
	)
}

// Secrets come from the environment or a file, and a loaded catalogue
// never shows them.
func TestSecretsFromEnvAndFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/key", []byte("from-file-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `version: 1
systems:
  - name: a
    base_url: https://a.example.com
    headers:
      - {name: Authorization, prefix: "Bearer ", from_env: A_TOKEN}
      - {name: X-Api-Key, from_file: ` + dir + `/key}
tools:
  - {name: t, description: T., system: a, class: READ, timeout: 1s, request: {path: /x}}
`
	os.Setenv("A_TOKEN", "from-env-secret")
	defer os.Unsetenv("A_TOKEN")
	c, err := catalog.Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tools()) != 1 {
		t.Fatalf("%d tools", len(c.Tools()))
	}
	for _, shown := range []string{fmt.Sprintf("%v %+v %#v", c, c, c), fmt.Sprintf("%v %+v %#v", c.Tools()[0], c.Tools()[0], c.Tools()[0])} {
		if strings.Contains(shown, "from-env-secret") || strings.Contains(shown, "from-file-secret") {
			t.Errorf("printing the catalogue shows a secret: %s", shown)
		}
	}
	os.Unsetenv("A_TOKEN")
	_, err = catalog.Parse("t.yaml", []byte(strings.Replace(src, dir+"/key", dir+"/nope", 1)))
	wantProblems(t, err, "systems[0].headers[0].from_env: environment variable A_TOKEN is not set", "systems[0].headers[1].from_file: cannot be read")
	if strings.Contains(err.Error(), "from-file-secret") {
		t.Errorf("the error shows a secret: %v", err)
	}
}

// The documented limits are enforced.
func TestLimits(t *testing.T) {
	big := "version: 1\n#" + strings.Repeat("x", catalog.MaxFileBytes) + "\n"
	wantProblems(t, parse(t, big, nil), "t.yaml: is 1048589 bytes, the limit is 1048576")

	var b strings.Builder
	b.WriteString("version: 1\nsystems: [{name: a, base_url: \"https://a.example.com\"}]\ntools:\n")
	for i := range catalog.MaxTools + 1 {
		b.WriteString("  - {name: t")
		b.WriteString(strings.Repeat("a", i%10) + string(rune('a'+i%26)) + strings.Repeat("b", i/26))
		b.WriteString(", description: T., system: a, class: READ, timeout: 1s, request: {path: /x}}\n")
	}
	wantProblems(t, parse(t, b.String(), nil), "tools: 501 tools declared, the limit is 500")

	long := "/" + strings.Repeat("p", catalog.MaxTemplateLen)
	wantProblems(t, parse(t, `version: 1
systems: [{name: a, base_url: "https://a.example.com"}]
tools: [{name: t, description: T., system: a, class: READ, timeout: 1s, request: {path: `+long+`}}]
`, nil), "tools[0].request.path: is 2049 bytes, the limit is 2048")

	wantProblems(t, parse(t, "version: 1\nx: "+strings.Repeat("[", 40)+strings.Repeat("]", 40)+"\n", nil), "nests collections 40 deep, the limit is 32")
	wantProblems(t, parse(t, "version: 1\nsystems: &s []\ntools: *s\n", nil), "uses YAML anchors, aliases or merge keys")
	wantProblems(t, parse(t, "version: 2\n", nil), "version: is 2")
	wantProblems(t, parse(t, "version: 1\nversion: 1\n", nil), "is not valid YAML")
	wantProblems(t, parse(t, "version: 1\n\xff\n", nil), "is not valid UTF-8")
}

// Several files are one catalogue: a reversal may live in another file,
// and a tool declared in two files is named with both places.
func TestSeveralFiles(t *testing.T) {
	a := `version: 1
systems: [{name: a, base_url: "https://a.example.com"}]
tools:
  - name: make
    description: Make.
    system: a
    class: IDEMPOTENT_WRITE
    timeout: 1s
    compensator: unmake
    request: {method: POST, path: /m, key: {header: Idempotency-Key}}
    response: {external_id: /id}
    lookup: {request: {path: /m, query: {k: "{key}"}}, absent: {status: [404], authoritative: true}}
`
	b := `version: 1
tools:
  - name: unmake
    description: Unmake.
    system: a
    class: IDEMPOTENT_WRITE
    timeout: 1s
    reverses: make
    request: {method: DELETE, path: "/m/{original.external_id}", key: {header: Idempotency-Key}}
    response: {external_id: /id}
    lookup: {request: {path: /u, query: {k: "{key}"}}, absent: {status: [404], authoritative: true}}
`
	c, err := catalog.ParseWith(catalog.Options{}, catalog.Source{Name: "a.yaml", Data: []byte(a)}, catalog.Source{Name: "b.yaml", Data: []byte(b)})
	if err != nil {
		t.Fatal(err)
	}
	if s := c.Specs()["unmake"]; !s.Reversal || c.Specs()["make"].Compensator != "unmake" {
		t.Errorf("specs %+v", c.Specs())
	}
	_, err = catalog.ParseWith(catalog.Options{}, catalog.Source{Name: "a.yaml", Data: []byte(a)}, catalog.Source{Name: "b.yaml", Data: []byte(a)})
	wantProblems(t, err, `b.yaml: systems[0].name: system "a" is declared twice`, `b.yaml: tools[0].name: tool "make" is declared twice (also at a.yaml: tools[0])`,
		`a.yaml: tools[0].compensator: "unmake" is not a tool of the catalogue`)
}

// A write must say where its key goes and how it is looked up.
func TestValidationWriteNeedsKeyAndLookup(t *testing.T) {
	err := parse(t, `version: 1
systems: [{name: a, base_url: "https://a.example.com"}]
tools:
  - {name: w, description: W., system: a, class: IDEMPOTENT_WRITE, timeout: 1s, request: {method: POST, path: /w}, response: {external_id: /id}}
  - name: r
    description: R.
    system: a
    class: CONDITIONAL_WRITE
    timeout: 1s
    reconcile_window: 30s
    request: {method: POST, path: /r, key: {body_field: ref}}
    response: {external_id: /id}
    lookup: {request: {path: /r}, lag: 1m}
`, nil)
	wantProblems(t, err,
		"tools[0].request.key: a write must send its operation key",
		"tools[0].lookup: a write needs a lookup by key, or no_lookup: true",
		"tools[1].request.key.body_field: the request has no body",
		"tools[1].lookup.request: a lookup must ask by key",
		"tools[1].lookup.absent: say how the provider answers an absent effect",
		"tools[1].reconcile_window: the reconcile window 30s is not longer than the in-flight horizon, settle 0s + lookup lag 1m0s",
	)
}

// Reversals and originals name each other, and a reversal is a write.
func TestValidationReversalPairs(t *testing.T) {
	err := parse(t, `version: 1
systems: [{name: a, base_url: "https://a.example.com"}]
tools:
  - {name: r, description: R., system: a, class: READ, timeout: 1s, compensator: u, request: {path: /r}}
  - name: u
    description: U.
    system: a
    class: READ
    timeout: 1s
    reverses: r
    args: [{name: x, type: string}]
    request: {path: "/u/{original.args.nope}/{original.foo}/{x}"}
  - {name: v, description: V., system: a, class: READ, timeout: 1s, request: {path: "/v/{original.key}"}}
`, nil)
	wantProblems(t, err,
		"tools[0].compensator: a READ tool has nothing to reverse",
		"tools[1].class: a reversal is a write",
		"tools[1].args: a reversal's arguments are fixed",
		"tools[1].request.path: {original.args.nope} is not an argument of the reversed tool",
		"tools[1].request.path: {original.foo} is not known",
		"tools[1].request.path: {x} is not a declared argument",
		"tools[2].request.path: {original.key} is only for reversal tools",
	)
}

// A relative from_file starts at the catalogue file's directory, whatever
// the worker's working directory is.
func TestRelativeSecretFileStartsAtTheCatalogue(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets", "key"), []byte("relative-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := `version: 1
systems:
  - name: a
    base_url: https://a.example.com
    headers:
      - {name: X-Api-Key, from_file: secrets/key}
tools:
  - {name: t, description: T., system: a, class: READ, timeout: 1s, request: {path: /x}}
`
	file := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // elsewhere: secrets/key does not exist here
	if _, err := catalog.Load(file); err != nil {
		t.Fatalf("a from_file relative to the catalogue: %v", err)
	}
	wantProblems(t, func() error { _, err := catalog.Parse("elsewhere/tools.yaml", []byte(src)); return err }(), "systems[0].headers[0].from_file: cannot be read")
}

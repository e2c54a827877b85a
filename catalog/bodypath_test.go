package catalog_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/tool"
)

const nestedBody = `version: 1
systems: [{name: api, base_url: "${API_URL}"}]
tools:
  - name: send
    description: Send.
    system: api
    class: NON_IDEMPOTENT_WRITE
    timeout: 5s
    no_lookup: true
    args:
      - {name: to, type: email, required: true}
      - {name: cc, type: email}
      - {name: n, type: integer}
    request:
      method: POST
      path: /send
      key: {body_field: ref}
      body:
        fields:
          /From/Email: me@example.com
          /To/0/Email: "{to}"
          /To/1/Email: "{cc}"
          /Headers/Message-ID: "<{key}@example.com>"
          /a~1b/c~0d: "{n}"
          Subject: hi
    response: {external_id: /ID}
`

// Body fields named by JSON pointer build nested objects and arrays; an
// array element left out is not sent; a single reference keeps its type.
func TestBodyFieldsByPointerNest(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		_, _ = w.Write([]byte(`{"ID":"m1"}`))
	}))
	defer srv.Close()
	c, err := catalog.ParseWith(catalog.Options{Getenv: func(string) (string, bool) { return srv.URL, true }},
		catalog.Source{Name: "nested.yaml", Data: []byte(nestedBody)})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := c.Registry()
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := reg.Tool("send")
	for _, args := range []string{`{"to":"a@example.com","cc":"b@example.com","n":7}`, `{"to":"a@example.com"}`} {
		if _, err := tl.Execute(context.Background(), tool.Call{Key: "s:1:1:send", Args: json.RawMessage(args)}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		`{"From":{"Email":"me@example.com"},"Headers":{"Message-ID":"\u003cs:1:1:send@example.com\u003e"},"Subject":"hi","To":[{"Email":"a@example.com"},{"Email":"b@example.com"}],"a/b":{"c~d":7},"ref":"s:1:1:send"}`,
		`{"From":{"Email":"me@example.com"},"Headers":{"Message-ID":"\u003cs:1:1:send@example.com\u003e"},"Subject":"hi","To":[{"Email":"a@example.com"}],"ref":"s:1:1:send"}`,
	}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Errorf("body %d:\n got %s\nwant %s", i, got, want[i])
		}
	}
}

const nestedFields = `
        fields:
          /From/Email: me@example.com
          /To/0/Email: "{to}"
          /To/1/Email: "{cc}"
          /Headers/Message-ID: "<{key}@example.com>"
          /a~1b/c~0d: "{n}"
          Subject: hi`

// The shapes a pointer body cannot have are refused at load, each named.
func TestBodyFieldsByPointerProblems(t *testing.T) {
	for _, tc := range []struct{ fields, format, want string }{
		{`{/To/1/Email: x}`, "", "skips an index"},
		{`{/To/0/Email: x, /To/x: y}`, "", "is an array in another field and an object here"},
		{`{/From: x, /From/Email: y}`, "", "is a value and holds other fields too"},
		{`{From: x, /From/Email: y}`, "", "is a value and holds other fields too"},
		{`{/a//b: x}`, "", "has an empty token"},
		{`{/a~2: x}`, "", "is not a JSON pointer"},
		{`{/ref/x: y}`, "", "is the key's body field"},
		{`{/a/b: x}`, "form", "a form body is flat"},
	} {
		block := "\n        fields: " + tc.fields
		if tc.format != "" {
			block = "\n        format: " + tc.format + block
		}
		src := strings.Replace(nestedBody, nestedFields, block, 1)
		_, err := catalog.ParseWith(catalog.Options{Getenv: func(string) (string, bool) { return "http://x", true }},
			catalog.Source{Name: "bad.yaml", Data: []byte(src)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("fields %s: %v; want a problem saying %q", tc.fields, err, tc.want)
		}
	}
}

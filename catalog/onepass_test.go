package catalog_test

import (
	"strings"
	"testing"
)

// A newcomer's catalogue with three problems (a misspelt key, a class that
// does not exist, a system nobody declared) is refused with all three named
// in one pass, one per line, and nothing that only follows from them: no
// "a READ tool has nothing to look up" for the unknown class, no "timeout
// is missing" for the misspelt timeout.
func TestLoaderNamesThreeProblemsInOnePass(t *testing.T) {
	err := parse(t, `version: 1
systems:
  - {name: shop, base_url: https://shop.example.com}
tools:
  - name: create_refund
    description: Refund an order.
    system: shpo
    class: NON_IDEMPOTENT
    timeuot: 10s
    args:
      - {name: order_id, type: string, required: true}
    request:
      method: POST
      path: /refunds
      key: {header: Idempotency-Key}
      body: {fields: {order_id: "{order_id}"}}
    response: {external_id: /id}
    lookup:
      request: {path: /refunds, query: {key: "{key}"}}
      absent: {status: [404], authoritative: true}
`, nil)
	wantProblems(t, err,
		`t.yaml: tools[0].timeuot: is not a known key: did you mean timeout?`,
		`t.yaml: tools[0].class: "NON_IDEMPOTENT" is not a class`,
		`t.yaml: tools[0].system: "shpo" is not a declared system`,
	)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 {
		t.Fatalf("want a heading and one line per problem, got:\n%s", err)
	}
	if !strings.Contains(lines[0], "(3)") {
		t.Errorf("the heading counts three problems: %q", lines[0])
	}
}

// An unknown key that is not a misspelling of a missing one hides nothing:
// the missing description is still named.
func TestUnknownKeyKeepsOtherProblems(t *testing.T) {
	err := parse(t, `version: 1
systems:
  - {name: shop, base_url: https://shop.example.com}
tools:
  - name: get_order
    system: shop
    class: READ
    timeout: 5s
    colour: blue
    request: {method: GET, path: /orders}
`, nil)
	wantProblems(t, err,
		`tools[0].colour: is not a known key: use one of`,
		`tools[0].description: is missing`,
	)
}

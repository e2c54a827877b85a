package agentsaga_test

import (
	"bytes"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goBlocks returns the ```go blocks of a Markdown text, with the line each
// starts on.
func goBlocks(md string) (blocks []string, lines []int) {
	var cur []string
	in := false
	for i, l := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, cur = true, nil
			lines = append(lines, i+1)
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, l)
		}
	}
	return blocks, lines
}

// regions returns the text between "// readme:begin" and "// readme:end"
// lines of a Go file, each without the indentation of its begin line.
func regions(src string) []string {
	var out []string
	var cur []string
	indent, in := "", false
	for _, l := range strings.Split(src, "\n") {
		t := strings.TrimSpace(l)
		switch {
		case t == "// readme:begin":
			in, cur = true, nil
			indent = l[:len(l)-len(strings.TrimLeft(l, "\t "))]
		case t == "// readme:end":
			in = false
			out = append(out, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, strings.TrimPrefix(l, indent))
		}
	}
	return out
}

// gofmt formats a fragment of Go (declarations or statements).
func gofmt(t *testing.T, what, src string) string {
	t.Helper()
	b, err := format.Source([]byte(src))
	require.NoError(t, err, "%s does not parse as Go:\n%s", what, src)
	return string(bytes.TrimSpace(b))
}

// docFiles are the documentation files whose commands and Go blocks the
// tests check: README.md, then docs/*.md in name order.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	sort.Strings(files)
	require.NotEmpty(t, files, "docs/*.md found nothing")
	return append([]string{"README.md"}, files...)
}

// TestREADMEGoBlocks: every ```go block of README.md and docs/*.md (in
// docFiles' order) is, gofmt aside, a region of readme_samples_test.go, in
// the same order, so the documentation's code compiles against the packages
// it names (with this package's tests, go vet and staticcheck).
func TestREADMEGoBlocks(t *testing.T) {
	src, err := os.ReadFile("readme_samples_test.go")
	require.NoError(t, err)
	type block struct {
		where, text string
	}
	var blocks []block
	for _, f := range docFiles(t) {
		md, err := os.ReadFile(f)
		require.NoError(t, err)
		bs, lines := goBlocks(string(md))
		for i, b := range bs {
			blocks = append(blocks, block{f + " line " + strconv.Itoa(lines[i]), b})
		}
	}
	require.NotEmpty(t, blocks, "the docs have no ```go block: remove this test and readme_samples_test.go, or fix the extraction")
	got := regions(string(src))
	for i, b := range blocks {
		require.Less(t, i, len(got), "%s: a ```go block that readme_samples_test.go does not hold: copy it there between // readme:begin and // readme:end, with what it uses around it", b.where)
		require.Equal(t, gofmt(t, b.where, b.text), gofmt(t, "region "+strconv.Itoa(i+1)+" of readme_samples_test.go", got[i]),
			"%s: the block differs from region %d of readme_samples_test.go: change both alike", b.where, i+1)
	}
	require.Len(t, got, len(blocks), "readme_samples_test.go holds a region that the docs no longer have: remove it")
}

// TestREADMEIsShort: the README is read in ten minutes.
func TestREADMEIsShort(t *testing.T) {
	fi, err := os.Stat("README.md")
	require.NoError(t, err)
	require.LessOrEqual(t, fi.Size(), int64(20<<10), "README.md is over 20 KB: move the detail to docs/ (by reader)")
}

// TestArchitecturePaths: every repository path ARCHITECTURE.md names in
// backquotes (plan/key.go, ledger/ledgertest, .ci/workflowcheck.yaml) exists,
// so the picture moves when the code does.
func TestArchitecturePaths(t *testing.T) {
	md, err := os.ReadFile("ARCHITECTURE.md")
	require.NoError(t, err)
	pathLike := regexp.MustCompile("`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+|[A-Za-z0-9_-]+\\.(?:go|md|yaml))`")
	seen := 0
	for _, m := range pathLike.FindAllStringSubmatch(string(md), -1) {
		p := strings.TrimSuffix(m[1], "/...")
		if p == "tools/call" { // the MCP method, not a path
			continue
		}
		seen++
		_, err := os.Stat(filepath.FromSlash(p))
		require.NoError(t, err, "ARCHITECTURE.md names %s, which is not in the repository: update ARCHITECTURE.md", p)
	}
	require.Greater(t, seen, 10, "the path pattern finds ARCHITECTURE.md's paths")
}

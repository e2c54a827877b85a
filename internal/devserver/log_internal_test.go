package devserver

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"go.temporal.io/server/common/log/tag"
)

// With keeps its tags until a record is logged; each derived logger has
// its own, and the parent's are untouched by a child's.
func TestServerLoggerWithAddsTagsWhenLogged(t *testing.T) {
	var buf bytes.Buffer
	base := newServerLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	parent := base.With(tag.NewStringTag("wf-id", "a")).(serverLogger)
	child1 := parent.With(tag.NewStringTag("run-id", "r1"))
	child2 := parent.With(tag.NewStringTag("run-id", "r2"))
	child1.Warn("one", tag.NewStringTag("x", "1"))
	child2.Warn("two")
	parent.Error("three")
	base.Info("dropped")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 records (warn, warn, error; info dropped), got %d:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"wf-id=a run-id=r1 x=1", "wf-id=a run-id=r2", "wf-id=a"} {
		if !strings.HasSuffix(lines[i], want) {
			t.Errorf("record %d = %q, want it to end with %q", i, lines[i], want)
		}
	}
	if strings.Contains(lines[2], "run-id") {
		t.Errorf("a child's tag reached the parent: %q", lines[2])
	}
}

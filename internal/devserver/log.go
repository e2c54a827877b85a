package devserver

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverLogger adapts a *slog.Logger to the server's log.Logger. It passes on
// warnings and errors only: below that the server logs several lines per
// second even when idle. Once stopping is set it passes on errors only, as
// every service warns about its peers going away during shutdown.
type serverLogger struct {
	l        *slog.Logger
	stopping *atomic.Bool
	// tags are those of With, turned into attributes only when a record
	// is logged: the server calls With on every request, and almost
	// nothing reaches warn level.
	tags []tag.Tag
}

var (
	_ log.Logger     = serverLogger{}
	_ log.WithLogger = serverLogger{}
)

func newServerLogger(l *slog.Logger) serverLogger {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return serverLogger{l: l.With("component", "temporal-server"), stopping: new(atomic.Bool)}
}

func attrs(with, tags []tag.Tag) []any {
	out := make([]any, 0, len(with)+len(tags))
	for _, t := range with {
		out = append(out, slog.Any(t.Key(), t.Value()))
	}
	for _, t := range tags {
		out = append(out, slog.Any(t.Key(), t.Value()))
	}
	return out
}

// Debug drops msg: see serverLogger.
func (serverLogger) Debug(string, ...tag.Tag) {}

// Info drops msg: see serverLogger.
func (serverLogger) Info(string, ...tag.Tag) {}

// Warn logs msg at warn level unless the server is stopping.
func (s serverLogger) Warn(msg string, tags ...tag.Tag) {
	if s.stopping.Load() {
		return
	}
	s.l.Log(context.Background(), slog.LevelWarn, msg, attrs(s.tags, tags)...)
}

// Error logs msg at error level.
func (s serverLogger) Error(msg string, tags ...tag.Tag) {
	s.l.Log(context.Background(), slog.LevelError, msg, attrs(s.tags, tags)...)
}

// DPanic logs msg at error level; it panics only in the server's development builds.
func (s serverLogger) DPanic(msg string, tags ...tag.Tag) { s.Error(msg, tags...) }

// Panic logs msg at error level, then panics, as the server expects.
func (s serverLogger) Panic(msg string, tags ...tag.Tag) {
	s.Error(msg, tags...)
	panic(msg)
}

// Fatal logs msg at error level, then panics with a *fatalError: the server
// expects Fatal not to return. Start recovers it while it builds and starts
// the server (a port taken at the last moment ends up there) and returns it
// as an error; in the server's own goroutines the panic ends the process, as
// an exit would, but says where and why even when the log is discarded.
func (s serverLogger) Fatal(msg string, tags ...tag.Tag) {
	s.Error(msg, tags...)
	panic(&fatalError{msg: msg, attrs: attrs(s.tags, tags)})
}

// fatalError is the panic value of serverLogger.Fatal.
type fatalError struct {
	msg   string
	attrs []any
}

func (f *fatalError) Error() string {
	var b strings.Builder
	b.WriteString("Temporal server: " + f.msg)
	for _, a := range f.attrs {
		if a, ok := a.(slog.Attr); ok {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
	}
	return b.String()
}

// portInUse reports whether the server gave up because a port was taken.
// The server's tags carry errors as text, so the text is what is matched.
func (f *fatalError) portInUse() bool {
	return strings.Contains(f.Error(), "address already in use") || // Linux, macOS
		strings.Contains(f.Error(), "Only one usage of each socket address") // Windows
}

// With returns a logger that adds tags to every record.
func (s serverLogger) With(tags ...tag.Tag) log.Logger {
	return serverLogger{l: s.l, stopping: s.stopping, tags: append(s.tags[:len(s.tags):len(s.tags)], tags...)}
}

package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
)

// handler masks what a record carries before the wrapped handler sees it.
type handler struct{ next slog.Handler }

// NewHandler returns a slog.Handler that masks every secret in a record
// before passing it to h: the message, every string attribute, the text of
// every error, Stringer and other value (replaced by its masked text only
// when masking changed it, so values without secrets keep their shape),
// integers that are card numbers, the values of attributes whose key names a
// secret (SensitiveKey: "password", "token", ...), inside groups and in
// attributes added with WithAttrs. Wrap every logger with it, the Temporal
// SDK's included. Bytes inside a struct are not decoded: log text, not
// encoded secrets.
func NewHandler(h slog.Handler) slog.Handler {
	if r, ok := h.(*handler); ok {
		return r
	}
	return &handler{next: h}
}

// Enabled implements slog.Handler.
func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, String(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(as))
	for i, a := range as {
		masked[i] = attr(a)
	}
	return &handler{next: h.next.WithAttrs(masked)}
}

// WithGroup implements slog.Handler.
func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(String(name))}
}

// attr returns a with its value masked.
func attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	key := String(a.Key)
	if SensitiveKey(a.Key) && !isEmpty(v) && v.Kind() != slog.KindGroup {
		return slog.String(key, Mask)
	}
	return slog.Attr{Key: key, Value: value(v)}
}

func isEmpty(v slog.Value) bool {
	switch v.Kind() {
	case slog.KindString:
		return v.String() == ""
	case slog.KindAny:
		return v.Any() == nil
	}
	return false
}

// value masks one resolved value.
func value(v slog.Value) slog.Value {
	switch v.Kind() {
	case slog.KindString:
		return slog.StringValue(String(v.String()))
	case slog.KindInt64:
		if s := strconv.FormatInt(v.Int64(), 10); LooksLikeCardNumber(s) {
			return slog.StringValue(cardMask(s))
		}
	case slog.KindUint64:
		if s := strconv.FormatUint(v.Uint64(), 10); LooksLikeCardNumber(s) {
			return slog.StringValue(cardMask(s))
		}
	case slog.KindGroup:
		as := v.Group()
		out := make([]slog.Attr, len(as))
		for i, a := range as {
			out[i] = attr(a)
		}
		return slog.GroupValue(out...)
	case slog.KindAny:
		return anyValue(v)
	}
	return v
}

// anyValue masks a value of kind Any: an error or a Stringer by its text,
// raw JSON by JSON, anything else by its printed form, replaced only when
// masking changes it.
func anyValue(v slog.Value) slog.Value {
	var text string
	switch x := v.Any().(type) {
	case nil:
		return v
	case Counter:
		return slog.Int64Value(int64(x))
	case Identifier:
		return slog.StringValue(StringKeeping(x.Text, x.Counters...))
	case error:
		text = x.Error()
	case json.RawMessage:
		return slog.StringValue(string(JSON(x)))
	case []byte:
		text = string(x)
	case fmt.Stringer:
		text = x.String()
	default:
		// A JSON handler prints x as JSON ([]byte fields in base64), a
		// text handler with %+v: check both forms.
		if b, err := json.Marshal(x); err == nil {
			if m, changed := maskJSON(b); changed {
				return slog.StringValue(string(m))
			}
		}
		text = fmt.Sprintf("%+v", x)
	}
	if m := String(text); m != text {
		return slog.StringValue(m)
	}
	return v
}

// maskJSON returns JSON(raw) and whether masking changed anything (beyond
// the re-encoding JSON does anyway).
func maskJSON(raw []byte) (json.RawMessage, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	plain := encode(v)
	m := JSON(plain)
	return m, !bytes.Equal(m, plain)
}

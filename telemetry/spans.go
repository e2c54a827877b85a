package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"

	"github.com/agentsaga/agentsaga/redact"
)

// maskedSpanStarter starts the spans of the Temporal SDK's tracing
// interceptor so that no error text reaches them: the interceptor records a
// failed workflow's or activity's error and sets its message as the span's
// status, and those messages name what a call was about (an order id, a
// key's arguments). A masked span records only the error's type, passed
// through the one redaction function.
func maskedSpanStarter(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) trace.Span {
	_, span := t.Start(ctx, name, opts...)
	return &maskedSpan{Span: span}
}

// maskedSpan is a span whose errors and error status carry an error type,
// never an error message.
type maskedSpan struct {
	trace.Span
	lastType string // the type of the last error recorded
}

// RecordError records err as an exception event holding its type only.
func (s *maskedSpan) RecordError(err error, _ ...trace.EventOption) {
	if err == nil {
		return
	}
	s.lastType = errorType(err)
	s.Span.AddEvent("exception", trace.WithAttributes(attribute.String("exception.type", s.lastType)))
}

// SetStatus sets the status with, for an error, the type of the last error
// recorded instead of description (which is the error's message).
func (s *maskedSpan) SetStatus(code codes.Code, _ string) {
	desc := ""
	if code == codes.Error {
		desc = s.lastType
		if desc == "" {
			desc = "error"
		}
	}
	s.Span.SetStatus(code, desc)
}

// errorType names what kind of failure err is, without its message: the
// Temporal application error's type, the kind of timeout, or the Go type.
func errorType(err error) string {
	var app *temporal.ApplicationError
	var timeout *temporal.TimeoutError
	var canceled *temporal.CanceledError
	var panicked *temporal.PanicError
	var terminated *temporal.TerminatedError
	var out string
	switch {
	case errors.As(err, &app):
		out = app.Type()
		if out == "" {
			out = "ApplicationError"
		}
	case errors.As(err, &timeout):
		out = "TimeoutError " + timeout.TimeoutType().String()
	case errors.As(err, &canceled):
		out = "CanceledError"
	case errors.As(err, &panicked):
		out = "PanicError"
	case errors.As(err, &terminated):
		out = "TerminatedError"
	default:
		out = fmt.Sprintf("%T", err)
	}
	return redact.String(out)
}

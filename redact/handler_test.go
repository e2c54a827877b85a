package redact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/redact"
)

type card struct {
	Number string
	Tags   []string
}

type stringer struct{}

func (stringer) String() string { return "stringer " + visa }

func TestHandlerMasksEveryPath(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(redact.NewHandler(slog.NewJSONHandler(&buf, nil)))
	provider := fmt.Errorf("charge: %w", errors.New("declined card 4111 1111 1111 1111 for Bearer abc.DEF-123456"))
	log.With("request_id", "req "+visa, "password", "hunter22").WithGroup("g").
		Error("Activity error. card "+visa,
			"Error", provider,
			"key", "sess:1:2:apply_refund",
			"n", int64(4111111111111111),
			"u", uint64(5500005555555559),
			"small", 12900,
			"s", stringer{},
			"raw", json.RawMessage(`{"token":"abc","note":"`+visa+`"}`),
			"struct", card{Number: "x", Tags: []string{"DE89370400440532013000"}},
			"clean", card{Number: "tok_visa"},
			slog.Group("inner", "iban", "DE89 3704 0044 0532 0130 00", "authorization", "Basic dXNlcjpwYXNz"),
		)
	out := buf.String()
	for _, secret := range []string{visa, "4111 1111 1111 1111", "5500005555555559", "abc.DEF-123456", "hunter22",
		"DE89", "dXNlcjpwYXNz"} {
		require.NotContains(t, out, secret)
	}
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), out)
	require.Equal(t, "Activity error. card [redacted card ending 1111]", rec["msg"])
	require.Equal(t, "[redacted]", rec["password"])
	g := rec["g"].(map[string]any)
	require.Equal(t, "charge: declined card [redacted card ending 1111] for Bearer [redacted]", g["Error"])
	require.Equal(t, "sess:1:2:apply_refund", g["key"])
	require.EqualValues(t, 12900, g["small"], "numbers without secrets keep their kind")
	require.Equal(t, map[string]any{"Number": "tok_visa", "Tags": nil}, g["clean"], "values without secrets keep their shape")
	require.Equal(t, "[redacted]", g["inner"].(map[string]any)["authorization"])
}

func TestHandlerLevelsAndIdempotentWrap(t *testing.T) {
	var buf bytes.Buffer
	inner := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})
	h := redact.NewHandler(inner)
	require.Same(t, h, redact.NewHandler(h), "wrapping twice masks once")
	require.False(t, h.Enabled(context.Background(), slog.LevelInfo))
	slog.New(h).Info("card " + visa)
	require.Empty(t, buf.String())
}

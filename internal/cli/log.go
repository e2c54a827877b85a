package cli

import (
	"github.com/agentsaga/agentsaga/redact"
	"log/slog"
	"os"

	"go.temporal.io/sdk/log"
)

// quietLogger keeps the SDK's client logs to warnings and errors on stderr.
func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(redact.NewHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
}

// envOr is the environment variable name, or def when it is empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

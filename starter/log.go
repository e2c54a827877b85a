package main

import (
	"log/slog"
	"os"

	"go.temporal.io/sdk/log"
)

// quietLogger keeps the SDK's client logs to warnings and errors on stderr.
func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// captureStderr runs f with os.Stderr and os.Stdout redirected and returns
// what it printed.
func captureOutput(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stderr, stdout := os.Stderr, os.Stdout
	os.Stderr, os.Stdout = w, w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	os.Stderr, os.Stdout = stderr, stdout
	require.NoError(t, w.Close())
	return <-done
}

// `worker --help` and flag errors never print a secret from the environment.
func TestHelpAndFlagErrorsPrintNoSecret(t *testing.T) {
	secrets := map[string]string{
		"TEMPORAL_API_KEY":        "tmprl-api-key-very-secret-0123456789",
		"AGENTSAGA_LEDGER":        "postgres://agentsaga:pg-pass-very-secret@db:5432/agentsaga",
		"AGENTSAGA_CODEC_KEYS":    "k1:QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU=",
		"AGENTSAGA_SANDBOX_TOKEN": "sandbox-token-very-secret",
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for _, args := range [][]string{{"--help"}, {"--no-such-flag"}, {"--port", "notanumber"}} {
		out := captureOutput(t, func() { _ = run(context.Background(), args) })
		require.NotEmpty(t, out, "%v printed its usage", args)
		for name, v := range secrets {
			require.NotContains(t, out, v, "%v printed %s", args, name)
			require.NotContains(t, out, "pg-pass-very-secret", "%v printed the DSN's password", args)
		}
		require.True(t, strings.Contains(out, "-ledger") || strings.Contains(out, "flag"), "%v: %s", args, out)
	}
}

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/version"
)

// `worker --version` prints the version and starts nothing.
func TestVersionFlag(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-test"
	t.Cleanup(func() { version.Version = old })
	var err error
	out := captureOutput(t, func() { err = run(context.Background(), []string{"--version"}) })
	require.NoError(t, err)
	require.Equal(t, version.Line()+"\n", out)
	require.Contains(t, out, "agentsaga v1.2.3-test (go")
}

package app_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/internal/version"
	"github.com/agentsaga/agentsaga/tool"
)

// The versioning flags are refused before anything is dialled when they
// cannot name one build: a build ID alone, a binary without a version and
// no --build-id, a deployment name Temporal refuses, --dev; each error
// names the flag.
func TestWorkerChecksTheVersioningFlags(t *testing.T) {
	t.Setenv("AGENTSAGA_DEPLOYMENT_NAME", "")
	t.Setenv("AGENTSAGA_BUILD_ID", "")
	for args, want := range map[string]string{
		"--build-id b1":                                                     "--build-id without --deployment-name",
		"--deployment-name payments":                                        "--build-id: this binary carries no version", // a test binary is "devel"
		"--deployment-name pay.ments --build-id b1":                         "holds a '.' or ':'",
		"--deployment-name __pay --build-id b1":                             `starts with "__"`,
		"--deployment-name payments --build-id __b":                         `starts with "__"`,
		"--dev --deployment-name payments --build-id b":                     "worker --dev runs one build",
		"--deployment-name payments --build-id " + strings.Repeat("b", 201): "at most 200 are allowed",
	} {
		var ue app.UsageError
		err := app.Worker(context.Background(), strings.Fields(args), app.Options{Tools: []tool.Tool{ping{}}})
		require.ErrorAs(t, err, &ue, args)
		require.ErrorContains(t, err, want, args)
	}
	// A version of a tree with uncommitted changes is no build ID.
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "devel-0123456789ab+dirty"
	err := app.Worker(context.Background(), []string{"--deployment-name", "payments"}, app.Options{Tools: []tool.Tool{ping{}}})
	require.ErrorContains(t, err, "uncommitted changes")
	require.ErrorContains(t, err, "give --build-id")

	t.Setenv("AGENTSAGA_BUILD_ID", "b1")
	err = app.Worker(context.Background(), nil, app.Options{Tools: []tool.Tool{ping{}}})
	require.ErrorContains(t, err, "--build-id without --deployment-name", "the environment counts as the flags")
}

// `worker replay` refuses a version that is not DEPLOYMENT:BUILD and a
// --max out of its range, naming the flag.
func TestReplayChecksItsFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--version payments":     "is not DEPLOYMENT:BUILD",
		"--version pay.ments:b1": "is not DEPLOYMENT:BUILD",
		"--version payments:b'1": "is not DEPLOYMENT:BUILD",
		"--max 0":                "--max 0: give 1 to 10000",
		"--max 10001":            "--max 10001: give 1 to 10000",
		"extra":                  "takes no arguments",
		"--task-queue q'":        "--task-queue",
	} {
		var ue app.UsageError
		err := app.Replay(context.Background(), strings.Fields(args), io.Discard)
		require.ErrorAs(t, err, &ue, args)
		require.ErrorContains(t, err, want, args)
	}
}

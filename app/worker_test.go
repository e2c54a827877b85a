package app_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/tool"
)

// ping is a team's own Go tool, as a main passes it in Options.Tools.
type ping struct{}

func (ping) Spec() tool.Spec {
	return tool.Spec{Name: "ping", Class: tool.Read, Timeout: time.Second, Description: "answers pong"}
}

func (ping) Execute(context.Context, tool.Call) (tool.Result, error) {
	return tool.Result{ExternalID: "pong"}, nil
}

// A team's worker without the dev stack refuses --dev and says why; without
// any tool it says what to give; a Go tool that breaks the registry's rules
// stops it before it connects, naming the problem.
func TestWorkerForATeamsTools(t *testing.T) {
	t.Setenv("AGENTSAGA_TOOLS", "")
	t.Setenv("AGENTSAGA_SANDBOX_URL", "")
	var ue app.UsageError
	err := app.Worker(context.Background(), []string{"--dev"}, app.Options{Tools: []tool.Tool{ping{}}})
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "built without the embedded dev stack")

	err = app.Worker(context.Background(), []string{"--address", "127.0.0.1:1", "--allow-unverified-decisions"}, app.Options{})
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "no tools: give --tools FILE")

	err = app.Worker(context.Background(), []string{"--address", "127.0.0.1:1", "--data-dir", t.TempDir(), "--allow-unverified-decisions"}, app.Options{Tools: []tool.Tool{ping{}, ping{}}})
	require.Error(t, err)
	require.True(t, errors.As(err, &ue), "a registry problem is a usage error: %v", err)
	require.ErrorContains(t, err, "ping")
}

// Outside --dev a worker without an operators file refuses to start, naming
// the flag that accepts unverified decisions, before it connects.
func TestWorkerRefusesUnverifiedDecisionsUnlessAsked(t *testing.T) {
	t.Setenv("AGENTSAGA_OPERATORS", "")
	t.Setenv("AGENTSAGA_ALLOW_UNVERIFIED_DECISIONS", "")
	var ue app.UsageError
	err := app.Worker(context.Background(), []string{"--address", "127.0.0.1:1"}, app.Options{Tools: []tool.Tool{ping{}}})
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "--allow-unverified-decisions")
	require.ErrorContains(t, err, "--operators FILE")
	// With the flag it goes on, as far as the (unreachable) server.
	err = app.Worker(context.Background(), []string{"--address", "127.0.0.1:1", "--data-dir", t.TempDir(), "--allow-unverified-decisions"}, app.Options{Tools: []tool.Tool{ping{}}})
	require.Error(t, err)
	require.False(t, errors.As(err, &ue), "with the flag the worker must get past its checks: %v", err)
}

// The notification flags are checked before anything is dialled: a URL
// needs a signing secret of 16 bytes or more, and carries no credentials.
func TestWorkerChecksTheNotificationFlags(t *testing.T) {
	t.Setenv("AGENTSAGA_NOTIFY_URL", "")
	t.Setenv("AGENTSAGA_NOTIFY_SECRET_FILE", "")
	dir := t.TempDir()
	short := dir + "/short"
	require.NoError(t, os.WriteFile(short, []byte("tiny\n"), 0o600))
	base := []string{"--address", "127.0.0.1:1", "--allow-unverified-decisions"}
	for args, want := range map[string][]string{
		"no secret":   {"--notify-url", "https://hooks.example/x"},
		"short":       {"--notify-url", "https://hooks.example/x", "--notify-secret-file", short},
		"credentials": {"--notify-url", "https://u:p@hooks.example/x", "--notify-secret-file", short},
		"scheme":      {"--notify-url", "ftp://hooks.example/x", "--notify-secret-file", short},
		"secret only": {"--notify-secret-file", short},
	} {
		var ue app.UsageError
		err := app.Worker(context.Background(), append(append([]string{}, base...), want...), app.Options{Tools: []tool.Tool{ping{}}})
		require.ErrorAs(t, err, &ue, args)
		require.ErrorContains(t, err, "--notify-", args)
	}
	t.Setenv("AGENTSAGA_NOTIFY_AFTER", "soon")
	err := app.Worker(context.Background(), base, app.Options{Tools: []tool.Tool{ping{}}})
	require.ErrorContains(t, err, "AGENTSAGA_NOTIFY_AFTER")
}

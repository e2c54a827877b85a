package app_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/app"
	"github.com/agentsaga/agentsaga/tool"
)

// worker --dev hands the dev stack the tools of --tools and Options.Tools,
// loaded and checked first, and --notify-url's webhook; a missing catalogue
// stops it with a usage error before the stack starts, and without tools
// the stack gets none (it runs the demo tools).
func TestDevGetsTheToolsAndTheWebhook(t *testing.T) {
	t.Setenv("AGENTSAGA_TOOLS", "")
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(secret, []byte("0123456789abcdef0123"), 0o600))
	var got *app.Dev
	o := app.Options{Tools: []tool.Tool{ping{}}, Dev: func(_ context.Context, d app.Dev) error { got = &d; return nil }}

	require.NoError(t, app.Worker(context.Background(), []string{"--dev", "--data-dir", dir,
		"--notify-url", "https://hooks.example/x", "--notify-secret-file", secret}, o))
	require.NotNil(t, got)
	require.NotNil(t, got.Tools, "the Go tools reach the dev stack")
	require.Equal(t, []string{"ping"}, got.Tools.Names())
	require.NotNil(t, got.Webhook, "--notify-url works with --dev")
	require.Equal(t, "https://hooks.example/x", got.Webhook.URL)

	got = nil
	var ue app.UsageError
	err := app.Worker(context.Background(), []string{"--dev", "--data-dir", dir, "--tools", filepath.Join(dir, "nope.yaml")}, o)
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, "nope.yaml")
	require.Nil(t, got, "nothing started")

	require.NoError(t, app.Worker(context.Background(), []string{"--dev", "--data-dir", dir}, app.Options{Dev: o.Dev}))
	require.Nil(t, got.Tools, "no tools: the stack runs the demo tools")
}

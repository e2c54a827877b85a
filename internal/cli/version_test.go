package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/version"
)

// `starter version` prints the version a release build set (-ldflags -X),
// and JSON with --json.
func TestVersion(t *testing.T) {
	old := version.Version
	version.Version = "v1.2.3-test"
	t.Cleanup(func() { version.Version = old })

	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"version"}, strings.NewReader(""), &out))
	require.Equal(t, "agentsaga v1.2.3-test ("+runtime.Version()+")\n", out.String())

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"version", "--json"}, strings.NewReader(""), &out))
	var got map[string]string
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Equal(t, "v1.2.3-test", got["version"])

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"help"}, strings.NewReader(""), &out))
	require.Contains(t, out.String(), "\n  version ", "the usage lists the command")

	err := run(context.Background(), []string{"version", "extra"}, strings.NewReader(""), &out)
	require.Equal(t, 2, report(&bytes.Buffer{}, err, false))
}

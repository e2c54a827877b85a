package privfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/internal/privfile"
)

func TestEnsureCreatesAndNarrows(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	fresh := filepath.Join(dir, "fresh.db")
	require.NoError(t, privfile.Ensure(fresh))
	st, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	wide := filepath.Join(dir, "wide.db")
	require.NoError(t, os.WriteFile(wide, []byte("data"), 0o644))
	require.NoError(t, os.Chmod(wide, 0o664))
	require.NoError(t, privfile.Ensure(wide))
	st, err = os.Stat(wide)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(wide)
	require.NoError(t, err)
	require.Equal(t, "data", string(b), "contents are kept")
}

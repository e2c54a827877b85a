package gobuild

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Cached links a command once per module version into the cache and hands
// the same file back afterwards; another version links anew.
func TestCachedBuildsOncePerVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	m := Module{Path: "example.com/hello", Version: "v1.0.0"}

	bin, built, err := Cached(ctx, ".", m, "hello", "./testdata/hello")
	require.NoError(t, err)
	require.True(t, built, "the first call builds")
	require.True(t, strings.HasPrefix(bin, cache+string(filepath.Separator)), bin)
	require.Contains(t, filepath.Base(filepath.Dir(bin)), "example.com_hello_v1.0.0-go")
	out, err := exec.Command(bin).Output()
	require.NoError(t, err)
	require.Equal(t, "hello from gobuild's test\n", string(out))
	st, err := os.Stat(bin)
	require.NoError(t, err)

	again, built, err := Cached(ctx, ".", m, "hello", "./testdata/hello")
	require.NoError(t, err)
	require.False(t, built, "the second call takes the cached binary")
	require.Equal(t, bin, again)
	st2, err := os.Stat(again)
	require.NoError(t, err)
	require.Equal(t, st.ModTime(), st2.ModTime(), "not relinked")

	m.Version = "v1.0.1"
	other, built, err := Cached(ctx, ".", m, "hello", "./testdata/hello")
	require.NoError(t, err)
	require.True(t, built, "another version builds")
	require.NotEqual(t, bin, other)
	left, err := filepath.Glob(filepath.Join(cache, "*", "*.building-*"))
	require.NoError(t, err)
	require.Empty(t, left, "no temporary file is left behind")
}

// Lookup reports the pinned version and the module cache directory.
func TestLookupReportsThePin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := Lookup(ctx, ".", "github.com/google/uuid")
	require.NoError(t, err)
	require.Equal(t, "github.com/google/uuid", m.Path)
	require.True(t, strings.HasPrefix(m.Version, "v"), m.Version)
	require.DirExists(t, m.Dir)
	_, err = Lookup(ctx, ".", "example.com/not-a-dependency")
	require.Error(t, err)
}

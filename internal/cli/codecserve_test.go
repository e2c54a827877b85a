package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/codec"
)

func TestCodecServeNeedsKeysAndAToken(t *testing.T) {
	t.Setenv(codec.EnvKeysFile, "")
	t.Setenv(codec.EnvKeys, "")
	t.Setenv(codec.EnvToken, "")
	err := run(context.Background(), []string{"codec", "serve"}, strings.NewReader(""), &bytes.Buffer{})
	require.Equal(t, 2, report(&bytes.Buffer{}, err, false))
	require.ErrorContains(t, err, "no keyring")

	t.Setenv(codec.EnvKeys, "k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	err = run(context.Background(), []string{"codec", "serve"}, strings.NewReader(""), &bytes.Buffer{})
	require.Equal(t, 2, report(&bytes.Buffer{}, err, false))
	require.ErrorContains(t, err, codec.EnvToken, "the token is named, never taken from a flag")

	t.Setenv(codec.EnvToken, "short")
	err = run(context.Background(), []string{"codec", "serve"}, strings.NewReader(""), &bytes.Buffer{})
	require.ErrorContains(t, err, "at least")
}

// keygen makes a keyring the worker reads, never over an existing file;
// --rotate keeps the old keys and makes the new one current; token makes a
// token file serve reads with --token-file.
func TestCodecKeygenRotateAndToken(t *testing.T) {
	dir := t.TempDir()
	first := filepath.Join(dir, "keys.json")
	require.NoError(t, run(context.Background(), []string{"codec", "keygen", "--out", first, "--id", "k1"}, nil, &bytes.Buffer{}))
	ring, err := codec.KeyringFile(first)
	require.NoError(t, err)
	require.Equal(t, "k1", ring.Current())
	st, err := os.Stat(first)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	err = run(context.Background(), []string{"codec", "keygen", "--out", first, "--id", "k9"}, nil, &bytes.Buffer{})
	require.ErrorContains(t, err, "never overwritten")

	second := filepath.Join(dir, "keys2.json")
	require.NoError(t, run(context.Background(), []string{"codec", "keygen", "--out", second, "--id", "k2", "--rotate", first}, nil, &bytes.Buffer{}))
	rotated, err := codec.KeyringFile(second)
	require.NoError(t, err)
	require.Equal(t, "k2", rotated.Current())
	require.Equal(t, []string{"k1", "k2"}, rotated.IDs())
	err = run(context.Background(), []string{"codec", "keygen", "--out", filepath.Join(dir, "k3.json"), "--id", "k1", "--rotate", first}, nil, &bytes.Buffer{})
	require.Equal(t, 2, code(err), "a reused key id: %v", err)

	tok := filepath.Join(dir, "codec.token")
	require.NoError(t, run(context.Background(), []string{"codec", "token", "--out", tok}, nil, &bytes.Buffer{}))
	b, err := os.ReadFile(tok)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(strings.TrimSpace(string(b))), 43)

	// serve reads the token from the file (and refuses a short one there
	// as from the environment).
	t.Setenv(codec.EnvToken, "")
	short := filepath.Join(dir, "short.token")
	require.NoError(t, os.WriteFile(short, []byte("short\n"), 0o600))
	err = run(context.Background(), []string{"codec", "serve", "--codec-keys", first, "--token-file", short}, nil, &bytes.Buffer{})
	require.ErrorContains(t, err, "at least")
}

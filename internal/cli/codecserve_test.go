package cli

import (
	"bytes"
	"context"
	"encoding/base64"
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

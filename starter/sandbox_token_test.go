package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/sandbox"
)

// `starter sandbox` sends the admin token: env AGENTSAGA_SANDBOX_TOKEN, else
// the file worker --dev keeps in the data directory.
func TestSandboxCommandsSendTheToken(t *testing.T) {
	var got string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get(sandbox.TokenHeader)
		_, _ = w.Write([]byte("[]"))
	}))
	defer hs.Close()
	dir := t.TempDir()
	t.Setenv(config.EnvDataDir, dir)
	t.Setenv(config.EnvSandboxToken, "")
	if err := sandbox.WriteTokenFile(filepath.Join(dir, sandbox.TokenFileName), "token-from-the-data-dir-000001"); err != nil {
		t.Fatal(err)
	}
	effects := func() {
		t.Helper()
		if err := run(context.Background(), []string{"sandbox", "effects", "--sandbox-url", hs.URL}, nil, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	effects()
	if got != "token-from-the-data-dir-000001" {
		t.Errorf("sent token %q, want the data directory's", got)
	}
	// --data-dir finds the token that `sandbox serve --data-dir` wrote.
	other := t.TempDir()
	if err := sandbox.WriteTokenFile(filepath.Join(other, sandbox.TokenFileName), "token-from-the-flag-dir-000001"); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"sandbox", "effects", "--sandbox-url", hs.URL, "--data-dir", other}, nil, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got != "token-from-the-flag-dir-000001" {
		t.Errorf("sent token %q, want --data-dir's", got)
	}
	t.Setenv(config.EnvSandboxToken, "token-from-the-env-00000000001")
	effects()
	if got != "token-from-the-env-00000000001" {
		t.Errorf("sent token %q, want the env's", got)
	}
}

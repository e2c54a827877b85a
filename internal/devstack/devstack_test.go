package devstack_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/internal/devstack"
)

// TestStartFailureIsAnError checks that a stack that cannot start returns an
// error saying why (here: the Temporal port is taken) and cleans up after
// itself, instead of panicking while it cleans up.
func TestStartFailureIsAnError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where Start makes its temporary data directory
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{Port: port, UIPort: -1, NoWorker: true})
	if err == nil {
		st.Close()
		t.Fatalf("Start with Temporal's port %d taken succeeded; want an error", port)
	}
	if st != nil {
		t.Errorf("Start failed (%v) but returned a stack", err)
	}
	if !strings.Contains(err.Error(), "not free") {
		t.Errorf("Start: %v; want an error saying the port is not free", err)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		t.Errorf("the failed Start left %s behind in the temporary directory", e.Name())
	}
}

// TestCloseNil checks that closing a stack that never started is harmless.
func TestCloseNil(t *testing.T) {
	var st *devstack.Stack
	if err := st.Close(); err != nil {
		t.Errorf("Close of a nil stack: %v", err)
	}
}

// TestCodecOnByDefault starts a stack with a data directory twice: the
// keyring and both tokens are made once (mode 0600) and kept, the client
// encrypts, the codec endpoint decodes for the token only, and the Web UI is
// pointed at it with the UI's origin allowed.
func TestCodecOnByDefault(t *testing.T) {
	t.Setenv(codec.EnvKeys, "")
	t.Setenv(codec.EnvKeysFile, "")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := devstack.Start(ctx, devstack.Options{DataDir: dir, NoWorker: true})
	if err != nil {
		t.Fatal(err)
	}
	first := *st
	for _, f := range []string{devstack.KeysFile, devstack.CodecTokenFile, devstack.SandboxTokenFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if st.Sandbox.Token() != st.SandboxToken || st.SandboxToken == "" {
		t.Errorf("the sandbox does not use the stack's token")
	}

	p, err := st.DataConverter.ToPayload("ord_DEVSTACK_1")
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Metadata[converter.MetadataEncoding]) != codec.EncodingEncrypted {
		t.Errorf("the stack's data converter does not encrypt: %v", p.Metadata)
	}
	body, _ := json.Marshal(commonpb.Payloads{Payloads: []*commonpb.Payload{p}})
	decodeAs := func(host, token string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, st.CodecURL+"/decode", bytes.NewReader(body))
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	decode := func(token string) (int, string) { return decodeAs("", token) }
	// DNS rebinding: the token does not help a request naming a foreign Host.
	if code, out := decodeAs("rebound.evil.example", st.CodecToken); code != http.StatusForbidden {
		t.Errorf("decode with a foreign Host: %d %s, want 403", code, out)
	}
	if code, out := decode(""); code != http.StatusUnauthorized {
		t.Errorf("decode without token: %d %s", code, out)
	}
	if code, out := decode(st.CodecToken); code != http.StatusOK || !strings.Contains(out, base64.StdEncoding.EncodeToString([]byte(`"ord_DEVSTACK_1"`))) {
		t.Errorf("decode with token: %d %s", code, out)
	}

	resp, err := http.Get(st.Server.UIURL() + "/api/v1/settings")
	if err != nil {
		t.Fatal(err)
	}
	var settings struct{ Codec struct{ Endpoint string } }
	err = json.NewDecoder(resp.Body).Decode(&settings)
	resp.Body.Close()
	if err != nil || settings.Codec.Endpoint != st.CodecURL {
		t.Errorf("UI codec endpoint %q (%v), want %s", settings.Codec.Endpoint, err, st.CodecURL)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodOptions, st.CodecURL+"/decode", nil)
	req.Header.Set("Origin", st.Server.UIURL())
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != st.Server.UIURL() {
		t.Errorf("preflight from the UI's origin: %d %v", resp.StatusCode, resp.Header)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	again, err := devstack.Start(ctx, devstack.Options{DataDir: dir, NoWorker: true, UIPort: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.CodecToken != first.CodecToken || again.SandboxToken != first.SandboxToken || again.Keyring.Current() != first.Keyring.Current() {
		t.Error("a restart changed the keys or tokens")
	}
	var s string
	if err := again.DataConverter.FromPayload(p, &s); err != nil || s != "ord_DEVSTACK_1" {
		t.Errorf("after a restart the stack cannot read what it wrote: %q %v", s, err)
	}
}

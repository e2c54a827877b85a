package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/codec"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cluster certs writes the compose set once and keeps it on a rerun; the
// codec server serves HTTPS with its certificate, which a client trusting
// ca.pem verifies for localhost.
func TestClusterCertsAndCodecHTTPS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"cluster", "certs", "--out", dir}, nil, &out))
	require.Contains(t, out.String(), "created")
	for _, n := range []string{"ca", "temporal", "worker", "starter", "ui", "codec"} {
		require.FileExists(t, filepath.Join(dir, n+".pem"))
		require.FileExists(t, filepath.Join(dir, n+".key"))
	}
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"cluster", "certs", "--out", dir, "--json"}, nil, &out))
	require.NotContains(t, out.String(), "created", "a rerun keeps what exists")
	err := run(context.Background(), []string{"cluster", "certs", "--out", dir, "--validity", "1h"}, nil, &bytes.Buffer{})
	require.Equal(t, 2, report(&bytes.Buffer{}, err, false))
	require.ErrorContains(t, err, "validity")

	t.Setenv(codec.EnvKeysFile, "")
	t.Setenv(codec.EnvKeys, "k1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)))
	t.Setenv(codec.EnvToken, "codec-token-0123456789abcdef0123")
	err = run(context.Background(), []string{"codec", "serve", "--tls-cert", filepath.Join(dir, "codec.pem")}, nil, &bytes.Buffer{})
	require.ErrorContains(t, err, "--tls-key")

	ctx, cancel := context.WithCancel(context.Background())
	var buf syncBuf
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"codec", "serve", "--addr", "127.0.0.1:0", "--tls-cert", filepath.Join(dir, "codec.pem"), "--tls-key", filepath.Join(dir, "codec.key")}, nil, &buf)
	}()
	t.Cleanup(func() { cancel(); <-done })
	addrRe := regexp.MustCompile(`codec server on https://(\S+)`)
	var addr string
	deadline := time.Now().Add(10 * time.Second)
	for addr == "" && time.Now().Before(deadline) {
		if m := addrRe.FindStringSubmatch(buf.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("codec serve ended: %v (%s)", err, buf.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	require.NotEmpty(t, addr, "codec serve did not print its https address: %s", buf.String())
	pem, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pem))
	port := addr[strings.LastIndex(addr, ":"):]
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Get("https://localhost" + port + "/login")
	require.NoError(t, err, "a client trusting ca.pem must verify the codec server as localhost")
	_ = resp.Body.Close()
	resp, err = (&http.Client{Timeout: 5 * time.Second}).Get("https://localhost" + port + "/login")
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "a client that does not trust the CA must refuse the certificate")
}

// ledger migrate refuses a SQLite DSN (the worker migrates those), and on
// PostgreSQL migrates a fresh schema as its owner and grants a runtime role.
func TestLedgerMigrate(t *testing.T) {
	t.Setenv("AGENTSAGA_LEDGER", "")
	t.Setenv("AGENTSAGA_LEDGER_FILE", "")
	err := run(context.Background(), []string{"ledger", "migrate", "--ledger", "sqlite:" + filepath.Join(t.TempDir(), "l.db")}, nil, &bytes.Buffer{})
	require.Equal(t, 2, report(&bytes.Buffer{}, err, false))
	require.ErrorContains(t, err, "postgres://")

	base := "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	db, err := sql.Open("pgx", base)
	require.NoError(t, err)
	defer db.Close()
	if err := db.Ping(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at %s: %v; CI=true requires it", base, err)
		}
		t.Skipf("PostgreSQL unavailable at %s: %v", base, err)
	}
	sfx := strconv.FormatInt(time.Now().UnixNano(), 36)
	schema, role := "climigrate_"+sfx, "cliapp_"+sfx
	for _, q := range []string{`CREATE SCHEMA ` + schema, `CREATE ROLE ` + role} {
		_, err := db.Exec(q)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		_, _ = db.Exec(`DROP ROLE ` + role)
	})
	var out bytes.Buffer
	dsn := base + "&search_path=" + schema
	require.NoError(t, run(context.Background(), []string{"ledger", "migrate", "--ledger", dsn, "--grant-runtime", role}, nil, &out))
	require.Contains(t, out.String(), "schema version 0 -> ")
	var may bool
	require.NoError(t, db.QueryRow(`SELECT has_table_privilege($1, $2, 'UPDATE')`, role, schema+".decisions").Scan(&may))
	require.False(t, may, "the runtime role may update the audit trail")
	require.NoError(t, db.QueryRow(`SELECT has_table_privilege($1, $2, 'INSERT')`, role, schema+".decisions").Scan(&may))
	require.True(t, may, "the runtime role may not append to the audit trail")
}

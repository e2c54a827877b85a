package config_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.temporal.io/sdk/converter"

	"github.com/agentsaga/agentsaga/catalog"
	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/config"
)

// secretEnv puts a distinctive secret in every secret variable and returns
// the values that must never be printed.
func secretEnv(t *testing.T) []string {
	t.Helper()
	keyB64 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, codec.KeySize))
	vals := map[string]string{
		config.EnvAPIKey:       "tmprl-apikey-SECRET-0001",
		config.EnvLedger:       "postgres://agentsaga:pw-SECRET-0002@db:5432/agentsaga",
		config.EnvCodecKeys:    "k1:" + keyB64,
		config.EnvSandboxToken: "sandbox-token-SECRET-0003",
	}
	var out []string
	for _, name := range config.SecretEnvNames() {
		v, ok := vals[name]
		if !ok {
			t.Fatalf("no test value for secret variable %s", name)
		}
		t.Setenv(name, v)
		out = append(out, v)
	}
	return append(out, "pw-SECRET-0002", keyB64[:20])
}

// workerFlags registers the flags a worker shares through config, as
// worker/main.go does.
func workerFlags(out *bytes.Buffer) *flag.FlagSet {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(out)
	var t config.Temporal
	t.Register(fs)
	var ledger string
	config.RegisterLedger(fs, &ledger, "default sqlite under --data-dir")
	return fs
}

// --help, a flag typo and the usage print no secret from the environment.
func TestHelpAndFlagErrorsPrintNoSecret(t *testing.T) {
	secrets := secretEnv(t)
	var out bytes.Buffer
	if err := workerFlags(&out).Parse([]string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if err := workerFlags(&out).Parse([]string{"--adress", "x"}); err == nil {
		t.Fatal("a flag typo parsed")
	}
	if err := workerFlags(&out).Parse([]string{"--tls=maybe"}); err == nil {
		t.Fatal("--tls=maybe parsed")
	}
	fs := workerFlags(&out)
	fs.Usage()
	fs.PrintDefaults()
	text := out.String()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("the usage output shows the secret %q:\n%s", s, text)
		}
	}
	for _, name := range []string{config.EnvAPIKey, config.EnvLedger, config.EnvCodecKeysFile, config.EnvCodecKeys, "-api-key", "-ledger", "-codec-keys"} {
		if !strings.Contains(text, name) {
			t.Errorf("the usage does not mention %s", name)
		}
	}
}

// A secret from the environment is still used, and reported as set only.
func TestSecretsReadAtUse(t *testing.T) {
	secrets := secretEnv(t)
	fs := workerFlags(&bytes.Buffer{})
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	var tc config.Temporal
	tc.Register(flag.NewFlagSet("x", flag.ContinueOnError))
	if got := tc.APIKeyValue(); got != secrets[0] {
		t.Errorf("APIKeyValue = %q, want the env value", got)
	}
	if got := tc.APIKeyState(); got != "set (env "+config.EnvAPIKey+")" {
		t.Errorf("APIKeyState = %q", got)
	}
	tc.APIKey = "from-flag"
	if got := tc.APIKeyValue(); got != "from-flag" {
		t.Errorf("APIKeyValue with the flag = %q", got)
	}
	if got, _ := config.LedgerDSN(""); got != secrets[1] {
		t.Errorf("LedgerDSN = %q, want the env value", got)
	}
	if got, _ := config.LedgerDSN("sqlite:x"); got != "sqlite:x" {
		t.Errorf("LedgerDSN with the flag = %q", got)
	}
	t.Setenv(config.EnvSandboxToken, "")
	if got := config.SecretState("", "--token", config.EnvSandboxToken); got != "unset" {
		t.Errorf("SecretState = %q, want unset", got)
	}
}

// The keyring is found in the documented order, and ClientOptions encrypts
// with it.
func TestKeyringOrder(t *testing.T) {
	for _, v := range []string{config.EnvCodecKeys, config.EnvCodecKeysFile, config.EnvDataDir} {
		t.Setenv(v, "")
	}
	dir := t.TempDir()
	devRing, _, err := codec.LoadOrCreate(filepath.Join(dir, codec.KeysFileName))
	if err != nil {
		t.Fatal(err)
	}
	tc := config.Temporal{Address: "127.0.0.1:7233", DataDir: dir}
	k, from, err := tc.Keyring()
	if err != nil || k == nil || from != filepath.Join(dir, codec.KeysFileName) {
		t.Fatalf("loopback address, dev keyring present: %v from %q, %v", k, from, err)
	}
	// Not loopback: the dev keyring is not used.
	remote := config.Temporal{Address: "temporal.example:7233", DataDir: dir}
	if k, from, err := remote.Keyring(); k != nil || from != "off" || err != nil {
		t.Errorf("remote address: %v from %q, %v; want off", k, from, err)
	}
	// The inline variable wins over the data directory.
	t.Setenv(config.EnvCodecKeys, "env-1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)))
	if k, _, _ := tc.Keyring(); k == nil || k.Current() != "env-1" {
		t.Errorf("with %s: %v", config.EnvCodecKeys, k)
	}
	// The file variable wins over the inline one; the flag over both.
	other := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(other, []byte("file-1:"+base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{2}, 32))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(config.EnvCodecKeysFile, other)
	if k, _, _ := tc.Keyring(); k == nil || k.Current() != "file-1" {
		t.Errorf("with %s: %v", config.EnvCodecKeysFile, k)
	}
	tc.CodecKeys = filepath.Join(dir, codec.KeysFileName)
	if k, _, _ := tc.Keyring(); k == nil || k.Current() != devRing.Current() {
		t.Errorf("with --codec-keys: %v", k)
	}
	tc.CodecKeys = filepath.Join(dir, "missing")
	if _, _, err := tc.Keyring(); err == nil || !strings.Contains(err.Error(), "--codec-keys") {
		t.Errorf("a missing --codec-keys file: %v, want an error naming the flag", err)
	}

	tc.CodecKeys = ""
	opts, err := tc.ClientOptions()
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.DataConverter.ToPayload("ord_CFG_1")
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Metadata[converter.MetadataEncoding]) != codec.EncodingEncrypted || bytes.Contains(p.Data, []byte("ord_CFG_1")) {
		t.Errorf("ClientOptions' data converter does not encrypt: %v", p)
	}
	if opts.FailureConverter == nil {
		t.Error("ClientOptions sets no failure converter: error messages would stay plain")
	}
}

// The catalogue's variable is the one config lists for the worker.
func TestEnvToolsIsTheCatalogues(t *testing.T) {
	if config.EnvTools != catalog.EnvTools {
		t.Fatalf("config.EnvTools %q, catalog.EnvTools %q", config.EnvTools, catalog.EnvTools)
	}
}

// The ledger DSN comes from a mounted secret file when neither the flag nor
// the variable gives it, trimmed; a missing or empty file is an error
// naming the variable.
func TestLedgerDSNFile(t *testing.T) {
	t.Setenv(config.EnvLedger, "")
	path := filepath.Join(t.TempDir(), "ledger-dsn")
	if err := os.WriteFile(path, []byte("postgres://agentsaga_app:pw@postgres:5432/agentsaga\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(config.EnvLedgerFile, path)
	if got, err := config.LedgerDSN(""); err != nil || got != "postgres://agentsaga_app:pw@postgres:5432/agentsaga" {
		t.Errorf("LedgerDSN from the file = %q, %v", got, err)
	}
	if got, _ := config.LedgerDSN("sqlite:x"); got != "sqlite:x" {
		t.Errorf("the flag must win over the file, got %q", got)
	}
	t.Setenv(config.EnvLedger, "sqlite:env")
	if got, _ := config.LedgerDSN(""); got != "sqlite:env" {
		t.Errorf("the variable must win over the file, got %q", got)
	}
	t.Setenv(config.EnvLedger, "")
	if err := os.WriteFile(path, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LedgerDSN(""); err == nil || !strings.Contains(err.Error(), config.EnvLedgerFile) {
		t.Errorf("an empty DSN file: err = %v, want an error naming %s", err, config.EnvLedgerFile)
	}
	t.Setenv(config.EnvLedgerFile, filepath.Join(t.TempDir(), "absent"))
	if _, err := config.LedgerDSN(""); err == nil || !strings.Contains(err.Error(), config.EnvLedgerFile) {
		t.Errorf("a missing DSN file: err = %v, want an error naming %s", err, config.EnvLedgerFile)
	}
}

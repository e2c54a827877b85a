// Package config reads how a worker or a starter reaches Temporal, the
// ledger and the sandbox: flags first, then environment variables (the
// Temporal SDK's names where Temporal has one), then defaults.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/codec"
	"github.com/agentsaga/agentsaga/redact"
)

// Environment variable names. TEMPORAL_* follow the Temporal SDK's
// environment configuration; AGENTSAGA_* are the product's own.
const (
	EnvAddress = "TEMPORAL_ADDRESS"
	// EnvAllowPlaintext=true makes a worker with codec keys accept
	// payloads that clients sent unencrypted.
	EnvAllowPlaintext = "AGENTSAGA_ALLOW_PLAINTEXT_PAYLOADS"
	// EnvAllowUnverified=true lets a worker outside --dev run without an
	// operators file, accepting typed names as unverified decisions.
	EnvAllowUnverified = "AGENTSAGA_ALLOW_UNVERIFIED_DECISIONS"
	// EnvUIURL is the Temporal Web UI's base URL, for links.
	EnvUIURL     = "AGENTSAGA_UI_URL"
	EnvNamespace = "TEMPORAL_NAMESPACE"
	EnvAPIKey    = "TEMPORAL_API_KEY"
	EnvTLS       = "TEMPORAL_TLS"
	EnvTLSCert   = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	EnvTLSKey    = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	EnvTLSCA     = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	EnvTLSServer = "TEMPORAL_TLS_SERVER_NAME"
	EnvTaskQueue = "AGENTSAGA_TASK_QUEUE"
	EnvLedger    = "AGENTSAGA_LEDGER"
	// EnvLedgerFile names a file holding the ledger DSN, as a mounted
	// secret (a DSN carries the role's password); read when neither
	// --ledger nor EnvLedger is set.
	EnvLedgerFile = "AGENTSAGA_LEDGER_FILE"
	EnvSandboxURL = "AGENTSAGA_SANDBOX_URL"
	EnvDataDir    = "AGENTSAGA_DATA_DIR"
	// EnvOperators names the operators file (see package operators).
	EnvOperators = "AGENTSAGA_OPERATORS"
	// EnvMetricsAddr is where the worker serves Prometheus metrics.
	EnvMetricsAddr = "AGENTSAGA_METRICS_ADDR"
	// EnvCodecKeysFile names the payload codec's keyring file.
	EnvCodecKeysFile = codec.EnvKeysFile
	// EnvCodecKeys holds the payload codec's keyring inline (a secret).
	EnvCodecKeys = codec.EnvKeys
	// EnvSandboxToken is the sandbox admin API's token (a secret).
	EnvSandboxToken = "AGENTSAGA_SANDBOX_TOKEN"
	// EnvTools names the tool catalogue files the worker runs, a path list
	// (catalog.EnvTools).
	EnvTools = "AGENTSAGA_TOOLS"
	// EnvDeploymentName and EnvBuildID run the worker under Temporal's
	// Worker Versioning, as build EnvBuildID of worker deployment
	// EnvDeploymentName (the worker's --deployment-name and --build-id).
	EnvDeploymentName = "AGENTSAGA_DEPLOYMENT_NAME"
	EnvBuildID        = "AGENTSAGA_BUILD_ID"
)

// EnvNames lists every environment variable the worker reads.
func EnvNames() []string {
	return []string{EnvAddress, EnvNamespace, EnvAPIKey, EnvTLS, EnvTLSCert, EnvTLSKey, EnvTLSCA, EnvTLSServer,
		EnvTaskQueue, EnvLedger, EnvLedgerFile, EnvSandboxURL, EnvDataDir, EnvOperators, EnvCodecKeysFile, EnvCodecKeys, EnvTools,
		EnvDeploymentName, EnvBuildID}
}

// SecretEnvNames lists the environment variables that hold secrets (or may:
// a DSN with a password). No flag takes its default from them, and nothing
// prints their values.
func SecretEnvNames() []string {
	return []string{EnvAPIKey, EnvLedger, EnvCodecKeys, EnvSandboxToken}
}

// Defaults.
const (
	DefaultAddress   = "127.0.0.1:7233"
	DefaultNamespace = "default"
	DefaultTaskQueue = "agent-saga"
	DefaultUIPort    = 8233
)

// Temporal is how to reach a Temporal cluster, and how to encrypt what is
// sent there.
type Temporal struct {
	Address   string
	Namespace string
	TaskQueue string
	// APIKey is --api-key; empty means $TEMPORAL_API_KEY, read when the
	// client options are built (see APIKeyValue), never a flag default.
	APIKey    string
	TLS       bool
	TLSCert   string
	TLSKey    string
	TLSCA     string
	TLSServer string
	// CodecKeys is the payload codec's keyring file (--codec-keys). Empty
	// means $AGENTSAGA_CODEC_KEYS_FILE, else $AGENTSAGA_CODEC_KEYS, else,
	// when Address is a loopback address, the keyring `worker --dev` keeps
	// at <DataDir>/codec-keys.json, else no codec (see Keyring).
	CodecKeys string
	// DataDir is where a dev stack's keyring is looked for; empty means
	// DefaultDataDir().
	DataDir string
}

// Register adds the Temporal flags to fs: --address, --namespace,
// --task-queue, --api-key, --tls*, --codec-keys. Secrets have empty
// defaults and are read from the environment when used, so --help and flag
// errors never print them.
func (t *Temporal) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.Address, "address", env(EnvAddress, DefaultAddress), "Temporal frontend host:port (env "+EnvAddress+")")
	fs.StringVar(&t.Namespace, "namespace", env(EnvNamespace, DefaultNamespace), "Temporal namespace (env "+EnvNamespace+")")
	fs.StringVar(&t.TaskQueue, "task-queue", env(EnvTaskQueue, DefaultTaskQueue), "task queue of AgentPlan (env "+EnvTaskQueue+")")
	fs.StringVar(&t.APIKey, "api-key", "", "Temporal Cloud API key; implies TLS (default env "+EnvAPIKey+", never printed)")
	fs.StringVar(&t.CodecKeys, "codec-keys", "", "payload encryption keyring file: JSON {\"current\":ID,\"keys\":{ID:BASE64}} or lines ID:BASE64 (default env "+
		EnvCodecKeysFile+", else the keys inline in env "+EnvCodecKeys+", else for a loopback --address the one worker --dev keeps at <data-dir>/"+codec.KeysFileName+")")
	tlsDefault, _ := strconv.ParseBool(os.Getenv(EnvTLS))
	fs.BoolVar(&t.TLS, "tls", tlsDefault, "connect with TLS (env "+EnvTLS+")")
	fs.StringVar(&t.TLSCert, "tls-cert", os.Getenv(EnvTLSCert), "mTLS client certificate file (env "+EnvTLSCert+")")
	fs.StringVar(&t.TLSKey, "tls-key", os.Getenv(EnvTLSKey), "mTLS client key file (env "+EnvTLSKey+")")
	fs.StringVar(&t.TLSCA, "tls-ca", os.Getenv(EnvTLSCA), "CA certificate file to trust (env "+EnvTLSCA+")")
	fs.StringVar(&t.TLSServer, "tls-server-name", os.Getenv(EnvTLSServer), "TLS server name override (env "+EnvTLSServer+")")
}

// APIKeyValue returns --api-key, else $TEMPORAL_API_KEY.
func (t Temporal) APIKeyValue() string {
	if t.APIKey != "" {
		return t.APIKey
	}
	return os.Getenv(EnvAPIKey)
}

// APIKeyState says whether an API key is set and where from, for banners:
// "set (--api-key)", "set (env TEMPORAL_API_KEY)" or "unset".
func (t Temporal) APIKeyState() string { return SecretState(t.APIKey, "--api-key", EnvAPIKey) }

// Keyring finds the payload codec's keyring (see CodecKeys) and says where
// it came from, for banners. A nil keyring with a nil error means no codec
// is configured: payloads are sent in plain and encrypted ones cannot be
// read (the error then says how to configure keys).
func (t Temporal) Keyring() (*codec.Keyring, string, error) {
	if t.CodecKeys != "" {
		k, err := codec.KeyringFile(t.CodecKeys)
		if err != nil {
			return nil, "", fmt.Errorf("--codec-keys: %w", err)
		}
		return k, t.CodecKeys, nil
	}
	if k, from, err := codec.KeyringFromEnvironment(); err != nil || k != nil {
		return k, from, err
	}
	if !isLoopback(t.Address) {
		return nil, "off", nil
	}
	dir := t.DataDir
	if dir == "" {
		dir = DefaultDataDir()
	}
	path := filepath.Join(dir, codec.KeysFileName)
	k, err := codec.KeyringFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "off", nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("the dev stack's keyring: %w; give --codec-keys", err)
	}
	return k, path, nil
}

// isLoopback reports whether hostPort names this machine's loopback
// interface, where `worker --dev` listens.
func isLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Codec returns the payload codec of t's keyring (a codec without keyring
// when none is configured; see Keyring) and where the keys came from.
func (t Temporal) Codec() (*codec.Codec, string, error) {
	k, from, err := t.Keyring()
	if err != nil {
		return nil, "", err
	}
	return codec.New(k), from, nil
}

// ClientOptions returns SDK client options for t: address, namespace, TLS,
// the API key as credentials (never logged), and the payload codec's data
// and failure converters (see Keyring).
func (t Temporal) ClientOptions() (client.Options, error) {
	opts := client.Options{HostPort: t.Address, Namespace: t.Namespace}
	ring, _, err := t.Keyring()
	if err != nil {
		return opts, err
	}
	codec.ClientOptions(&opts, ring)
	apiKey := t.APIKeyValue()
	useTLS := t.TLS || apiKey != "" || t.TLSCert != "" || t.TLSCA != ""
	if useTLS {
		tc := &tls.Config{ServerName: t.TLSServer, MinVersion: tls.VersionTLS12}
		if (t.TLSCert == "") != (t.TLSKey == "") {
			return opts, fmt.Errorf("--tls-cert and --tls-key go together: give both or neither")
		}
		if t.TLSCert != "" {
			pair, err := tls.LoadX509KeyPair(t.TLSCert, t.TLSKey)
			if err != nil {
				return opts, fmt.Errorf("load --tls-cert/--tls-key: %w", err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		if t.TLSCA != "" {
			pem, err := os.ReadFile(t.TLSCA)
			if err != nil {
				return opts, fmt.Errorf("read --tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return opts, fmt.Errorf("--tls-ca %s holds no PEM certificate", t.TLSCA)
			}
			tc.RootCAs = pool
		}
		opts.ConnectionOptions.TLS = tc
	}
	if apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(apiKey)
	}
	return opts, nil
}

// DefaultDataDir is where --dev keeps the Temporal database and the ledger:
// UIURLFile is the file under the data directory where `worker --dev`
// writes the address of the Web UI it serves, so the starter's links point
// at it (--ui-url and AGENTSAGA_UI_URL still win).
const UIURLFile = "ui-url"

// DevUIURL is the Web UI address worker --dev wrote under dir (empty when
// it wrote none).
func DevUIURL(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, UIURLFile))
	if err != nil || len(b) > 2048 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// $AGENTSAGA_DATA_DIR, else the user's cache directory.
func DefaultDataDir() string {
	if d := os.Getenv(EnvDataDir); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "agentsaga")
	}
	return ".agentsaga"
}

// DefaultLedger is the ledger DSN under a data directory.
func DefaultLedger(dataDir string) string {
	return "sqlite:" + filepath.Join(dataDir, "ledger.db")
}

// RegisterLedger adds --ledger to fs with an empty default: a DSN may hold a
// password, so it is read from $AGENTSAGA_LEDGER when used (LedgerDSN), not
// shown by --help. what completes the usage line.
func RegisterLedger(fs *flag.FlagSet, dst *string, what string) {
	fs.StringVar(dst, "ledger", "", "ledger DSN: sqlite:PATH or postgres://... (default env "+EnvLedger+"; "+what+")")
}

// LedgerDSN returns the --ledger value, else $AGENTSAGA_LEDGER, else the
// contents of the file $AGENTSAGA_LEDGER_FILE names (a mounted secret;
// surrounding space trimmed), "" when none is set. Print it with SafeDSN.
func LedgerDSN(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v := os.Getenv(EnvLedger); v != "" {
		return v, nil
	}
	path := os.Getenv(EnvLedgerFile)
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("env %s: read the ledger DSN file: %w", EnvLedgerFile, err)
	}
	const maxDSN = 4096
	dsn := strings.TrimSpace(string(b))
	switch {
	case dsn == "":
		return "", fmt.Errorf("env %s: %s is empty: write the ledger DSN (postgres://ROLE:PASSWORD@HOST/DB) in it", EnvLedgerFile, path)
	case len(dsn) > maxDSN:
		return "", fmt.Errorf("env %s: %s holds %d bytes; a DSN is at most %d", EnvLedgerFile, path, len(dsn), maxDSN)
	}
	return dsn, nil
}

// SecretState says whether a secret is set and where from, never its
// value: "set (FLAG)", "set (env NAME)" or "unset".
func SecretState(flagValue, flagName, envName string) string {
	switch {
	case flagValue != "":
		return "set (" + flagName + ")"
	case os.Getenv(envName) != "":
		return "set (env " + envName + ")"
	}
	return "unset"
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// SafeDSN returns dsn with any password masked, for printing: every form,
// parsed or not (see redact.DSN).
func SafeDSN(dsn string) string { return redact.DSN(dsn) }

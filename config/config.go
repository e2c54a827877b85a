// Package config reads how a worker or a starter reaches Temporal, the
// ledger and the sandbox: flags first, then environment variables (the
// Temporal SDK's names where Temporal has one), then defaults.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"go.temporal.io/sdk/client"
)

// Environment variable names. TEMPORAL_* follow the Temporal SDK's
// environment configuration; AGENTSAGA_* are the product's own.
const (
	EnvAddress    = "TEMPORAL_ADDRESS"
	EnvNamespace  = "TEMPORAL_NAMESPACE"
	EnvAPIKey     = "TEMPORAL_API_KEY"
	EnvTLS        = "TEMPORAL_TLS"
	EnvTLSCert    = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	EnvTLSKey     = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	EnvTLSCA      = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	EnvTLSServer  = "TEMPORAL_TLS_SERVER_NAME"
	EnvTaskQueue  = "AGENTSAGA_TASK_QUEUE"
	EnvLedger     = "AGENTSAGA_LEDGER"
	EnvSandboxURL = "AGENTSAGA_SANDBOX_URL"
	EnvDataDir    = "AGENTSAGA_DATA_DIR"
	// EnvOperators names the operators file (see package operators).
	EnvOperators = "AGENTSAGA_OPERATORS"
)

// EnvNames lists every environment variable the worker reads.
func EnvNames() []string {
	return []string{EnvAddress, EnvNamespace, EnvAPIKey, EnvTLS, EnvTLSCert, EnvTLSKey, EnvTLSCA, EnvTLSServer,
		EnvTaskQueue, EnvLedger, EnvSandboxURL, EnvDataDir, EnvOperators}
}

// Defaults.
const (
	DefaultAddress   = "127.0.0.1:7233"
	DefaultNamespace = "default"
	DefaultTaskQueue = "agent-saga"
	DefaultUIPort    = 8233
)

// Temporal is how to reach a Temporal cluster.
type Temporal struct {
	Address   string
	Namespace string
	TaskQueue string
	APIKey    string
	TLS       bool
	TLSCert   string
	TLSKey    string
	TLSCA     string
	TLSServer string
}

// Register adds the Temporal flags to fs, defaulted from the environment.
func (t *Temporal) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.Address, "address", env(EnvAddress, DefaultAddress), "Temporal frontend host:port (env "+EnvAddress+")")
	fs.StringVar(&t.Namespace, "namespace", env(EnvNamespace, DefaultNamespace), "Temporal namespace (env "+EnvNamespace+")")
	fs.StringVar(&t.TaskQueue, "task-queue", env(EnvTaskQueue, DefaultTaskQueue), "task queue of AgentPlan (env "+EnvTaskQueue+")")
	fs.StringVar(&t.APIKey, "api-key", os.Getenv(EnvAPIKey), "Temporal Cloud API key; implies TLS (env "+EnvAPIKey+")")
	tlsDefault, _ := strconv.ParseBool(os.Getenv(EnvTLS))
	fs.BoolVar(&t.TLS, "tls", tlsDefault, "connect with TLS (env "+EnvTLS+")")
	fs.StringVar(&t.TLSCert, "tls-cert", os.Getenv(EnvTLSCert), "mTLS client certificate file (env "+EnvTLSCert+")")
	fs.StringVar(&t.TLSKey, "tls-key", os.Getenv(EnvTLSKey), "mTLS client key file (env "+EnvTLSKey+")")
	fs.StringVar(&t.TLSCA, "tls-ca", os.Getenv(EnvTLSCA), "CA certificate file to trust (env "+EnvTLSCA+")")
	fs.StringVar(&t.TLSServer, "tls-server-name", os.Getenv(EnvTLSServer), "TLS server name override (env "+EnvTLSServer+")")
}

// ClientOptions returns SDK client options for t. The API key is passed as
// credentials, never logged.
func (t Temporal) ClientOptions() (client.Options, error) {
	opts := client.Options{HostPort: t.Address, Namespace: t.Namespace}
	useTLS := t.TLS || t.APIKey != "" || t.TLSCert != "" || t.TLSCA != ""
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
	if t.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(t.APIKey)
	}
	return opts, nil
}

// DefaultDataDir is where --dev keeps the Temporal database and the ledger:
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

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// SafeDSN returns dsn with any password masked, for printing.
func SafeDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	return u.Redacted()
}

package tlscerts_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/privfile"
	"github.com/agentsaga/agentsaga/internal/tlscerts"
)

// frontend is a gRPC server shaped like Temporal's frontend for the SDK's
// dial (health service, WorkflowService), on TLS that requires a client
// certificate from ca: the transport the compose frontend runs
// (TEMPORAL_TLS_REQUIRE_CLIENT_AUTH=true).
func frontend(t *testing.T, dir string) string {
	t.Helper()
	certPath, keyPath := tlscerts.Paths(dir, "temporal")
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	creds := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})
	srv := grpc.NewServer(grpc.Creds(creds))
	hs := health.NewServer()
	hs.SetServingStatus("temporal.api.workflowservice.v1.WorkflowService", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	workflowservice.RegisterWorkflowServiceServer(srv, workflowservice.UnimplementedWorkflowServiceServer{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// dial connects through the product's one way to build client options
// (config.Temporal.ClientOptions, what worker, starter and mcp use).
func dial(t *testing.T, tc config.Temporal) error {
	t.Helper()
	tc.Namespace = "default"
	tc.CodecKeys = ""
	opts, err := tc.ClientOptions()
	if err != nil {
		return err
	}
	opts.ConnectionOptions.GetSystemInfoTimeout = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}

// TestMutualTLS: a client with a certificate the CA signed is accepted; one
// without a certificate, and one with a certificate of another CA, are
// refused by the TLS handshake.
func TestMutualTLS(t *testing.T) {
	t.Setenv(config.EnvCodecKeys, "")
	t.Setenv(config.EnvCodecKeysFile, "")
	dir := t.TempDir()
	if _, err := tlscerts.Generate(dir, tlscerts.Compose, tlscerts.Options{}); err != nil {
		t.Fatal(err)
	}
	addr := frontend(t, dir)
	_, port, _ := net.SplitHostPort(addr)
	ca := filepath.Join(dir, "ca.pem")
	for _, name := range []string{"worker", "starter", "ui"} {
		cert, key := tlscerts.Paths(dir, name)
		// By service name, as the compose services dial temporal:7233.
		tc := config.Temporal{Address: addr, TLSCert: cert, TLSKey: key, TLSCA: ca, TLSServer: "temporal"}
		if err := dial(t, tc); err != nil {
			t.Errorf("%s's certificate: dial %s: %v, want accepted", name, addr, err)
		}
	}
	// By localhost, as `starter` on the host dials the published port.
	cert, key := tlscerts.Paths(dir, "starter")
	if err := dial(t, config.Temporal{Address: net.JoinHostPort("localhost", port), TLSCert: cert, TLSKey: key, TLSCA: ca}); err != nil {
		t.Errorf("starter on localhost: %v, want accepted (SAN localhost)", err)
	}

	if err := dial(t, config.Temporal{Address: addr, TLSCA: ca, TLSServer: "temporal"}); err == nil {
		t.Errorf("a client without a certificate was accepted; the frontend must require one")
	}
	other := t.TempDir()
	if _, err := tlscerts.Generate(other, tlscerts.Compose, tlscerts.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, key = tlscerts.Paths(other, "worker")
	if err := dial(t, config.Temporal{Address: addr, TLSCert: cert, TLSKey: key, TLSCA: ca, TLSServer: "temporal"}); err == nil {
		t.Errorf("a client certificate of another CA was accepted")
	}
	// The server's certificate does not answer to a name not in its SANs.
	cert, key = tlscerts.Paths(dir, "worker")
	if err := dial(t, config.Temporal{Address: addr, TLSCert: cert, TLSKey: key, TLSCA: ca, TLSServer: "temporal.example"}); err == nil {
		t.Errorf("the server certificate verified for temporal.example, which is not among its SANs")
	}
}

// TestGenerateFilesAndRerun: keys are 0600 ECDSA P-256, certificates carry
// the SANs and usages, the validity is the documented one, a rerun keeps
// everything and --renew reissues leaves from the same CA.
func TestGenerateFilesAndRerun(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rows, err := tlscerts.Generate(dir, tlscerts.Compose, tlscerts.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(tlscerts.Compose)+1 {
		t.Fatalf("rows = %+v, want the CA and %d identities", rows, len(tlscerts.Compose))
	}
	for _, r := range rows {
		if r.Action != "created" {
			t.Errorf("%s: %s, want created", r.Name, r.Action)
		}
	}
	for _, name := range []string{"ca", "temporal", "worker", "starter", "ui", "codec"} {
		cert, key := tlscerts.Paths(dir, name)
		st, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != privfile.Mode {
			t.Errorf("%s mode %o, want %o", key, st.Mode().Perm(), privfile.Mode)
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c := pair.Leaf
		if pk, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pk.Curve != elliptic.P256() {
			t.Errorf("%s key is %T, want ECDSA P-256", name, c.PublicKey)
		}
		if name == "ca" {
			if !c.IsCA || c.NotAfter.Sub(now) != tlscerts.CAValidity {
				t.Errorf("CA: IsCA %v, valid until %v, want a CA valid %v", c.IsCA, c.NotAfter, tlscerts.CAValidity)
			}
			continue
		}
		if got := c.NotAfter.Sub(now); got != tlscerts.DefaultValidity {
			t.Errorf("%s valid for %v, want %v", name, got, tlscerts.DefaultValidity)
		}
	}
	tc, _ := tlscerts.Paths(dir, "temporal")
	b, _ := os.ReadFile(tc)
	pair, _ := tls.X509KeyPair(b, mustRead(t, filepath.Join(dir, "temporal.key")))
	for _, n := range []string{"temporal", "localhost"} {
		if pair.Leaf.VerifyHostname(n) != nil {
			t.Errorf("temporal's certificate does not answer to %s", n)
		}
	}
	if pair.Leaf.VerifyHostname("127.0.0.1") != nil {
		t.Errorf("temporal's certificate does not answer to 127.0.0.1")
	}

	before := mustRead(t, filepath.Join(dir, "worker.pem"))
	rows, err = tlscerts.Generate(dir, tlscerts.Compose, tlscerts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Action != "kept" {
			t.Errorf("rerun: %s %s, want kept", r.Name, r.Action)
		}
	}
	if string(mustRead(t, filepath.Join(dir, "worker.pem"))) != string(before) {
		t.Errorf("a rerun changed worker.pem")
	}
	caBefore := mustRead(t, filepath.Join(dir, "ca.pem"))
	rows, err = tlscerts.Generate(dir, tlscerts.Compose, tlscerts.Options{Renew: true})
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Action != "kept" || rows[1].Action != "renewed" {
		t.Errorf("renew: %+v, want the CA kept and the leaves renewed", rows)
	}
	if string(mustRead(t, filepath.Join(dir, "ca.pem"))) != string(caBefore) || string(mustRead(t, filepath.Join(dir, "worker.pem"))) == string(before) {
		t.Errorf("renew must keep ca.pem and reissue worker.pem")
	}

	if _, err := tlscerts.Generate(t.TempDir(), tlscerts.Compose, tlscerts.Options{Validity: time.Hour}); err == nil || !strings.Contains(err.Error(), "validity") {
		t.Errorf("validity 1h: err = %v, want an error naming the validity and its range", err)
	}
	if _, err := tlscerts.Generate(t.TempDir(), tlscerts.Compose, tlscerts.Options{Owners: map[string][2]int{"nobody": {1, 1}}}); err == nil {
		t.Errorf("an owner for an unknown identity was accepted")
	}
	// A leaf whose CA is gone is refused, not silently re-signed.
	if err := os.Remove(filepath.Join(dir, "ca.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := tlscerts.Generate(dir, tlscerts.Compose, tlscerts.Options{}); err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("leaves without their CA: err = %v, want an error naming the missing CA", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

package devserver_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentsaga/agentsaga/config"
	"github.com/agentsaga/agentsaga/internal/devserver"
	"github.com/agentsaga/agentsaga/internal/tlscerts"
)

// TestMutualTLS: a real Temporal server whose frontend requires client
// certificates, with the certificates `starter cluster certs` makes: a
// client dialing through config.Temporal.ClientOptions (the worker's,
// starter's and gateway's one way) with the worker's certificate reaches
// the namespace; without a certificate, or with one of another CA, it is
// refused.
func TestMutualTLS(t *testing.T) {
	t.Setenv(config.EnvCodecKeys, "")
	t.Setenv(config.EnvCodecKeysFile, "")
	dir := t.TempDir()
	if _, err := tlscerts.Generate(dir, tlscerts.Compose, tlscerts.Options{}); err != nil {
		t.Fatal(err)
	}
	cert, key := tlscerts.Paths(dir, "temporal")
	ca := filepath.Join(dir, "ca.pem")
	s := start(t, devserver.Options{UIPort: devserver.NoUI, Logger: testLogger(t),
		TLS: &devserver.TLS{CertFile: cert, KeyFile: key, CAFile: ca, ServerName: "temporal"}})

	describe := func(tc config.Temporal) error {
		tc.Address, tc.Namespace, tc.CodecKeys = s.FrontendAddr(), s.Namespace(), ""
		opts, err := tc.ClientOptions()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := client.DialContext(ctx, opts)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.Namespace()})
		return err
	}
	wc, wk := tlscerts.Paths(dir, "worker")
	if err := describe(config.Temporal{TLSCert: wc, TLSKey: wk, TLSCA: ca, TLSServer: "temporal"}); err != nil {
		t.Fatalf("the worker's certificate: %v, want the namespace described", err)
	}
	if err := describe(config.Temporal{TLSCA: ca, TLSServer: "temporal"}); err == nil {
		t.Errorf("a client without a certificate reached the frontend")
	}
	if err := describe(config.Temporal{}); err == nil {
		t.Errorf("a plaintext client reached the frontend")
	}
	other := t.TempDir()
	if _, err := tlscerts.Generate(other, tlscerts.Compose, tlscerts.Options{}); err != nil {
		t.Fatal(err)
	}
	oc, ok := tlscerts.Paths(other, "worker")
	if err := describe(config.Temporal{TLSCert: oc, TLSKey: ok, TLSCA: ca, TLSServer: "temporal"}); err == nil {
		t.Errorf("a certificate of another CA reached the frontend")
	}
}

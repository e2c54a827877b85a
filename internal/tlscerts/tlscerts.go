// Package tlscerts makes the certificate authority and the certificates a
// Temporal cluster run with mutual TLS needs: one server certificate for the
// frontend (also the internode identity), and one client certificate per
// process that dials it (worker, starter, Web UI), plus the codec server's
// HTTPS certificate. Keys are ECDSA P-256, written mode 0600 through
// internal/privfile; certificates are X.509 from crypto/x509.
//
// It is internal: not API. `starter cluster certs` is its command.
package tlscerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agentsaga/agentsaga/internal/privfile"
)

// Validity defaults and bounds.
const (
	// DefaultValidity is how long a leaf certificate is valid: a year, so a
	// forgotten renewal shows within one review cycle, not in ten years.
	DefaultValidity = 365 * 24 * time.Hour
	// MinValidity and MaxValidity bound Options.Validity.
	MinValidity = 24 * time.Hour
	MaxValidity = 825 * 24 * time.Hour // the CA/Browser Forum's old ceiling for TLS leaves
	// CAValidity is how long the CA is valid: leaves are renewed from it
	// (Options.Renew) without handing every client a new CA.
	CAValidity = 5 * 365 * 24 * time.Hour
)

// CAName is the base name of the CA's files: ca.pem and ca.key.
const CAName = "ca"

// Identity is one certificate to make: NAME.pem and NAME.key.
type Identity struct {
	Name string
	// DNS and IPs are the subject alternative names a server certificate
	// answers to (a client certificate carries its Name only).
	DNS []string
	IPs []net.IP
	// Server and Client set the extended key usages.
	Server, Client bool
}

// Compose is the identity set of docker-compose.yml: the names are the
// compose service names, plus localhost and 127.0.0.1 for the ports
// published on the host.
var Compose = []Identity{
	// The frontend presents it to clients and uses it between the
	// server's own services (internal frontend, history, matching), as
	// server and as client.
	{Name: "temporal", DNS: []string{"temporal", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true},
	{Name: "worker", Client: true},
	{Name: "starter", Client: true},
	{Name: "ui", Client: true},
	// The codec server's HTTPS certificate: the browser calls it on
	// localhost, the UI's container by its service name.
	{Name: "codec", DNS: []string{"codec", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true},
}

// Options configure Generate.
type Options struct {
	// Validity of each leaf certificate; zero means DefaultValidity.
	Validity time.Duration
	// Renew reissues every leaf from the existing CA (a leaf's files are
	// replaced); without it existing files are kept.
	Renew bool
	// Owners chowns an identity's key (and certificate) to a uid and gid,
	// for a container that runs as that user; it needs root. Keys of
	// identities not named stay the caller's.
	Owners map[string][2]int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Row is what Generate did with one file pair.
type Row struct {
	Name     string
	Action   string // created, kept, renewed
	NotAfter time.Time
}

// Generate makes dir's CA (ca.pem, ca.key) when absent and, for each
// identity, NAME.pem and NAME.key signed by it. It is safe to run again:
// what exists is kept (Options.Renew reissues the leaves), and a leaf
// without the CA that signed it is an error.
func Generate(dir string, ids []Identity, opts Options) ([]Row, error) {
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	if opts.Validity < MinValidity || opts.Validity > MaxValidity {
		return nil, fmt.Errorf("tlscerts: validity %v is out of range: give %v to %v", opts.Validity, MinValidity, MaxValidity)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	for name := range opts.Owners {
		if !known(ids, name) {
			return nil, fmt.Errorf("tlscerts: owner given for %q, which is not one of the identities", name)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tlscerts: create %s: %w", dir, err)
	}
	var rows []Row
	ca, caKey, created, err := loadOrMakeCA(dir, ids, opts.Now())
	if err != nil {
		return nil, err
	}
	action := "kept"
	if created {
		action = "created"
	}
	rows = append(rows, Row{Name: CAName, Action: action, NotAfter: ca.NotAfter})
	for _, id := range ids {
		certPath, keyPath := Paths(dir, id.Name)
		have, err := exists(certPath, keyPath)
		if err != nil {
			return rows, err
		}
		action := "created"
		if have {
			if !opts.Renew {
				c, err := readCert(certPath)
				if err != nil {
					return rows, err
				}
				if err := c.CheckSignatureFrom(ca); err != nil {
					return rows, fmt.Errorf("tlscerts: %s is not signed by %s: %w; remove the directory's files and run again", certPath, filepath.Join(dir, CAName+".pem"), err)
				}
				rows = append(rows, Row{Name: id.Name, Action: "kept", NotAfter: c.NotAfter})
				continue
			}
			for _, p := range []string{certPath, keyPath} {
				if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return rows, fmt.Errorf("tlscerts: renew %s: %w", p, err)
				}
			}
			action = "renewed"
		}
		notAfter, err := issue(id, ca, caKey, certPath, keyPath, opts.Now(), opts.Validity)
		if err != nil {
			return rows, err
		}
		if o, ok := opts.Owners[id.Name]; ok {
			for _, p := range []string{keyPath, certPath} {
				if err := os.Chown(p, o[0], o[1]); err != nil {
					return rows, fmt.Errorf("tlscerts: give %s to uid %d (the user its container runs as): %w (run as root, or drop --owner)", p, o[0], err)
				}
			}
		}
		rows = append(rows, Row{Name: id.Name, Action: action, NotAfter: notAfter})
	}
	return rows, nil
}

// Paths returns the certificate and key paths of name under dir.
func Paths(dir, name string) (cert, key string) {
	return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
}

func known(ids []Identity, name string) bool {
	for _, id := range ids {
		if id.Name == name {
			return true
		}
	}
	return false
}

// exists reports whether both files exist; one without the other is an error.
func exists(cert, key string) (bool, error) {
	_, cerr := os.Stat(cert)
	_, kerr := os.Stat(key)
	switch {
	case cerr == nil && kerr == nil:
		return true, nil
	case errors.Is(cerr, fs.ErrNotExist) && errors.Is(kerr, fs.ErrNotExist):
		return false, nil
	case cerr == nil || kerr == nil:
		return false, fmt.Errorf("tlscerts: one of %s and %s exists without the other; remove it and run again", cert, key)
	}
	return false, fmt.Errorf("tlscerts: stat %s: %w", cert, errors.Join(cerr, kerr))
}

func loadOrMakeCA(dir string, ids []Identity, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, bool, error) {
	certPath, keyPath := Paths(dir, CAName)
	have, err := exists(certPath, keyPath)
	if err != nil {
		return nil, nil, false, err
	}
	if have {
		ca, err := readCert(certPath)
		if err != nil {
			return nil, nil, false, err
		}
		b, err := os.ReadFile(keyPath)
		if err != nil {
			return nil, nil, false, fmt.Errorf("tlscerts: read %s: %w", keyPath, err)
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, nil, false, fmt.Errorf("tlscerts: %s holds no PEM key", keyPath)
		}
		key, err := x509.ParseECPrivateKey(blk.Bytes)
		if err != nil {
			return nil, nil, false, fmt.Errorf("tlscerts: %s: %w", keyPath, err)
		}
		return ca, key, false, nil
	}
	for _, id := range ids {
		c, k := Paths(dir, id.Name)
		if h, _ := exists(c, k); h {
			return nil, nil, false, fmt.Errorf("tlscerts: %s exists but the CA that signed it (%s) does not; remove the directory's files and run again", c, certPath)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, fmt.Errorf("tlscerts: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "agentsaga CA", Organization: []string{"agentsaga"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, false, fmt.Errorf("tlscerts: CA certificate: %w", err)
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return nil, nil, false, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, false, fmt.Errorf("tlscerts: CA certificate: %w", err)
	}
	return ca, key, true, nil
}

func issue(id Identity, ca *x509.Certificate, caKey *ecdsa.PrivateKey, certPath, keyPath string, now time.Time, validity time.Duration) (time.Time, error) {
	if !id.Server && !id.Client {
		return time.Time{}, fmt.Errorf("tlscerts: identity %q is neither server nor client", id.Name)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return time.Time{}, fmt.Errorf("tlscerts: %s key: %w", id.Name, err)
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id.Name, Organization: []string{"agentsaga"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		DNSNames:     id.DNS,
		IPAddresses:  id.IPs,
	}
	if id.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if id.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return time.Time{}, fmt.Errorf("tlscerts: %s certificate: %w", id.Name, err)
	}
	if err := writePair(certPath, keyPath, der, key); err != nil {
		return time.Time{}, err
	}
	return notAfter, nil
}

// writePair writes the key first (mode 0600, never over an existing file),
// then the certificate (public, mode 0644).
func writePair(certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("tlscerts: encode %s: %w", keyPath, err)
	}
	if err := privfile.Create(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})); err != nil {
		return fmt.Errorf("tlscerts: %w", err)
	}
	f, err := os.OpenFile(certPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("tlscerts: create %s: %w", certPath, err)
	}
	if err := pem.Encode(f, &pem.Block{Type: "CERTIFICATE", Bytes: der}); err != nil {
		_ = f.Close()
		return fmt.Errorf("tlscerts: write %s: %w", certPath, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("tlscerts: write %s: %w", certPath, err)
	}
	return nil
}

func readCert(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlscerts: read %s: %w", path, err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("tlscerts: %s holds no PEM certificate", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tlscerts: %s: %w", path, err)
	}
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("tlscerts: crypto/rand failed: %v", err))
	}
	return n
}

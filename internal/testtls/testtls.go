// Package testtls generates CAs and certificates for tests with
// crypto/x509 (ECDSA P-256), and writes them as PEM files.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/tlsutil"
)

var serial atomic.Int64

// CA is a certificate authority that lives in a test's temp directory.
type CA struct {
	t    testing.TB
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
}

// NewCA makes a CA named name; its files go under a fresh temp directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	dir := t.TempDir()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testtls: %v", err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{t: t, dir: dir, cert: cert, key: key, File: filepath.Join(dir, name+"-ca.pem")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Cert is an issued certificate's files.
type Cert struct {
	CertFile, KeyFile string
	Leaf              *x509.Certificate
}

// Files returns the tlsutil.Files of this certificate under ca.
func (c Cert) Files(ca *CA) tlsutil.Files {
	return tlsutil.Files{CA: ca.File, Cert: c.CertFile, Key: c.KeyFile}
}

// CertOptions describe a certificate to issue.
type CertOptions struct {
	Name      string   // file name stem and common name
	DNSNames  []string // DNS SANs
	IPs       []net.IP // IP SANs
	Server    bool     // server and client auth usages (else client only)
	NotBefore time.Time
	NotAfter  time.Time
}

// Issue signs a certificate as opts say (default validity: an hour ago to
// a day from now).
func (ca *CA) Issue(opts CertOptions) Cert {
	t := ca.t
	t.Helper()
	key := newKey(t)
	if opts.NotBefore.IsZero() {
		opts.NotBefore = time.Now().Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = time.Now().Add(24 * time.Hour)
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if opts.Server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: opts.Name},
		NotBefore:    opts.NotBefore,
		NotAfter:     opts.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     opts.DNSNames,
		IPAddresses:  opts.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testtls: %v", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("testtls: %v", err)
	}
	stem := filepath.Join(ca.dir, opts.Name+"-"+leaf.SerialNumber.String())
	c := Cert{CertFile: stem + ".pem", KeyFile: stem + "-key.pem", Leaf: leaf}
	writePEM(t, c.CertFile, "CERTIFICATE", der)
	writePEM(t, c.KeyFile, "EC PRIVATE KEY", kder)
	return c
}

// Server issues a server certificate for cluster: server.<cluster>.ration,
// localhost and 127.0.0.1.
func (ca *CA) Server(cluster string) Cert {
	return ca.Issue(CertOptions{Name: "server", Server: true,
		DNSNames: []string{tlsutil.ServerName(cluster), "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
}

// Client issues a client certificate (client auth only, no server name).
func (ca *CA) Client(name string) Cert {
	return ca.Issue(CertOptions{Name: name, DNSNames: []string{name + ".client.ration"}})
}

// Store loads the certificate's files into a tlsutil.Store.
func (ca *CA) Store(c Cert) *tlsutil.Store {
	ca.t.Helper()
	s, err := tlsutil.Load(c.Files(ca), true)
	if err != nil {
		ca.t.Fatalf("testtls: %v", err)
	}
	return s
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testtls: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("testtls: %v", err)
	}
}

// CopyFile copies src over dst (atomically, by rename), for reload tests.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// Package testtls generates CAs and certificates for tests (with
// internal/tlsgen: crypto/x509, ECDSA P-256) and writes them as PEM files.
package testtls

import (
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/tlsgen"
	"github.com/ration-dev/ration/internal/tlsutil"
)

// fileSeq names issued files uniquely within a process.
var fileSeq atomic.Int64

// CA is a certificate authority that lives in a test's temp directory.
type CA struct {
	t   testing.TB
	dir string
	ca  *tlsgen.CA
	// File is the CA certificate's PEM file.
	File string
}

// NewCA makes a CA named name; its files go under a fresh temp directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	dir := t.TempDir()
	g, err := tlsgen.NewCA(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatalf("testtls: %v", err)
	}
	ca := &CA{t: t, dir: dir, ca: g, File: filepath.Join(dir, name+"-ca.pem")}
	writeFile(t, ca.File, g.CertPEM)
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
	if opts.NotBefore.IsZero() {
		opts.NotBefore = time.Now().Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = time.Now().Add(24 * time.Hour)
	}
	is, err := ca.ca.Issue(tlsgen.Options{CommonName: opts.Name, DNSNames: opts.DNSNames, IPs: opts.IPs,
		Server: opts.Server, NotBefore: opts.NotBefore, NotAfter: opts.NotAfter})
	if err != nil {
		t.Fatalf("testtls: %v", err)
	}
	stem := filepath.Join(ca.dir, fmt.Sprintf("%s-%d", opts.Name, fileSeq.Add(1)))
	c := Cert{CertFile: stem + ".pem", KeyFile: stem + "-key.pem", Leaf: is.Leaf}
	writeFile(t, c.CertFile, is.CertPEM)
	writeFile(t, c.KeyFile, is.KeyPEM)
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

func writeFile(t testing.TB, path string, b []byte) {
	if err := os.WriteFile(path, b, 0o600); err != nil {
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

// SecretDir is a directory laid out the way the kubelet writes a mounted
// Secret (and cert-manager's certificates reach a pod): each file NAME is
// a symlink to ..data/NAME, ..data a symlink to a directory of this
// version's files, and an update writes a new version's directory and
// swaps ..data to it by a rename, so every file changes at once.
type SecretDir struct {
	t   testing.TB
	Dir string
	n   int
}

// NewSecretDir makes an empty SecretDir in a fresh temp directory.
func NewSecretDir(t testing.TB) *SecretDir {
	return &SecretDir{t: t, Dir: t.TempDir()}
}

// Path is the path a program is given for the file name.
func (d *SecretDir) Path(name string) string { return filepath.Join(d.Dir, name) }

// Write makes files (name -> contents) the directory's new version.
func (d *SecretDir) Write(files map[string][]byte) {
	t := d.t
	t.Helper()
	d.n++
	version := fmt.Sprintf("..v%d", d.n)
	if err := os.Mkdir(filepath.Join(d.Dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range files {
		writeFile(t, filepath.Join(d.Dir, version, name), b)
	}
	old, _ := os.Readlink(filepath.Join(d.Dir, "..data"))
	tmp := filepath.Join(d.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(d.Path(name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), d.Path(name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(d.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// PEM returns the contents of the certificate's and key's files.
func (c Cert) PEM(t testing.TB) (cert, key []byte) {
	t.Helper()
	cert, err := os.ReadFile(c.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if key, err = os.ReadFile(c.KeyFile); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// PEM returns the contents of the CA's certificate file.
func (ca *CA) PEM() []byte {
	ca.t.Helper()
	b, err := os.ReadFile(ca.File)
	if err != nil {
		ca.t.Fatal(err)
	}
	return b
}

// Package tlsutil loads ration's TLS material (a CA bundle, a certificate
// and its key, from PEM files) and builds the tls.Configs of every link:
// incoming and outgoing gRPC, and the Raft transport.
//
// A Store holds the material behind an atomic pointer: Reload reads the
// files again and swaps certificate and CA pool together, so connections
// made after a reload (SIGHUP in rationd, or Watch seeing the files
// change) use the new ones and established connections are untouched. Every config the Store builds reads the
// current material per handshake (GetCertificate, GetClientCertificate, and
// verification against the current pool in VerifyConnection), never a copy
// taken when the config was built.
//
// Mutual TLS everywhere: a server requires and verifies a client
// certificate on every port; clients verify the server's. With a required
// peer name (ServerName, "server.<cluster>.ration"), a peer must also
// carry that DNS name: servers check it on each other (Raft both ways,
// forwarded calls), so a client certificate signed by the same CA cannot
// pose as a server.
package tlsutil

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Files names the PEM files of one side of a link.
type Files struct {
	CA   string // CA bundle that signs peers' certificates
	Cert string // this side's certificate (chain), PEM
	Key  string // its private key, PEM
}

// Any reports whether any file is set (TLS is wanted).
func (f Files) Any() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// ServerName is the DNS name every server's certificate carries for a
// cluster: server.<cluster>.ration.
func ServerName(cluster string) string { return "server." + cluster + ".ration" }

// MinVersion is the lowest TLS version any ration link accepts.
const MinVersion = tls.VersionTLS12

// CipherSuites are the TLS 1.2 suites allowed: ECDHE key exchange with an
// AEAD only (TLS 1.3's suites are all modern and not configurable).
var CipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

type material struct {
	cert   *tls.Certificate // nil: no certificate (a client without one)
	leaf   *x509.Certificate
	pool   *x509.CertPool
	loaded time.Time
	digest [sha256.Size]byte // of the file contents this was built from
}

// Store is the current TLS material of one process.
type Store struct {
	files Files
	now   func() time.Time
	cur   atomic.Pointer[material]
}

// Load reads and checks the files: the CA bundle must hold at least one
// certificate, every certificate must be valid now, the key must match the
// certificate, and the certificate must chain to the CA bundle. needCert:
// a certificate and key are required (servers); otherwise both or neither.
// Errors name the flag-like field and the file.
func Load(f Files, needCert bool) (*Store, error) {
	s := &Store{files: f, now: time.Now}
	c, err := s.read()
	if err != nil {
		return nil, err
	}
	m, err := s.parse(c, needCert)
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

// Reload reads the files again; on success the new certificate and pool
// serve every handshake from now on, on failure the old ones stay.
func (s *Store) Reload() error {
	c, err := s.read()
	if err != nil {
		return err
	}
	m, err := s.parse(c, s.cur.Load().cert != nil)
	if err != nil {
		return err
	}
	s.cur.Store(m)
	return nil
}

// Watch checks the files every interval until stop closes, and reloads
// them when their contents differ from those of the current material (and
// from those last tried). It reads the files whole each time (they are a
// few kilobytes) and builds the material from exactly the bytes it read,
// so it follows in-place rewrites, renames over the files and Kubernetes'
// swap of a "..data" symlink alike, whatever their times and sizes say.
// A set that does not load (a certificate written before its key) keeps
// the current material and is tried again once the contents change.
// report, if not nil, is called after each attempt: nil on success.
func (s *Store) Watch(interval time.Duration, stop <-chan struct{}, report func(error)) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var tried [sha256.Size]byte
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		c, err := s.read()
		var d [sha256.Size]byte
		if err != nil {
			d = sha256.Sum256([]byte("unreadable: " + err.Error()))
		} else {
			d = c.digest()
		}
		if d == s.cur.Load().digest || d == tried {
			continue
		}
		tried = d
		if err == nil {
			var m *material
			if m, err = s.parse(c, s.cur.Load().cert != nil); err == nil {
				s.cur.Store(m)
			}
		}
		if report != nil {
			report(err)
		}
	}
}

// Leaf returns the current certificate (nil without one).
func (s *Store) Leaf() *x509.Certificate { return s.cur.Load().leaf }

// Pool returns the current CA pool.
func (s *Store) Pool() *x509.CertPool { return s.cur.Load().pool }

// contents are the bytes of the files (nil for a file not set).
type contents struct{ ca, cert, key []byte }

func (c contents) digest() [sha256.Size]byte {
	h := sha256.New()
	for _, b := range [][]byte{c.ca, c.cert, c.key} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// read reads the files that are set.
func (s *Store) read() (contents, error) {
	f := s.files
	var c contents
	var err error
	if f.CA == "" {
		return c, errors.New("--tls-ca-file is required with TLS")
	}
	if c.ca, err = os.ReadFile(f.CA); err != nil {
		return c, fmt.Errorf("--tls-ca-file: %w", err)
	}
	if f.Cert != "" {
		if c.cert, err = os.ReadFile(f.Cert); err != nil {
			return c, fmt.Errorf("--tls-cert-file: %w", err)
		}
	}
	if f.Key != "" {
		if c.key, err = os.ReadFile(f.Key); err != nil {
			return c, fmt.Errorf("--tls-key-file: %w", err)
		}
	}
	return c, nil
}

// parse checks the files' contents and builds the material from them.
func (s *Store) parse(c contents, needCert bool) (*material, error) {
	f := s.files
	now := s.now()
	pool := x509.NewCertPool()
	n := 0
	for rest := c.ca; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		ca, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-file %s: %w", f.CA, err)
		}
		if err := validNow(ca, now); err != nil {
			return nil, fmt.Errorf("--tls-ca-file %s: CA %q %w", f.CA, ca.Subject.CommonName, err)
		}
		pool.AddCert(ca)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("--tls-ca-file %s: no PEM certificate in it", f.CA)
	}
	m := &material{pool: pool, loaded: now, digest: c.digest()}
	switch {
	case f.Cert == "" && f.Key == "":
		if needCert {
			return nil, errors.New("--tls-cert-file and --tls-key-file are required with TLS")
		}
		return m, nil
	case f.Cert == "":
		return nil, errors.New("--tls-key-file needs --tls-cert-file")
	case f.Key == "":
		return nil, errors.New("--tls-cert-file needs --tls-key-file")
	}
	pair, err := tls.X509KeyPair(c.cert, c.key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s with --tls-key-file %s: %w", f.Cert, f.Key, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("--tls-cert-file %s: %w", f.Cert, err)
		}
	}
	if err := validNow(leaf, now); err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s: certificate %w", f.Cert, err)
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s is not signed by --tls-ca-file %s: %w", f.Cert, f.CA, err)
	}
	m.cert, m.leaf = &pair, leaf
	return m, nil
}

func validNow(c *x509.Certificate, now time.Time) error {
	if now.After(c.NotAfter) {
		return fmt.Errorf("expired at %s", c.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(c.NotBefore) {
		return fmt.Errorf("is not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

func base() *tls.Config {
	return &tls.Config{MinVersion: MinVersion, CipherSuites: CipherSuites}
}

// verifyPeer checks a peer's chain against the current pool for usage, and,
// if name is set, that its leaf carries the DNS name name.
func (s *Store) verifyPeer(cs tls.ConnectionState, usage x509.ExtKeyUsage, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: peer sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.Pool(), Intermediates: inter, CurrentTime: s.now(),
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("tls: peer certificate: %w", err)
	}
	if name != "" {
		if err := HasDNSName(leaf, name); err != nil {
			return err
		}
	}
	return nil
}

// HasDNSName reports whether c carries the DNS SAN name (exactly or by a
// wildcard), as a server's certificate must.
func HasDNSName(c *x509.Certificate, name string) error {
	if net.ParseIP(name) != nil {
		return fmt.Errorf("tls: %q is not a DNS name", name)
	}
	if err := c.VerifyHostname(name); err != nil {
		return fmt.Errorf("tls: peer certificate is not a server's: %w", err)
	}
	return nil
}

// ServerConfig is the tls.Config of a listener: it presents the current
// certificate and requires a client certificate that chains to the current
// pool; peerName, if set, must also be a DNS name of that certificate
// (the Raft port: only servers dial it).
func (s *Store) ServerConfig(peerName string) *tls.Config {
	c := base()
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if m := s.cur.Load(); m.cert != nil {
			return m.cert, nil
		}
		return nil, errors.New("tls: no certificate configured")
	}
	// RequireAnyClientCert plus our own verification, so the pool is read
	// per handshake (ClientCAs would be fixed when the config is built).
	c.ClientAuth = tls.RequireAnyClientCert
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		return s.verifyPeer(cs, x509.ExtKeyUsageClientAuth, peerName)
	}
	return c
}

// ClientConfig is the tls.Config of a dialer: it offers the current
// certificate (if any) and verifies the server's against the current
// pool. serverName, if set, must be a DNS name of the server's certificate
// (--tls-verify-server-hostname); otherwise the chain alone is checked,
// whatever address was dialled (servers dial each other by IP).
func (s *Store) ClientConfig(serverName string) *tls.Config {
	c := base()
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if m := s.cur.Load(); m.cert != nil {
			return m.cert, nil
		}
		return &tls.Certificate{}, nil // none: the server refuses us
	}
	// The standard verification is replaced, not skipped: VerifyConnection
	// checks the chain against the current pool (which the standard one
	// could not follow across a reload) and the server name.
	c.InsecureSkipVerify = true
	c.ServerName = serverName
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		return s.verifyPeer(cs, x509.ExtKeyUsageServerAuth, serverName)
	}
	return c
}

// ClientConfigFiles builds a static client tls.Config from files (rationctl,
// rationd edge's dial): CA required, certificate optional. serverName, if
// set, is what the server's certificate must name; otherwise the chain is
// checked and not the name.
func ClientConfigFiles(f Files, serverName string) (*tls.Config, error) {
	s, err := Load(f, false)
	if err != nil {
		return nil, err
	}
	return s.ClientConfig(serverName), nil
}

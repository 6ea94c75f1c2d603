package tlsutil_test

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
)

func TestLoadErrors(t *testing.T) {
	ca := testtls.NewCA(t, "ca")
	other := testtls.NewCA(t, "other")
	good := ca.Server("ration")
	expired := ca.Issue(testtls.CertOptions{Name: "old", Server: true, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	future := ca.Issue(testtls.CertOptions{Name: "future", Server: true, NotBefore: time.Now().Add(time.Hour)})
	foreign := other.Server("ration")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files tlsutil.Files
		want  string
	}{
		{"no CA", tlsutil.Files{Cert: good.CertFile, Key: good.KeyFile}, "--tls-ca-file is required"},
		{"unreadable CA", tlsutil.Files{CA: "/nonexistent/ca.pem", Cert: good.CertFile, Key: good.KeyFile}, "--tls-ca-file: open /nonexistent/ca.pem"},
		{"CA not PEM", tlsutil.Files{CA: garbage, Cert: good.CertFile, Key: good.KeyFile}, "no PEM certificate"},
		{"no cert", tlsutil.Files{CA: ca.File}, "--tls-cert-file and --tls-key-file are required"},
		{"key without cert", tlsutil.Files{CA: ca.File, Key: good.KeyFile}, "--tls-key-file needs --tls-cert-file"},
		{"unreadable cert", tlsutil.Files{CA: ca.File, Cert: "/nonexistent/c.pem", Key: good.KeyFile}, "--tls-cert-file: open"},
		{"unreadable key", tlsutil.Files{CA: ca.File, Cert: good.CertFile, Key: "/nonexistent/k.pem"}, "--tls-key-file: open"},
		{"mismatched key", tlsutil.Files{CA: ca.File, Cert: good.CertFile, Key: expired.KeyFile}, "private key does not match public key"},
		{"expired", expired.Files(ca), "certificate expired at"},
		{"not yet valid", future.Files(ca), "is not valid before"},
		{"other CA", tlsutil.Files{CA: ca.File, Cert: foreign.CertFile, Key: foreign.KeyFile}, "is not signed by --tls-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsutil.Load(tc.files, true)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, err := tlsutil.Load(good.Files(ca), true); err != nil {
		t.Fatalf("good files: %v", err)
	}
	if _, err := tlsutil.Load(tlsutil.Files{CA: ca.File}, false); err != nil {
		t.Fatalf("client without a certificate: %v", err)
	}
}

// handshake runs one TLS handshake between a listener with srv and a
// dialer with cli, and returns the client's and the server's errors.
func handshake(t *testing.T, srv, cli *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, srv)
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Write([]byte("x")) // lets a TLS 1.3 client see the server's verdict
		}
		done <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	return err, <-done
}

func TestMutualVerification(t *testing.T) {
	ca := testtls.NewCA(t, "ca")
	other := testtls.NewCA(t, "other")
	server := ca.Store(ca.Server("ration"))
	client := ca.Store(ca.Client("app"))
	wrongCluster := ca.Store(ca.Server("elsewhere"))
	foreign := other.Store(other.Client("intruder"))
	noCert, err := tlsutil.Load(tlsutil.Files{CA: ca.File}, false)
	if err != nil {
		t.Fatal(err)
	}
	name := tlsutil.ServerName("ration")
	for _, tc := range []struct {
		name     string
		srv, cli *tls.Config
		ok       bool
	}{
		{"client cert to gRPC port", server.ServerConfig(""), client.ClientConfig(name), true},
		{"client cert without name check", server.ServerConfig(""), client.ClientConfig(""), true},
		{"server to server", server.ServerConfig(name), server.ClientConfig(name), true},
		{"client cert posing as a server", server.ServerConfig(name), client.ClientConfig(name), false},
		{"no client cert", server.ServerConfig(""), noCert.ClientConfig(name), false},
		{"cert from another CA", server.ServerConfig(""), foreign.ClientConfig(""), false},
		{"server of another cluster, name checked", wrongCluster.ServerConfig(""), client.ClientConfig(name), false},
		{"server of another cluster, name not checked", wrongCluster.ServerConfig(""), client.ClientConfig(""), true},
		{"TLS 1.1 refused", server.ServerConfig(""), func() *tls.Config {
			c := client.ClientConfig("")
			c.MinVersion, c.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
			return c
		}(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cerr, serr := handshake(t, tc.srv, tc.cli)
			if ok := cerr == nil && serr == nil; ok != tc.ok {
				t.Fatalf("handshake ok=%v (client: %v; server: %v), want ok=%v", ok, cerr, serr, tc.ok)
			}
		})
	}
}

func TestReload(t *testing.T) {
	ca1 := testtls.NewCA(t, "ca1")
	ca2 := testtls.NewCA(t, "ca2")
	dir := t.TempDir()
	files := tlsutil.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	first := ca1.Server("ration")
	testtls.CopyFile(t, ca1.File, files.CA)
	testtls.CopyFile(t, first.CertFile, files.Cert)
	testtls.CopyFile(t, first.KeyFile, files.Key)
	s, err := tlsutil.Load(files, true)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.ServerConfig("") // built once, before the reload
	newClient := ca2.Store(ca2.Client("app")).ClientConfig(tlsutil.ServerName("ration"))
	if cerr, serr := handshake(t, srv, newClient); cerr == nil && serr == nil {
		t.Fatal("a client of the second CA got through before the reload")
	}
	// A broken file set is refused and the old material stays.
	testtls.CopyFile(t, ca2.File, files.CA)
	if err := s.Reload(); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("Reload with a mismatched CA: %v", err)
	}
	if got := s.Leaf().SerialNumber; got.Cmp(first.Leaf.SerialNumber) != 0 {
		t.Fatalf("failed reload changed the certificate to serial %v", got)
	}
	second := ca2.Server("ration")
	testtls.CopyFile(t, second.CertFile, files.Cert)
	testtls.CopyFile(t, second.KeyFile, files.Key)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if cerr, serr := handshake(t, srv, newClient); cerr != nil || serr != nil {
		t.Fatalf("after the reload: client %v, server %v", cerr, serr)
	}
}

// TestWatch: Watch follows a certificate rewritten in place (refusing the
// half-written pair, keeping the current one, until the key follows) and
// a Kubernetes-style swap of the ..data symlink to a new CA and
// certificate; a config built before either serves the new material.
func TestWatch(t *testing.T) {
	ca1, ca2 := testtls.NewCA(t, "ca1"), testtls.NewCA(t, "ca2")
	first, second, third := ca1.Server("ration"), ca1.Server("ration"), ca2.Server("ration")
	dir := testtls.NewSecretDir(t)
	cert, key := first.PEM(t)
	dir.Write(map[string][]byte{"ca.crt": ca1.PEM(), "tls.crt": cert, "tls.key": key})
	s, err := tlsutil.Load(tlsutil.Files{CA: dir.Path("ca.crt"), Cert: dir.Path("tls.crt"), Key: dir.Path("tls.key")}, true)
	if err != nil {
		t.Fatal(err)
	}
	srv := s.ServerConfig("")
	reports := make(chan error, 16)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); s.Watch(5*time.Millisecond, stop, func(err error) { reports <- err }) }()
	defer func() { close(stop); <-done }()
	next := func() error {
		t.Helper()
		select {
		case err := <-reports:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("no reload attempt within 30s")
			return nil
		}
	}
	serial := func() string { return s.Leaf().SerialNumber.String() }

	// In place, through the symlinks: the certificate first, then its key.
	cert, key = second.PEM(t)
	if err := os.WriteFile(dir.Path("tls.crt"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := next(); err == nil || !strings.Contains(err.Error(), "private key does not match public key") {
		t.Fatalf("half-written pair: %v, want a key mismatch", err)
	}
	if serial() != first.Leaf.SerialNumber.String() {
		t.Fatal("a half-written pair replaced the certificate")
	}
	if err := os.WriteFile(dir.Path("tls.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := next(); err != nil {
		t.Fatalf("complete pair: %v", err)
	}
	if serial() != second.Leaf.SerialNumber.String() {
		t.Fatalf("serial %s after the rewrite, want %s", serial(), second.Leaf.SerialNumber)
	}

	// A new CA and certificate, swapped in at once.
	newClient := ca2.Store(ca2.Client("app")).ClientConfig(tlsutil.ServerName("ration"))
	if cerr, serr := handshake(t, srv, newClient); cerr == nil && serr == nil {
		t.Fatal("a client of the second CA got through before the swap")
	}
	cert, key = third.PEM(t)
	dir.Write(map[string][]byte{"ca.crt": append(ca1.PEM(), ca2.PEM()...), "tls.crt": cert, "tls.key": key})
	if err := next(); err != nil {
		t.Fatalf("symlink swap: %v", err)
	}
	if serial() != third.Leaf.SerialNumber.String() {
		t.Fatalf("serial %s after the swap, want %s", serial(), third.Leaf.SerialNumber)
	}
	if cerr, serr := handshake(t, srv, newClient); cerr != nil || serr != nil {
		t.Fatalf("after the swap: client %v, server %v", cerr, serr)
	}
	// Unchanged files are not reloaded again; a SIGHUP-style Reload of the
	// same files does not make Watch reload them either.
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reports:
		t.Fatalf("reload attempt without a change: %v", err)
	default:
	}
}

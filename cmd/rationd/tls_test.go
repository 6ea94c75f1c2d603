package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testtls"
)

// TestTLSStartupErrors: a certificate or key rationd cannot use is a clear
// configuration error (exit 2) before anything listens.
func TestTLSStartupErrors(t *testing.T) {
	ca := testtls.NewCA(t, "ca")
	good := ca.Server("ration")
	expired := ca.Issue(testtls.CertOptions{Name: "old", Server: true, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	other := testtls.NewCA(t, "other").Server("ration")
	addrs := freeAddrs(t, 3)
	base := []string{"--id", "n1", "--data-dir", t.TempDir(), "--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--gossip-addr", addrs[2]}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreadable cert", []string{"--tls-ca-file", ca.File, "--tls-cert-file", "/nonexistent.pem", "--tls-key-file", good.KeyFile},
			"rationd: TLS: --tls-cert-file: open /nonexistent.pem: no such file or directory"},
		{"expired", []string{"--tls-ca-file", ca.File, "--tls-cert-file", expired.CertFile, "--tls-key-file", expired.KeyFile},
			"rationd: TLS: --tls-cert-file " + expired.CertFile + ": certificate expired at"},
		{"mismatched key", []string{"--tls-ca-file", ca.File, "--tls-cert-file", good.CertFile, "--tls-key-file", expired.KeyFile},
			"private key does not match public key"},
		{"another CA", []string{"--tls-ca-file", ca.File, "--tls-cert-file", other.CertFile, "--tls-key-file", other.KeyFile},
			"is not signed by --tls-ca-file"},
		{"CA missing", []string{"--tls-cert-file", good.CertFile, "--tls-key-file", good.KeyFile},
			"rationd: TLS: --tls-ca-file is required with TLS"},
		{"verify without TLS", []string{"--tls-verify-server-hostname"},
			"rationd: --tls-verify-server-hostname needs --tls-ca-file"},
		{"bad cluster name", []string{"--cluster-name", "a.b"}, `--cluster-name "a.b" must be a DNS label`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr syncBuffer
			code := run(append(append([]string(nil), base...), tc.args...), &stdout, &stderr, nil)
			if code != 2 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, stderr.String(), tc.want)
			}
		})
	}
}

func TestWarnInsecure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		addr    string
		tls     bool
		warning bool
	}{
		{"loopback", "127.0.0.1:7400", false, false},
		{"localhost", "localhost:7400", false, false},
		{"any address", "0.0.0.0:7400", false, true},
		{"LAN address", "10.0.0.1:7400", false, true},
		{"LAN address with TLS", "10.0.0.1:7400", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			cfg := coordinator.DefaultConfig()
			cfg.GRPCAddr, cfg.RaftAddr, cfg.GossipAddr = tc.addr, "127.0.0.1:7410", "127.0.0.1:7420"
			if tc.tls {
				ca := testtls.NewCA(t, "ca")
				cfg.TLS = ca.Store(ca.Server("ration"))
			}
			logger := slog.New(slog.NewTextHandler(&buf, nil))
			warnInsecure(logger, cfg)
			if got := strings.Contains(buf.String(), "without TLS"); got != tc.warning {
				t.Errorf("warning=%v, want %v:\n%s", got, tc.warning, buf.String())
			}
			buf.Reset()
			warnPlainHTTP(logger, cfg, tc.addr)
			if got, want := strings.Contains(buf.String(), "plain HTTP"), tc.tls && !loopback(tc.addr); got != want {
				t.Errorf("http warning=%v, want %v:\n%s", got, want, buf.String())
			}
		})
	}
}

func TestGossipKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	short := dir + "/short.key"
	notB64 := dir + "/bad.key"
	if err := os.WriteFile(short, []byte("c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notB64, []byte("%%%"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := freeAddrs(t, 3)
	base := []string{"--id", "n1", "--data-dir", t.TempDir(), "--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--gossip-addr", addrs[2]}
	for _, tc := range []struct{ file, want string }{
		{dir + "/missing.key", "rationd: --gossip-key-file: open " + dir + "/missing.key: no such file or directory"},
		{short, "key size must be 16, 24 or 32 bytes"},
		{notB64, "gossip key is not base64"},
	} {
		var stdout, stderr syncBuffer
		code := run(append(append([]string(nil), base...), "--gossip-key-file", tc.file), &stdout, &stderr, nil)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("--gossip-key-file %s: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.file, code, stderr.String(), tc.want)
		}
	}
}

// TestTLSFilesReloaded runs a TLS server in-process on files laid out as
// a mounted Kubernetes Secret and changes them under it: a certificate
// rewritten in place before its key is refused (logged, the old one
// served), then taken once the key follows; then a new CA and certificate
// swapped in by the ..data symlink. New handshakes see each new
// certificate; a connection made before the changes keeps working on the
// certificate it was made with.
func TestTLSFilesReloaded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	ca1, ca2 := testtls.NewCA(t, "ca1"), testtls.NewCA(t, "ca2")
	s1, s2, s3 := ca1.Server("ration"), ca1.Server("ration"), ca2.Server("ration")
	serial := func(c testtls.Cert) string { return c.Leaf.SerialNumber.String() }
	app := ca1.Client("app")
	dir := testtls.NewSecretDir(t)
	cert, key := s1.PEM(t)
	dir.Write(map[string][]byte{"ca.crt": ca1.PEM(), "tls.crt": cert, "tls.key": key})

	addrs := freeAddrs(t, 3)
	signals := make(chan os.Signal, 1)
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--id", "n1", "--data-dir", t.TempDir(), "--grpc-addr", addrs[0], "--raft-addr", addrs[1], "--gossip-addr", addrs[2],
			"--bootstrap-expect", "1", "--log-format", "json", "--tls-reload-interval", "20ms",
			"--tls-ca-file", dir.Path("ca.crt"), "--tls-cert-file", dir.Path("tls.crt"), "--tls-key-file", dir.Path("tls.key")},
			&bytes.Buffer{}, &stderr, signals)
	}()
	t.Cleanup(func() {
		signals <- syscall.SIGTERM
		if code := <-done; code != 0 {
			t.Errorf("exit %d:\n%s", code, stderr.String())
		}
	})

	pair, err := tls.LoadX509KeyPair(app.CertFile, app.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca1.PEM())
	roots.AppendCertsFromPEM(ca2.PEM())
	clientTLS := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	// handshake: the serial of the certificate a new handshake sees.
	handshake := func() string {
		cfg := clientTLS.Clone()
		cfg.NextProtos = []string{"h2"}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addrs[0], cfg)
		if err != nil {
			return "handshake: " + err.Error()
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	// status: a Status call on conn, and the serial the connection it
	// went over was made with.
	status := func(conn *grpc.ClientConn) string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var p peer.Peer
		if _, err := api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{}, grpc.Peer(&p)); err != nil {
			return "status: " + err.Error()
		}
		info, ok := p.AuthInfo.(credentials.TLSInfo)
		if !ok {
			return fmt.Sprintf("status: auth info %T", p.AuthInfo)
		}
		return info.State.PeerCertificates[0].SerialNumber.String()
	}
	dial := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	waitFor := func(what, want string, got func() string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			g := got()
			if g == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s after 30s, want %s; log:\n%s", what, g, want, stderr.String())
			}
			<-tick.C
		}
	}
	old := dial()
	waitFor("first certificate", serial(s1), func() string { return status(old) })

	// In place, through the symlinks: the certificate first, then its key.
	cert, key = s2.PEM(t)
	if err := os.WriteFile(dir.Path("tls.crt"), cert, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("half-written pair refused", "true", func() string {
		return fmt.Sprint(strings.Contains(stderr.String(), `"msg":"TLS reload failed; keeping the current certificate","why":"files changed","err":"--tls-cert-file `))
	})
	if got := handshake(); got != serial(s1) {
		t.Fatalf("after a half-written pair a new handshake sees %s, want the old %s", got, serial(s1))
	}
	if err := os.WriteFile(dir.Path("tls.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("rewritten in place", serial(s2), handshake)
	if got := status(old); got != serial(s1) {
		t.Fatalf("the connection made before the rewrite: %s, want it working on %s", got, serial(s1))
	}

	// A new CA and certificate, by the kubelet's symlink swap.
	cert, key = s3.PEM(t)
	dir.Write(map[string][]byte{"ca.crt": append(ca1.PEM(), ca2.PEM()...), "tls.crt": cert, "tls.key": key})
	waitFor("symlink swap", serial(s3), handshake)
	if got := status(dial()); got != serial(s3) {
		t.Fatalf("a new connection after the swap: %s, want %s", got, serial(s3))
	}
	if got := status(old); got != serial(s1) {
		t.Fatalf("the connection made before the swap: %s, want it working on %s", got, serial(s1))
	}
	if n := strings.Count(stderr.String(), `"msg":"TLS certificate reloaded","why":"files changed"`); n != 2 {
		t.Errorf("%d reloads logged, want 2:\n%s", n, stderr.String())
	}
}

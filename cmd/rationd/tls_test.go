package main

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

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

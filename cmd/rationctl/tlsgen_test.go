package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/tlsutil"
)

// TestTLSGen: `rationctl tls` makes a CA, server and client certificates
// that rationd's own loader accepts, with the usages and names the
// hostname check needs; it refuses to overwrite, a client with a server
// name, and a key that is not the CA's.
func TestTLSGen(t *testing.T) {
	dir := t.TempDir()
	ctl := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		return out.String(), errOut.String(), code
	}
	mustCtl := func(args ...string) string {
		t.Helper()
		out, errOut, code := ctl(args...)
		if code != 0 {
			t.Fatalf("rationctl %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	mustCtl("tls", "ca", "create", "--dir", dir)
	ca, cakey := filepath.Join(dir, "ration-ca.pem"), filepath.Join(dir, "ration-ca-key.pem")
	in := func(args ...string) []string {
		return append(args, "--dir", dir, "--ca-file", ca, "--ca-key-file", cakey)
	}
	if out := mustCtl(in("tls", "cert", "create", "--server", "--cluster-name", "prod", "--ip", "10.0.0.1", "--dns", "node1.example")...); !strings.Contains(out, "server.prod.ration") {
		t.Fatalf("server certificate: %s", out)
	}
	mustCtl(in("tls", "cert", "create", "--client", "--name", "operator")...)

	server, err := tlsutil.Load(tlsutil.Files{CA: ca, Cert: filepath.Join(dir, "server-0.pem"), Key: filepath.Join(dir, "server-0-key.pem")}, true)
	if err != nil {
		t.Fatalf("rationd's loader refuses the server certificate: %v", err)
	}
	leaf := server.Leaf()
	if err := tlsutil.HasDNSName(leaf, tlsutil.ServerName("prod")); err != nil {
		t.Errorf("server name: %v", err)
	}
	if len(leaf.ExtKeyUsage) != 2 {
		t.Errorf("server usages %v, want client and server auth", leaf.ExtKeyUsage)
	}
	client, err := tlsutil.Load(tlsutil.Files{CA: ca, Cert: filepath.Join(dir, "operator.pem"), Key: filepath.Join(dir, "operator-key.pem")}, true)
	if err != nil {
		t.Fatalf("client certificate: %v", err)
	}
	if err := tlsutil.HasDNSName(client.Leaf(), tlsutil.ServerName("prod")); err == nil || len(client.Leaf().ExtKeyUsage) != 1 {
		t.Errorf("a client certificate that could pose as a server: %v %v", client.Leaf().DNSNames, client.Leaf().ExtKeyUsage)
	}
	if fi, err := os.Stat(filepath.Join(dir, "operator-key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", fi.Mode(), err)
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{in("tls", "cert", "create", "--client", "--name", "operator"), 1, "exists; not overwriting it"},
		{in("tls", "cert", "create"), 2, "exactly one of --server and --client"},
		{in("tls", "cert", "create", "--client", "--name", "server.prod.ration"), 2, "cannot carry a server name"},
		{in("tls", "cert", "create", "--server", "--ip", "ten"), 2, `--ip "ten" is not an IP address`},
		{[]string{"tls", "cert", "create", "--server", "--dir", dir, "--ca-file", ca, "--ca-key-file", filepath.Join(dir, "server-0-key.pem")}, 1, "is not the key of"},
		{[]string{"tls", "ca", "create", "--dir", dir}, 1, "exists; not overwriting it"},
	} {
		_, errOut, code := ctl(tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("rationctl %v: exit %d %q, want %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

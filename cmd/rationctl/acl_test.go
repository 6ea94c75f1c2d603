package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/tlsutil"
)

// TestACLClusterBinaries: three real rationd processes with mutual TLS
// and --acl-enabled, driven only through the rationctl binary as
// docs/security.md says: every unauthenticated or unauthorized call is
// refused with the code and message an operator needs, and what each role
// may do works. With -v it prints the session (docs/security.md shows one).
func TestACLClusterBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster; skipped with -short")
	}
	rationd, rationctl := buildBinaries(t)
	dir := t.TempDir()
	// The certificates as docs/security.md makes them: rationctl tls.
	pki := filepath.Join(dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	gen := func(args ...string) {
		t.Helper()
		if out, errOut, code := ctl(t, rationctl, append(args, "--dir", pki)...); code != 0 {
			t.Fatalf("rationctl %v: exit %d\n%s%s", args, code, out, errOut)
		}
	}
	caFlags := []string{"--ca-file", filepath.Join(pki, "ration-ca.pem"), "--ca-key-file", filepath.Join(pki, "ration-ca-key.pem")}
	gen("tls", "ca", "create")
	for i := 1; i <= 3; i++ {
		gen(append([]string{"tls", "cert", "create", "--server", "--name", fmt.Sprintf("node%d", i)}, caFlags...)...)
	}
	gen(append([]string{"tls", "cert", "create", "--client", "--name", "operator"}, caFlags...)...)
	caFile := filepath.Join(pki, "ration-ca.pem")
	procs := startClusterArgs(t, rationd, func(i int) []string {
		n := filepath.Join(pki, fmt.Sprintf("node%d", i+1))
		return []string{"--tls-ca-file", caFile, "--tls-cert-file", n + ".pem", "--tls-key-file", n + "-key.pem",
			"--tls-verify-server-hostname", "--acl-enabled"}
	})
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.grpcAddr)
	}
	conn := []string{"--servers", strings.Join(addrs, ","), "--tls-ca-file", caFile, "--tls-cert-file", filepath.Join(pki, "operator.pem"),
		"--tls-key-file", filepath.Join(pki, "operator-key.pem"), "--tls-server-name", tlsutil.ServerName("ration")}
	var session strings.Builder
	run := func(token string, args ...string) (string, string, int) {
		t.Helper()
		full := append(append([]string(nil), args...), conn...)
		if token != "" {
			full = append(full, "--token-file", token)
		}
		out, errOut, code := ctl(t, rationctl, full...)
		shown := "$ rationctl " + strings.Join(args, " ")
		if token != "" {
			shown += " --token-file " + filepath.Base(token)
		}
		fmt.Fprintf(&session, "%s\n%s%s", shown, out, errOut)
		return out, errOut, code
	}
	refused := func(token, want string, args ...string) {
		t.Helper()
		_, errOut, code := run(token, args...)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("rationctl %v: exit %d, stderr %q; want exit 1 and %q", args, code, errOut, want)
		}
	}
	ok := func(token string, args ...string) string {
		t.Helper()
		out, errOut, code := run(token, args...)
		if code != 0 {
			t.Fatalf("rationctl %v: exit %d\n%s%s", args, code, out, errOut)
		}
		return out
	}
	save := func(name, secret string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secretOf := func(out string) (secret, accessor string) {
		var j aclTokenJSON
		if err := json.Unmarshal([]byte(out), &j); err != nil || j.Secret == "" {
			t.Fatalf("token --json: %v\n%s", err, out)
		}
		return j.Secret, j.AccessorID
	}

	// Until bootstrap, only the bootstrap is answered. The cluster may
	// still be electing (Unavailable) or turning the ACL switch on.
	var mgmt string
	waitFor(t, 60*time.Second, "acl bootstrap", func() (bool, string) {
		out, errOut, code := ctl(t, rationctl, append([]string{"acl", "bootstrap"}, conn...)...)
		if code == 0 {
			for _, line := range strings.Split(out, "\n") {
				if s, ok := strings.CutPrefix(line, "SecretID:"); ok {
					mgmt = save("bootstrap.token", strings.TrimSpace(s))
				}
			}
			if mgmt == "" {
				t.Fatalf("no SecretID in:\n%s", out)
			}
			fmt.Fprintf(&session, "$ rationctl acl bootstrap\n%s", out)
			return true, ""
		}
		return false, errOut
	})
	// A follower answers status itself: until it has applied the
	// bootstrap it says ACLs are not bootstrapped (also Unauthenticated).
	// Wait until every server has applied it, asking each one alone.
	for _, addr := range addrs {
		one := append([]string{"status"}, conn...)
		one[2] = addr // conn[1] is the --servers value
		waitFor(t, 30*time.Second, addr+" has applied the bootstrap", func() (bool, string) {
			_, errOut, _ := ctl(t, rationctl, one...)
			return strings.Contains(errOut, "this call needs an ACL token"), errOut
		})
	}
	refused("", "Unauthenticated: this call needs an ACL token", "status")
	refused("", "FailedPrecondition: failed precondition: ACLs are already bootstrapped", "acl", "bootstrap")
	bad := save("typo.token", "ration_notatoken")
	_, errOut, code := run(bad, "status")
	if code != 2 || !strings.Contains(errOut, "malformed token") || strings.Contains(errOut, "notatoken") {
		t.Errorf("a malformed token file: exit %d, %q; want a usage error that does not repeat it", code, errOut)
	}
	ok(mgmt, "status")
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, []byte("policies:\n  - name: api\n    algorithm: token-bucket\n    rate: 100\n    burst: 200\n    key: [tenant]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok(mgmt, "policy", "apply", "-f", policies)
	opTok, _ := secretOf(ok(mgmt, "acl", "token", "create", "--role", "operator", "--name", "ops", "--json"))
	op := save("operator.token", opTok)
	rdTok, _ := secretOf(ok(mgmt, "acl", "token", "create", "--role", "reader", "--name", "dashboards", "--json"))
	rd := save("reader.token", rdTok)
	acmeTok, acmeAcc := secretOf(ok(mgmt, "acl", "token", "create", "--role", "client", "--name", "acme-web",
		"--bind", "api:tenant=acme", "--client-id", "acme-web-*", "--json"))
	acme := save("acme.token", acmeTok)
	ok(mgmt, "acl", "token", "list")

	// Reader: reads only.
	ok(rd, "policy", "list")
	refused(rd, "PermissionDenied: permission denied: token", "policy", "delete", "api")
	refused(rd, "lacks lease", "lease", "acquire", "--policy", "api", "--key", "tenant=acme", "--client", "acme-web-1")
	// Operator: admin, but no token management.
	ok(op, "leases")
	refused(op, "lacks acl:write", "acl", "token", "list")
	refused(op, "lacks acl:write", "acl", "token", "create", "--role", "management")
	// Client token for tenant=acme: its keys, under its client IDs, only.
	ok(acme, "lease", "acquire", "--policy", "api", "--key", "tenant=acme", "--client", "acme-web-1")
	refused(acme, `lacks lease on policy "api" for key {tenant="globex"}`, "lease", "acquire", "--policy", "api", "--key", "tenant=globex", "--client", "acme-web-1")
	refused(acme, `may not lease as client "globex-web-1"`, "lease", "acquire", "--policy", "api", "--key", "tenant=acme", "--client", "globex-web-1")
	refused(acme, "lacks admin:read", "status")
	// A deleted token is refused from its deletion's commit on.
	ok(mgmt, "acl", "token", "delete", acmeAcc)
	refused(acme, "Unauthenticated: ACL token not found", "lease", "acquire", "--policy", "api", "--key", "tenant=acme", "--client", "acme-web-1")
	t.Logf("session:\n%s", session.String())
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/testcluster"
)

// TestACLBootstrapSecretFile: acl bootstrap --secret-file writes the
// secret to a new 0600 file that --token-file then reads, and prints it
// nowhere; a file that exists is refused before anything is asked, and a
// bootstrap that fails leaves no file behind.
func TestACLBootstrapSecretFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := testcluster.New(t, 1, testcluster.WithACL())
	c.WaitForLeader(t)
	addr := c.Server(0).GRPCAddr()
	dir := t.TempDir()
	ctl := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"--servers", addr}, args...), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}

	taken := filepath.Join(dir, "taken.token")
	if err := os.WriteFile(taken, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := ctl("acl", "bootstrap", "--secret-file", taken); code == 0 ||
		!strings.Contains(errOut, "exists; not overwriting it") {
		t.Fatalf("an existing --secret-file: exit %d, stderr %q", code, errOut)
	}
	if b, _ := os.ReadFile(taken); string(b) != "keep me\n" {
		t.Fatalf("the existing file now holds %q", b)
	}

	// The leader may still be turning the ACL switch on: retry, each
	// failed attempt removing its file.
	tok := filepath.Join(dir, "bootstrap.token")
	var out string
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		stdout, errOut, code := ctl("acl", "bootstrap", "--secret-file", tok)
		if code != 0 {
			if _, err := os.Stat(tok); err == nil {
				t.Fatalf("a failed bootstrap (%s) left %s behind", errOut, tok)
			}
			return errorString(errOut)
		}
		out = stdout
		return nil
	})
	b, err := os.ReadFile(tok)
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(b))
	if !strings.HasPrefix(secret, "ration_") || strings.Contains(out, secret) ||
		!strings.Contains(out, "SecretID:    (written to "+tok+")") {
		t.Fatalf("secret %q, stdout:\n%s", secret, out)
	}
	if fi, err := os.Stat(tok); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", tok, err, fi.Mode().Perm())
	}
	if stdout, errOut, code := ctl("--token-file", tok, "status"); code != 0 || !strings.Contains(stdout, "Leader:") {
		t.Fatalf("status with the written token: exit %d\n%s%s", code, stdout, errOut)
	}

	again := filepath.Join(dir, "again.token")
	if _, errOut, code := ctl("acl", "bootstrap", "--secret-file", again); code != 1 ||
		!strings.Contains(errOut, "already bootstrapped") {
		t.Fatalf("a second bootstrap: exit %d, stderr %q", code, errOut)
	}
	if _, err := os.Stat(again); !os.IsNotExist(err) {
		t.Fatalf("a refused bootstrap left %s behind (%v)", again, err)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

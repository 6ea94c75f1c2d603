package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
)

func writeGossipKey(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	s := base64.StdEncoding.EncodeToString(k)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s, path
}

// startOutsider starts a fourth rationd (TLS like the others) that joins
// the cluster's gossip with keyFile ("" for none), waits until it has
// failed to join, and stops it; it fails the test if any server lists it.
func startOutsider(t *testing.T, rationd, rationctl string, procs []*serverProc, ca *testtls.CA, tlsArgs []string, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	addrs := freeLoopbackAddrs(t, 3)
	c := ca.Server("ration")
	args := []string{"--id", "outsider", "--data-dir", filepath.Join(dir, "data"), "--grpc-addr", addrs[0], "--raft-addr", addrs[1],
		"--gossip-addr", addrs[2], "--join", procs[0].gossipAddr + "," + procs[1].gossipAddr,
		"--tls-ca-file", ca.File, "--tls-cert-file", c.CertFile, "--tls-key-file", c.KeyFile, "--tls-verify-server-hostname"}
	if keyFile != "" {
		args = append(args, "--gossip-key-file", keyFile)
	}
	logPath := filepath.Join(dir, "outsider.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(rationd, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	waitFor(t, 30*time.Second, "the outsider failing to join", func() (bool, string) {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "join failed, retrying"), string(b)
	})
	for _, p := range procs {
		out, errOut, code := ctl(t, rationctl, append([]string{"members", "--json", "--servers", p.grpcAddr}, tlsArgs[2:]...)...)
		if code != 0 {
			t.Fatalf("members: exit %d: %s", code, errOut)
		}
		if strings.Contains(out, "outsider") {
			t.Fatalf("%s lists the outsider (gossip key %q):\n%s", p.id, keyFile, out)
		}
	}
}

// TestGossipKeyringBinaries: real rationd processes with TLS and gossip
// encryption keep out a node without the key; rationctl keyring rotates
// the key (install, use, remove) while a client admits; afterwards a node
// with the old key is kept out too.
func TestGossipKeyringBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster; skipped with -short")
	}
	rationd, rationctl := buildBinaries(t)
	ca := testtls.NewCA(t, "ca")
	keyDir := t.TempDir()
	k1, k1File := writeGossipKey(t, keyDir, "k1")
	k2, _ := writeGossipKey(t, keyDir, "k2")
	procs, _, tlsArgs := startTLSCluster(t, rationd, rationctl, ca, func(int) []string { return []string{"--gossip-key-file", k1File} })

	startOutsider(t, rationd, rationctl, procs, ca, tlsArgs, "")

	// A policy and a client that admits all along.
	policyFile := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(policyFile, []byte("policies:\n  - name: rot\n    algorithm: token-bucket\n    rate: 1000\n    burst: 1000\n    key: [tenant]\n    lease: {duration: 2s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := ctl(t, rationctl, append([]string{"policy", "apply", "-f", policyFile}, tlsArgs...)...); code != 0 {
		t.Fatalf("policy apply: %d %s %s", code, out, errOut)
	}
	cfg, err := tlsutil.ClientConfigFiles(tlsutil.Files{CA: ca.File, Cert: tlsArgs[5], Key: tlsArgs[7]}, tlsutil.ServerName("ration"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(context.Background(), client.Config{Servers: strings.Split(tlsArgs[1], ","), ClientID: "rotation", TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lim := cl.Limiter("rot", client.Key{"tenant": "acme"})
	var admitted atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); {
			select {
			case <-stop:
				return
			case <-tick.C:
				if lim.Allow() {
					admitted.Add(1)
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()
	admits := func(what string) {
		t.Helper()
		from := admitted.Load()
		waitFor(t, 30*time.Second, "an admission after "+what, func() (bool, string) {
			n := admitted.Load()
			return n > from, fmt.Sprint(n, " admitted")
		})
	}
	admits("the start")

	type ringJSON struct {
		Servers []struct {
			ID, Error  string
			PrimaryKey string `json:"primary_key"`
			Keys       []string
		}
	}
	keyring := func(server int, args ...string) ringJSON {
		t.Helper()
		cmd := append(append([]string{"keyring"}, args...), "--servers", procs[server].grpcAddr)
		out, errOut, code := ctl(t, rationctl, append(cmd, tlsArgs[2:]...)...)
		if code != 0 {
			t.Fatalf("rationctl %v: exit %d\n%s%s", cmd, code, out, errOut)
		}
		lout, lerr, code := ctl(t, rationctl, append([]string{"keyring", "list", "--json", "--servers", procs[server].grpcAddr}, tlsArgs[2:]...)...)
		if code != 0 {
			t.Fatalf("keyring list: exit %d\n%s%s", code, lout, lerr)
		}
		var r ringJSON
		if err := json.Unmarshal([]byte(lout), &r); err != nil {
			t.Fatalf("keyring list --json: %v\n%s", err, lout)
		}
		if len(r.Servers) != 3 {
			t.Fatalf("keyring list: %d servers, want 3:\n%s", len(r.Servers), lout)
		}
		return r
	}
	check := func(r ringJSON, primary string, n int) {
		t.Helper()
		for _, s := range r.Servers {
			if s.PrimaryKey != primary || len(s.Keys) != n {
				t.Fatalf("%s: primary %s, keys %v; want primary %s and %d keys", s.ID, s.PrimaryKey, s.Keys, primary, n)
			}
		}
	}
	check(keyring(0, "list"), k1, 1)
	check(keyring(1, "install", k2), k1, 2)
	admits("install")
	check(keyring(2, "use", k2), k2, 2)
	admits("use")
	// Refused: removing every server's primary key.
	if out, errOut, code := ctl(t, rationctl, append([]string{"keyring", "remove", k2}, tlsArgs...)...); code != 1 || !strings.Contains(errOut, "failed on 3 of 3 servers") {
		t.Fatalf("removing the primary key: exit %d\n%s%s", code, out, errOut)
	}
	check(keyring(0, "remove", k1), k2, 1)
	admits("remove")

	// Every server still sees the other two alive.
	for _, p := range procs {
		out, errOut, code := ctl(t, rationctl, append([]string{"members", "--servers", p.grpcAddr}, tlsArgs[2:]...)...)
		if code != 0 || strings.Count(out, "alive") != 3 {
			t.Fatalf("members from %s after the rotation: exit %d\n%s%s", p.id, code, out, errOut)
		}
	}
	startOutsider(t, rationd, rationctl, procs, ca, tlsArgs, k1File)
}

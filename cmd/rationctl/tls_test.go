package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
)

// tlsNode is the certificate files of one server, at stable paths that a
// test may overwrite before a SIGHUP.
type tlsNode struct{ cert, key string }

// startTLSCluster starts three rationd processes with mutual TLS and
// hostname verification (each its own server certificate from ca) plus
// extra flags, and waits until rationctl, with a client certificate, sees
// a leader and three healthy voters.
func startTLSCluster(t *testing.T, rationd, rationctl string, ca *testtls.CA, extra func(i int) []string) ([]*serverProc, []tlsNode, []string) {
	t.Helper()
	dir := t.TempDir()
	nodes := make([]tlsNode, 3)
	for i := range nodes {
		c := ca.Server("ration")
		nodes[i] = tlsNode{cert: filepath.Join(dir, fmt.Sprintf("node%d.pem", i+1)), key: filepath.Join(dir, fmt.Sprintf("node%d-key.pem", i+1))}
		testtls.CopyFile(t, c.CertFile, nodes[i].cert)
		testtls.CopyFile(t, c.KeyFile, nodes[i].key)
	}
	procs := startClusterArgs(t, rationd, func(i int) []string {
		args := []string{"--tls-ca-file", ca.File, "--tls-cert-file", nodes[i].cert, "--tls-key-file", nodes[i].key, "--tls-verify-server-hostname"}
		if extra != nil {
			args = append(args, extra(i)...)
		}
		return args
	})
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.grpcAddr)
	}
	cl := ca.Client("operator")
	tlsArgs := []string{"--servers", strings.Join(addrs, ","), "--tls-ca-file", ca.File, "--tls-cert-file", cl.CertFile,
		"--tls-key-file", cl.KeyFile, "--tls-server-name", tlsutil.ServerName("ration")}
	waitFor(t, 60*time.Second, "a leader and 3 healthy voters over TLS", func() (bool, string) {
		out, errOut, code := ctl(t, rationctl, append([]string{"status", "--json"}, tlsArgs...)...)
		if code != 0 {
			return false, fmt.Sprintf("exit %d: %s", code, errOut)
		}
		var st statusJSON
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		healthy := 0
		for _, s := range st.Servers {
			if s.Suffrage == "voter" && s.Healthy {
				healthy++
			}
		}
		return st.Leader != "" && healthy == 3, out
	})
	return procs, nodes, tlsArgs
}

// TestTLSClusterBinaries: real rationd processes with mutual TLS refuse a
// plaintext rationctl, a certificate of another CA, a server name that is
// not theirs, and a client certificate posing as a forwarding server; a
// SIGHUP makes a server present its new certificate.
func TestTLSClusterBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster; skipped with -short")
	}
	rationd, rationctl := buildBinaries(t)
	ca := testtls.NewCA(t, "ca")
	// SIGHUP only, so that the reload subtest sees the new certificate
	// come from the signal (cmd/rationd's TestTLSFilesReloaded covers
	// the files being watched).
	procs, nodes, tlsArgs := startTLSCluster(t, rationd, rationctl, ca, func(int) []string { return []string{"--tls-reload-interval", "0"} })
	servers := tlsArgs[:2]

	refused := func(t *testing.T, want string, args ...string) {
		t.Helper()
		_, errOut, code := ctl(t, rationctl, append([]string{"status", "--timeout", "3s"}, args...)...)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("rationctl status %v: exit %d, stderr:\n%s\nwant exit 1 and %q", args, code, errOut, want)
		}
	}
	t.Run("plaintext refused", func(t *testing.T) {
		refused(t, "a server with TLS refuses plaintext", servers...)
	})
	t.Run("another CA refused", func(t *testing.T) {
		other := testtls.NewCA(t, "other")
		oc := other.Client("intruder")
		// rationctl itself says so before dialling.
		_, errOut, code := ctl(t, rationctl, append(append([]string{"status"}, servers...), "--tls-ca-file", ca.File,
			"--tls-cert-file", oc.CertFile, "--tls-key-file", oc.KeyFile)...)
		if code != 2 || !strings.Contains(errOut, "is not signed by --tls-ca-file") {
			t.Fatalf("rationctl with a certificate of another CA: exit %d\n%s", code, errOut)
		}
		// The server refuses it: a client that trusts the cluster's CA
		// and presents a certificate of another.
		cfg := other.Store(oc).ClientConfig("")
		cfg.VerifyConnection = nil // accept the server; only the server's verdict matters
		conn, err := grpc.NewClient(procs[1].grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("Status with a certificate of another CA: %v, want Unavailable", err)
		}
	})
	t.Run("no client certificate refused", func(t *testing.T) {
		refused(t, "the server may have refused this client's certificate", append(append([]string(nil), servers...), "--tls-ca-file", ca.File)...)
	})
	t.Run("server hostname verified", func(t *testing.T) {
		args := append(append([]string(nil), tlsArgs[:len(tlsArgs)-1]...), "server.elsewhere.ration")
		refused(t, "not server.elsewhere.ration", args...)
		// The same through the environment.
		cmd := []string{"status", "--servers", servers[1]}
		t.Setenv(tlsCAEnv, ca.File)
		t.Setenv(tlsCertEnv, tlsArgs[5])
		t.Setenv(tlsKeyEnv, tlsArgs[7])
		t.Setenv(tlsServerNameEnv, tlsutil.ServerName("ration"))
		if out, errOut, code := ctl(t, rationctl, cmd...); code != 0 {
			t.Fatalf("status with RATION_TLS_*: exit %d\n%s%s", code, out, errOut)
		}
	})
	t.Run("client certificate cannot forward", func(t *testing.T) {
		cfg, err := tlsutil.ClientConfigFiles(tlsutil.Files{CA: ca.File, Cert: tlsArgs[5], Key: tlsArgs[7]}, tlsutil.ServerName("ration"))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(procs[0].grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{}); err != nil {
			t.Fatalf("Status with a client certificate: %v", err)
		}
		fctx := metadata.AppendToOutgoingContext(ctx, "ration-forward-hops", "1")
		_, err = api.NewAdminClient(conn).ListPolicies(fctx, &api.ListPoliciesRequest{})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a forwarded call with a client certificate: %v, want PermissionDenied", err)
		}
	})
	t.Run("client certificate refused on raft", func(t *testing.T) {
		// A TLS handshake with a client certificate to the Raft port: the
		// server refuses it (the client sees it on its first read).
		cfg, err := tlsutil.ClientConfigFiles(tlsutil.Files{CA: ca.File, Cert: tlsArgs[5], Key: tlsArgs[7]}, "")
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.Dial("tcp", procs[0].raftAddr, cfg)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Write([]byte{0})
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), "tls") {
			t.Fatalf("Raft port with a client certificate: %v, want a TLS alert", err)
		}
	})
	t.Run("reload on SIGHUP", func(t *testing.T) {
		fresh := ca.Server("ration")
		testtls.CopyFile(t, fresh.CertFile, nodes[0].cert)
		testtls.CopyFile(t, fresh.KeyFile, nodes[0].key)
		serial := func() string {
			cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
			c, err := tls.Dial("tcp", procs[0].grpcAddr, cfg)
			if err != nil {
				return "dial: " + err.Error()
			}
			defer c.Close()
			return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
		}
		if got := serial(); got == fresh.Leaf.SerialNumber.String() {
			t.Fatalf("the new certificate is served before SIGHUP")
		}
		if err := procs[0].cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "the new certificate served after SIGHUP", func() (bool, string) {
			got := serial()
			return got == fresh.Leaf.SerialNumber.String(), "serial " + got
		})
		if !procs[0].running() {
			t.Fatal("rationd exited on SIGHUP")
		}
		log, _ := os.ReadFile(procs[0].logPath)
		if !strings.Contains(string(log), "TLS certificate reloaded") {
			t.Errorf("no reload in the log:\n%s", log)
		}
		// The cluster still works over the new certificate.
		if out, errOut, code := ctl(t, rationctl, append([]string{"status", "--servers", procs[0].grpcAddr}, tlsArgs[2:]...)...); code != 0 {
			t.Fatalf("status after the reload: exit %d\n%s%s", code, out, errOut)
		}
	})
}

// TestEdgeTLSBinary: rationd edge dials a mutual-TLS cluster with its
// certificate and serves Envoy's RLS and its HTTP port with mutual TLS;
// plaintext callers are refused there too.
func TestEdgeTLSBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-process cluster and an edge; skipped with -short")
	}
	rationd, rationctl := buildBinaries(t)
	ca := testtls.NewCA(t, "ca")
	_, _, tlsArgs := startTLSCluster(t, rationd, rationctl, ca, nil)
	dir := t.TempDir()
	envoyFile := filepath.Join(dir, "shop.yaml")
	if err := os.WriteFile(envoyFile, []byte(edgeEnvoyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	pols, errOut, code := ctl(t, rationctl, "policy", "import", "--envoy", envoyFile)
	if code != 0 {
		t.Fatalf("policy import: %d %s", code, errOut)
	}
	polFile := filepath.Join(dir, "pols.yaml")
	if err := os.WriteFile(polFile, []byte(pols), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := ctl(t, rationctl, append([]string{"policy", "apply", "-f", polFile}, tlsArgs...)...); code != 0 {
		t.Fatalf("policy apply: %d %s%s", code, out, errOut)
	}

	edgeCert := ca.Issue(testtls.CertOptions{Name: "edge", Server: true, DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	addrs := freeLoopbackAddrs(t, 2)
	logPath := filepath.Join(dir, "edge.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	edge := exec.Command(rationd, "edge", "--servers", tlsArgs[1], "--grpc-addr", addrs[0], "--http-addr", addrs[1],
		"--envoy-config", envoyFile, "--first-lease-wait", "30s", "--envoy-config-reload", "0",
		"--tls-ca-file", ca.File, "--tls-cert-file", edgeCert.CertFile, "--tls-key-file", edgeCert.KeyFile, "--tls-verify-server-hostname")
	edge.Stdout, edge.Stderr = logFile, logFile
	if err := edge.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = edge.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = edge.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- edge log:\n%s", b)
		}
	})

	envoy := ca.Client("envoy")
	cfg, err := tlsutil.ClientConfigFiles(envoy.Files(ca), "")
	if err != nil {
		t.Fatal(err)
	}
	httpsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	waitFor(t, 30*time.Second, "edge /readyz over mutual TLS", func() (bool, string) {
		resp, err := httpsClient.Get("https://" + addrs[1] + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, string(b)
	})
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + addrs[1] + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP /readyz answered 200 on a TLS edge")
		}
	}

	shouldRateLimit := func(creds credentials.TransportCredentials) (rlspb.RateLimitResponse_Code, error) {
		conn, err := grpc.NewClient(addrs[0], grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "shop",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "acme"}}}}})
		return r.GetOverallCode(), err
	}
	if code, err := shouldRateLimit(credentials.NewTLS(cfg)); err != nil || code != rlspb.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit over mutual TLS: %v %v, want OK", code, err)
	}
	if _, err := shouldRateLimit(insecure.NewCredentials()); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext ShouldRateLimit: %v, want Unavailable", err)
	}
}

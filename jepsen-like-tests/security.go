//go:build jepsen && linux

package jepsen

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Transport security of a run (docs/security.md): unless RunConfig.Plaintext, the
// harness makes a CA for the run with crypto/x509 (internal/testtls) and a
// certificate for every process, writes them under <run dir>/tls, and
// starts every process with mutual TLS and server-name verification on
// every link: the servers' gRPC and Raft ports (and forwarded calls
// between servers), each replica's connections to the servers (also
// through the delay proxies, which forward the TLS bytes unchanged), each
// `rationd edge`'s dial to the servers and its own listener (its driver
// presents a client certificate), rationctl and the harness's own Admin
// connections. Gossip is encrypted with a key made for the run.
//
// Every process's credentials come from one place: Env.procArgs (flags of
// rationd, rationd edge and the replica program), Env.ctlEnv (rationctl's
// environment) and Env.harnessDialOptions (the harness's gRPC
// connections). ACL tokens go there too.

// clusterName is the run's --cluster-name: servers present
// server.jepsen.ration.
const clusterName = "jepsen"

// role is what a process is, for its credentials.
type role int

const (
	roleServer  role = iota // rationd (n1 … n4)
	roleReplica             // the replica program with --servers
	roleEdge                // rationd edge
	roleDriver              // the replica program with --edge (an edge's driver)
)

// security is a run's TLS material: the CA and each certificate's files,
// by process name ("harness" and "rationctl" for the harness's own).
type security struct {
	ca        string
	certs     map[string]tlsutil.Files
	gossipKey string // file with the run's base64 gossip key
	// dial is the harness's client TLS config (certificate "harness",
	// servers' name checked).
	dial *tls.Config
	// acl is the run's ACL tokens (acl.go).
	acl *aclTokens
}

// edgeServerName is the DNS name an edge's certificate carries for its
// listener (its driver checks it); not a server's name, so the edge
// cannot pose as one.
func edgeServerName(edge string) string { return edge + ".edge.ration" }

// newSecurity makes the run's CA and certificates: one per server (n4
// included), replica, edge and driver, plus the harness's and rationctl's
// client certificates, copied under dir/tls.
func newSecurity(t testing.TB, dir string, cfg RunConfig) *security {
	t.Helper()
	ca := testtls.NewCA(t, "jepsen")
	tdir := filepath.Join(dir, "tls")
	if err := os.MkdirAll(tdir, 0o700); err != nil {
		t.Fatal(err)
	}
	copyTo := func(src, name string) string {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(tdir, name)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	s := &security{ca: copyTo(ca.File, "ca.pem"), certs: map[string]tlsutil.Files{}, acl: &aclTokens{dir: tdir}}
	add := func(name string, c testtls.Cert) {
		s.certs[name] = tlsutil.Files{CA: s.ca, Cert: copyTo(c.CertFile, name+".pem"), Key: copyTo(c.KeyFile, name+"-key.pem")}
	}
	for _, srv := range append(append([]string{}, cfg.Servers...), "n4") {
		add(srv, ca.Issue(testtls.CertOptions{Name: srv, Server: true, DNSNames: []string{tlsutil.ServerName(clusterName)}}))
	}
	for _, r := range cfg.Replicas {
		add(r, ca.Client(r))
	}
	for _, ed := range cfg.Edges {
		// Server usage for its listener, under a name that is not a
		// server's; client usage for its dial to the servers.
		add(ed, ca.Issue(testtls.CertOptions{Name: ed, Server: true, DNSNames: []string{edgeServerName(ed)}}))
		add(edgeDriver(ed), ca.Client(edgeDriver(ed)))
	}
	add("harness", ca.Client("harness"))
	// The Raft probe's: a server's name, as only servers may dial Raft.
	add("raft-probe", ca.Issue(testtls.CertOptions{Name: "raft-probe", Server: true, DNSNames: []string{tlsutil.ServerName(clusterName)}}))
	add("rationctl", ca.Client("rationctl"))
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	s.gossipKey = filepath.Join(tdir, "gossip.key")
	if err := os.WriteFile(s.gossipKey, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if s.dial, err = tlsutil.ClientConfigFiles(s.certs["harness"], tlsutil.ServerName(clusterName)); err != nil {
		t.Fatalf("harness TLS: %v", err)
	}
	return s
}

// tlsOn reports whether the run uses TLS.
func (e *Env) tlsOn() bool { return e.sec != nil }

// procArgs are the credential flags of process name in role r (nil for a
// plaintext run). Every rationd, rationd edge and replica command line
// gets them; an ACL token flag belongs here.
func (e *Env) procArgs(r role, name string) []string {
	if e.sec == nil {
		return nil
	}
	f, ok := e.sec.certs[name]
	if !ok {
		e.t.Fatalf("no certificate for %s", name)
	}
	files := []string{"--tls-ca-file", f.CA, "--tls-cert-file", f.Cert, "--tls-key-file", f.Key}
	switch r {
	case roleServer:
		return append(files, "--tls-verify-server-hostname", "--cluster-name", clusterName, "--gossip-key-file", e.sec.gossipKey, "--acl-enabled")
	case roleEdge:
		return append(files, "--tls-verify-server-hostname", "--cluster-name", clusterName, "--token-file", e.tokenFile(name))
	case roleReplica:
		return append(files, "--tls-server-name", tlsutil.ServerName(clusterName), "--token-file", e.tokenFile(name))
	case roleDriver:
		return append(files, "--tls-server-name", edgeServerName(strings.TrimSuffix(name, edgeDriver(""))))
	}
	e.t.Fatalf("unknown role %d for %s", r, name)
	return nil
}

// ctlEnv is rationctl's environment beyond the harness's own: its TLS
// settings (RATION_TLS_*) and the operator's ACL token.
func (e *Env) ctlEnv() []string {
	if e.sec == nil {
		return nil
	}
	return append(e.ctlTLSEnv(), "RATION_TOKEN_FILE="+e.tokenFile("operator"))
}

// ctlTLSEnv is rationctl's TLS environment alone (no token).
func (e *Env) ctlTLSEnv() []string {
	if e.sec == nil {
		return nil
	}
	f := e.sec.certs["rationctl"]
	return []string{"RATION_TLS_CA_FILE=" + f.CA, "RATION_TLS_CERT_FILE=" + f.Cert, "RATION_TLS_KEY_FILE=" + f.Key,
		"RATION_TLS_SERVER_NAME=" + tlsutil.ServerName(clusterName)}
}

// harnessDialOptions are the options of the harness's connections to the
// servers' Admin API (status, leases, membership, policies). Per-RPC
// credentials (an ACL token) belong here.
func (e *Env) harnessDialOptions() []grpc.DialOption {
	if e.sec == nil {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(e.sec.dial)), grpc.WithPerRPCCredentials(harnessToken{e.sec.acl})}
}

// securityLine is the run log's and timeline's statement of what is on.
func (e *Env) securityLine() string {
	if e.sec == nil {
		return "transport security OFF: every link plaintext (RunConfig.Plaintext)"
	}
	return fmt.Sprintf("transport security ON: mutual TLS on every gRPC, Raft, forwarding and edge link, servers verified as %s; gossip encrypted; ACLs on (every process with its own token); certificates and tokens made for the run in %s",
		tlsutil.ServerName(clusterName), filepath.Dir(e.sec.ca))
}

// checkPlaintextRefused is the run's check that TLS is in force: on every
// server's gRPC port a plaintext Status call must fail in the transport
// (Unavailable: the handshake is refused), while the same call over the
// harness's TLS reaches the server; on every Raft port a plaintext
// AppendEntries must fail while one over TLS with a server's certificate
// is answered; and rationctl without TLS settings must fail where it
// succeeds with them.
func (e *Env) checkPlaintextRefused() CheckerResult {
	res := CheckerResult{Name: "plaintext-refused", Expected: ExpectPass}
	var errs []error
	for _, s := range e.cfg.Servers {
		if err := plaintextRefused(e.addr(s, grpcPort), e.harnessDialOptions(), 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
		}
	}
	probe, err := tlsutil.ClientConfigFiles(e.sec.certs["raft-probe"], tlsutil.ServerName(clusterName))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range e.cfg.Servers {
		if err := raftPlaintextRefused(e.addr(s, raftPort), probe, 10*time.Second); err != nil {
			errs = append(errs, fmt.Errorf("%s Raft: %w", s, err))
		}
	}
	if out, err := e.rationctlEnv(nil, "status", "--timeout", "3s"); err == nil {
		errs = append(errs, fmt.Errorf("rationctl status without TLS settings succeeded: %s", out))
	}
	if out, err := e.rationctl("status"); err != nil {
		errs = append(errs, fmt.Errorf("rationctl status with TLS settings failed (twin of the refusal): %w: %s", err, out))
	}
	res.OK = len(errs) == 0
	if res.OK {
		res.Detail = fmt.Sprintf("plaintext gRPC and Raft refused by each of %v, and rationctl without TLS refused, while the same calls over TLS answered", e.cfg.Servers)
	} else {
		res.Detail = errors.Join(errs...).Error()
	}
	return res
}

// plaintextRefused dials addr twice: with tlsOpts a Status call must reach
// the server (any answer but Unavailable: a handshake that completed), and
// in plaintext it must fail with Unavailable (nothing answered it). The
// twin is retried for up to within, so a slow server does not decide it.
func plaintextRefused(addr string, tlsOpts []grpc.DialOption, within time.Duration) error {
	call := func(opts []grpc.DialOption) error {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = api.NewAdminClient(conn).Status(ctx, &api.StatusRequest{})
		return err
	}
	var last error
	err := pollUntil(within, func() error {
		if err := call(tlsOpts); status.Code(err) == codes.Unavailable || status.Code(err) == codes.DeadlineExceeded {
			last = fmt.Errorf("the TLS twin did not reach the server: %w", err)
			return last
		}
		return nil
	})
	if err != nil {
		return last
	}
	err = call([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
	if status.Code(err) != codes.Unavailable {
		return fmt.Errorf("a plaintext Status call was answered (%w), want the connection refused", err)
	}
	return nil
}

// raftPlaintextRefused sends one harmless AppendEntries (term 0, refused
// by the receiver's term check, no effect on its state) to a Raft port
// through a real NetworkTransport: over TLS with cfg it must be answered
// (retried for up to within), in plaintext it must fail.
func raftPlaintextRefused(addr string, cfg *tls.Config, within time.Duration) error {
	var last error
	if err := pollUntil(within, func() error {
		if err := raftProbe(addr, cfg); err != nil {
			last = fmt.Errorf("the TLS twin was not answered: %w", err)
			return last
		}
		return nil
	}); err != nil {
		return last
	}
	if err := raftProbe(addr, nil); err == nil {
		return errors.New("a plaintext AppendEntries was answered, want the connection refused")
	}
	return nil
}

// raftProbe sends the AppendEntries to addr, dialling with cfg (nil:
// plaintext); nil when the peer answered.
func raftProbe(addr string, cfg *tls.Config) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // the transport's own address; nothing dials it
	if err != nil {
		return err
	}
	tr := raft.NewNetworkTransport(probeStream{Listener: ln, cfg: cfg}, 1, 3*time.Second, io.Discard)
	defer tr.Close()
	var resp raft.AppendEntriesResponse
	return tr.AppendEntries("probe", raft.ServerAddress(addr), &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte(ln.Addr().String())}}, &resp)
}

type probeStream struct {
	net.Listener
	cfg *tls.Config
}

func (s probeStream) Dial(a raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.cfg == nil {
		return d.Dial("tcp", string(a))
	}
	return tls.DialWithDialer(d, "tcp", string(a), s.cfg)
}

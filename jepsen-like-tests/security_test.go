//go:build jepsen && linux

package jepsen

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// serve runs a real gRPC server with no services on a loopback port
// (every call answers Unimplemented once it reaches it) and returns its
// address.
func serve(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

// TestPlaintextRefusedCheck: the run's plaintext-refused check passes
// against a mutual-TLS server, and fails (its negative controls) against
// a server that answers plaintext and against one that does not answer at
// all (a refusal must not be a dead server).
func TestPlaintextRefusedCheck(t *testing.T) {
	ca := testtls.NewCA(t, "check")
	srv := ca.Store(ca.Server(clusterName))
	cli := ca.Store(ca.Client("harness"))
	tlsOpts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cli.ClientConfig(tlsutil.ServerName(clusterName))))}
	plainOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}

	tlsAddr := serve(t, grpc.Creds(credentials.NewTLS(srv.ServerConfig(""))))
	if err := plaintextRefused(tlsAddr, tlsOpts, 10*time.Second); err != nil {
		t.Errorf("mutual-TLS server: %v", err)
	}

	plainAddr := serve(t)
	if err := plaintextRefused(plainAddr, plainOpts, 10*time.Second); err == nil || !strings.Contains(err.Error(), "plaintext Status call was answered") {
		t.Errorf("plaintext server: got %v, want the plaintext answer reported", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if err := plaintextRefused(dead, tlsOpts, time.Second); err == nil || !strings.Contains(err.Error(), "TLS twin did not reach") {
		t.Errorf("no server: got %v, want the TLS twin's failure", err)
	}
}

// raftServer runs a real raft.NetworkTransport on a loopback port, over
// TLS with cfg (nil: plaintext), answering every AppendEntries as a
// follower with a newer term would; it returns the address.
func raftServer(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg != nil {
		ln = tls.NewListener(ln, cfg)
	}
	tr := raft.NewNetworkTransport(probeStream{Listener: ln}, 1, 3*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	go func() {
		for rpc := range tr.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 5}, nil)
		}
	}()
	return ln.Addr().String()
}

// TestRaftPlaintextRefusedCheck: the Raft half of the check passes against
// a TLS Raft port and fails against a plaintext one and a dead one.
func TestRaftPlaintextRefusedCheck(t *testing.T) {
	ca := testtls.NewCA(t, "check")
	srv := ca.Store(ca.Server(clusterName))
	probe := ca.Store(ca.Server(clusterName)).ClientConfig(tlsutil.ServerName(clusterName))
	if err := raftPlaintextRefused(raftServer(t, srv.ServerConfig(tlsutil.ServerName(clusterName))), probe, 10*time.Second); err != nil {
		t.Errorf("TLS Raft port: %v", err)
	}
	if err := raftPlaintextRefused(raftServer(t, nil), nil, 10*time.Second); err == nil || !strings.Contains(err.Error(), "plaintext AppendEntries was answered") {
		t.Errorf("plaintext Raft port: got %v, want the plaintext answer reported", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	if err := raftPlaintextRefused(dead, probe, time.Second); err == nil || !strings.Contains(err.Error(), "TLS twin was not answered") {
		t.Errorf("no Raft port: got %v, want the TLS twin's failure", err)
	}
}

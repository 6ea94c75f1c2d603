//go:build jepsen && linux

package jepsen

import (
	"net"
	"strings"
	"testing"
	"time"

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

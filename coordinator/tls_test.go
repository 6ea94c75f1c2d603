package coordinator_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tlsCluster starts three servers with mutual TLS and server hostname
// verification, each with its own server certificate from ca.
func tlsCluster(t *testing.T, ca *testtls.CA, clientTLS *tls.Config) (*testcluster.Cluster, []testtls.Cert, []*tlsutil.Store) {
	t.Helper()
	stores := make([]*tlsutil.Store, 8)
	certs := make([]testtls.Cert, 8)
	for i := range stores {
		certs[i] = ca.Server("ration")
		stores[i] = ca.Store(certs[i])
	}
	return testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), testcluster.WithClientTLS(clientTLS),
		testcluster.WithConfig(func(i int, c *coordinator.Config) {
			c.TLS = stores[i]
			c.VerifyServerHostname = true
		})), certs, stores
}

func dialTLS(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestTLSCluster: a cluster elects, replicates and forwards over mutual
// TLS; a plaintext client, a client of another CA, and a client
// certificate posing as a forwarding server are refused, and so is a
// client certificate on the Raft port.
func TestTLSCluster(t *testing.T) {
	ca := testtls.NewCA(t, "ca")
	name := tlsutil.ServerName("ration")
	clientStore := ca.Store(ca.Client("app"))
	c, certs, stores := tlsCluster(t, ca, clientStore.ClientConfig(name))
	leader := c.WaitForStableLeader(t)
	follower := c.Followers()[0]
	fi := c.Index(follower)

	// A client certificate reaches the leader through a follower: the
	// follower forwards with its server certificate.
	resp := retry(t, "acquire through a follower", func(ctx context.Context) (*api.LeaseResponse, error) {
		return c.Client(fi).Acquire(ctx, acquireReq(caller("tls-app", 1, 1), key("api", "acme")))
	})
	if len(resp.GetLeases()) != 1 {
		t.Fatalf("acquire over TLS: %v", resp)
	}

	expectCode := func(t *testing.T, what string, want codes.Code, err error) {
		t.Helper()
		if status.Code(err) != want {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	addr := follower.GRPCAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("plaintext refused", func(t *testing.T) {
		_, err := api.NewAdminClient(dialTLS(t, addr, insecure.NewCredentials())).Status(ctx, &api.StatusRequest{})
		expectCode(t, "plaintext Status", codes.Unavailable, err)
	})
	t.Run("another CA refused", func(t *testing.T) {
		other := testtls.NewCA(t, "other")
		// Trusts the right CA, but its own certificate is from another.
		cfg := other.Store(other.Client("intruder")).ClientConfig("")
		cfg.VerifyConnection = clientStore.ClientConfig(name).VerifyConnection
		_, err := api.NewAdminClient(dialTLS(t, addr, credentials.NewTLS(cfg))).Status(ctx, &api.StatusRequest{})
		expectCode(t, "Status with a certificate of another CA", codes.Unavailable, err)
	})
	t.Run("client certificate cannot forward", func(t *testing.T) {
		// The same call, marked as forwarded, straight to the leader.
		conn := dialTLS(t, leader.GRPCAddr(), credentials.NewTLS(clientStore.ClientConfig(name)))
		fctx := metadata.AppendToOutgoingContext(ctx, coordinator.ForwardedMetadataKey, "1")
		_, err := api.NewLeasesClient(conn).Acquire(fctx, acquireReq(caller("tls-app", 1, 2), key("api", "acme")))
		expectCode(t, "forwarded Acquire with a client certificate", codes.PermissionDenied, err)
		_, err = api.NewAdminClient(conn).Status(metadata.AppendToOutgoingContext(ctx, coordinator.FanoutMetadataKey, "1"), &api.StatusRequest{})
		expectCode(t, "fan-out call with a client certificate", codes.PermissionDenied, err)
		// Control: a server's certificate may forward.
		sconn := dialTLS(t, leader.GRPCAddr(), credentials.NewTLS(ca.Store(ca.Server("ration")).ClientConfig(name)))
		_, err = api.NewLeasesClient(sconn).Acquire(fctx, acquireReq(caller("tls-app", 1, 2), key("api", "acme")))
		expectCode(t, "forwarded Acquire with a server certificate", codes.OK, err)
	})
	t.Run("raft port", func(t *testing.T) {
		raftAddr := raft.ServerAddress(c.Config(c.Index(leader)).RaftAddr)
		for _, tc := range []struct {
			name string
			cfg  *tls.Config
			ok   bool
		}{
			{"server certificate", ca.Store(ca.Server("ration")).ClientConfig(name), true},
			{"client certificate", clientStore.ClientConfig(""), false},
			{"server certificate of another cluster", ca.Store(ca.Server("other")).ClientConfig(""), false},
			{"plaintext", nil, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := raftProbe(t, raftAddr, tc.cfg)
				if (err == nil) != tc.ok {
					t.Fatalf("AppendEntries with %s: %v, want ok=%v", tc.name, err, tc.ok)
				}
			})
		}
	})
	t.Run("reload", func(t *testing.T) {
		// The leader's certificate files are replaced and its Store
		// reloaded (what SIGHUP does in rationd): new gRPC and Raft
		// connections get the new certificate.
		li := c.Index(leader)
		fresh := ca.Server("ration")
		testtls.CopyFile(t, fresh.CertFile, certs[li].CertFile)
		testtls.CopyFile(t, fresh.KeyFile, certs[li].KeyFile)
		if err := stores[li].Reload(); err != nil {
			t.Fatal(err)
		}
		served := func(addr string) string {
			cfg := ca.Store(ca.Server("ration")).ClientConfig(name)
			conn, err := tls.Dial("tcp", addr, cfg)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			defer conn.Close()
			return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
		}
		want := fresh.Leaf.SerialNumber.String()
		if got := served(leader.GRPCAddr()); got != want {
			t.Errorf("gRPC serves serial %s after the reload, want %s", got, want)
		}
		if got := served(c.Config(li).RaftAddr); got != want {
			t.Errorf("Raft serves serial %s after the reload, want %s", got, want)
		}
		// And the cluster still replicates and forwards over it.
		retry(t, "acquire after the reload", func(ctx context.Context) (*api.LeaseResponse, error) {
			return c.Client(fi).Acquire(ctx, acquireReq(caller("tls-app", 1, 3), key("api", "acme")))
		})
	})
}

// raftProbe sends one harmless AppendEntries (term 0: refused by the
// receiver's term check) to addr through a NetworkTransport dialling with
// cfg (nil: plaintext). It returns the transport's error: nil when the
// peer answered.
func raftProbe(t *testing.T, addr raft.ServerAddress, cfg *tls.Config) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(probeStream{Listener: ln, cfg: cfg}, 1, 10*time.Second, nil)
	defer tr.Close()
	var resp raft.AppendEntriesResponse
	return tr.AppendEntries("probe", addr, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte(ln.Addr().String())}}, &resp)
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

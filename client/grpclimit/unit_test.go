package grpclimit_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/grpclimit"
	"github.com/ration-dev/ration/lease"
)

func tlsPeer(ctx context.Context, state tls.ConnectionState) context.Context {
	return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, AuthInfo: credentials.TLSInfo{State: state}})
}

// TestPrincipalSources: WithPrincipal first, then a verified TLS client
// certificate's subject; an unverified certificate and caller metadata
// name nobody.
func TestPrincipalSources(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "replica-1", Organization: []string{"northwind"}}}
	verified := tlsPeer(context.Background(), tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}})
	unverified := tlsPeer(context.Background(), tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}})
	spoofed := metadata.NewIncomingContext(context.Background(), metadata.Pairs("tenant", "acme", "x-principal", "acme"))

	if p, ok := grpclimit.TLSPrincipal(verified); !ok || p != "CN=replica-1,O=northwind" {
		t.Errorf("verified certificate: %q, %v", p, ok)
	}
	if p, ok := grpclimit.TLSPrincipal(unverified); ok {
		t.Errorf("unverified certificate named %q", p)
	}
	for name, tc := range map[string]struct {
		ctx  context.Context
		want string
	}{
		"verified TLS":            {verified, "CN=replica-1,O=northwind"},
		"unverified TLS":          {unverified, ""},
		"metadata":                {spoofed, ""},
		"auth interceptor":        {grpclimit.WithPrincipal(spoofed, "globex"), "globex"},
		"auth interceptor wins":   {grpclimit.WithPrincipal(verified, "globex"), "globex"},
		"nothing":                 {context.Background(), ""},
		"insecure peer, metadata": {peer.NewContext(spoofed, &peer.Peer{}), ""},
	} {
		if got := grpclimit.DefaultPrincipal(tc.ctx); got != tc.want {
			t.Errorf("%s: DefaultPrincipal = %q, want %q", name, got, tc.want)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want time.Duration
		ok   bool
	}{
		{0, time.Millisecond, true},
		{1, time.Millisecond, true},
		{time.Millisecond, time.Millisecond, true},
		{time.Millisecond + 1, 2 * time.Millisecond, true},
		{1234567 * time.Microsecond, 1235 * time.Millisecond, true},
		{time.Hour, time.Hour, true},
		{lease.RetryNever, 0, false},
	} {
		got, ok := grpclimit.RetryDelay(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("RetryDelay(%v) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && got < tc.in {
			t.Errorf("RetryDelay(%v) = %v is shorter", tc.in, got)
		}
	}
}

func TestCostFuncs(t *testing.T) {
	ctx := context.Background()
	table := map[string]int64{"/s.S/Big": 10, "/s.S/Free": 0}
	cost := grpclimit.CostTable(table, 2)
	table["/s.S/Big"] = 99 // the table was copied
	for m, want := range map[string]int64{"/s.S/Big": 10, "/s.S/Free": 0, "/s.S/Other": 2} {
		if got := cost(ctx, m); got != want {
			t.Errorf("CostTable(%s) = %d, want %d", m, got, want)
		}
	}
	if got := grpclimit.ConstCost(7)(ctx, "/x.X/Y"); got != 7 {
		t.Errorf("ConstCost = %d", got)
	}
}

func TestNewValidates(t *testing.T) {
	cl, err := client.New(context.Background(), client.Config{Servers: []string{"127.0.0.1:1"}, ClientID: "validate"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for name, cfg := range map[string]grpclimit.Config{
		"no client":      {Layers: []grpclimit.Layer{{Policy: "p"}}},
		"no layers":      {Client: cl},
		"unnamed policy": {Client: cl, Layers: []grpclimit.Layer{{}}},
	} {
		if _, err := grpclimit.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := grpclimit.New(grpclimit.Config{Client: cl, Layers: []grpclimit.Layer{{Policy: "p"}}}); err != nil {
		t.Errorf("minimal config: %v", err)
	}
}

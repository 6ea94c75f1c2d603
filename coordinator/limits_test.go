package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/internal/testtls"
	"github.com/ration-dev/ration/internal/tlsutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// The lease API limits (coordinator/limits.go) over real gRPC on an
// in-process cluster. The limits are tiny (a burst of 5, then one call
// every 10 s), so a flood of 60 calls is refused however slowly this
// machine runs it, and a well-behaved client, which makes fewer calls
// than the burst, is never refused however the two interleave.

const (
	limitRPS   = 0.1
	limitBurst = 5
	floodCalls = 60
)

// dial opens a connection of its own (its own peer address) to addr.
func dial(t *testing.T, addr string) api.LeasesClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewLeasesClient(conn)
}

// flood makes n Acquire calls on lc, the i-th as clientID(i) (one that
// fails Unavailable, as in an election, again), and returns the
// ResourceExhausted refusals.
func flood(t *testing.T, lc api.LeasesClient, n int, clientID func(i int) string) []error {
	t.Helper()
	var refused []error
	for i := 0; i < n; i++ {
		req := acquireReq(caller(clientID(i), 1, uint64(i+1)), key("api", "flood"))
		_, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.LeaseResponse, error) { return lc.Acquire(ctx, req) })
		switch status.Code(err) {
		case codes.OK:
		case codes.ResourceExhausted:
			refused = append(refused, err)
		default:
			t.Fatalf("flood call %d: %v", i, err)
		}
	}
	return refused
}

// wellBehaved acquires a lease as id on lc and renews it three times,
// and fails the test unless every call is granted.
func wellBehaved(t *testing.T, lc api.LeasesClient, id string) {
	t.Helper()
	resp, err := lc.Acquire(rpcCtx(t), acquireReq(caller(id, 1, 1), key("api", id)))
	if err != nil || resp.GetLeases()[0].GetGrant() == nil {
		t.Fatalf("%s: acquire: %v %v", id, err, resp)
	}
	leaseID := resp.GetLeases()[0].GetGrant().GetLeaseId()
	for seq := uint64(2); seq <= 4; seq++ {
		r, err := lc.Renew(rpcCtx(t), &api.RenewRequest{Caller: caller(id, 1, seq), Keys: []*api.RenewKey{{Key: key("api", id), LeaseId: leaseID,
			Demand: &api.Demand{RateMilliPerSec: 10_000, BurstMilli: 20_000}}}})
		if err != nil || r.GetLeases()[0].GetGrant() == nil {
			t.Fatalf("%s: renewal %d refused while another client floods: %v %v", id, seq-1, err, r)
		}
	}
}

func limitedCluster(t *testing.T, n int, set func(*coordinator.Config)) (*testcluster.Cluster, *coordinator.Server) {
	c := testcluster.New(t, n, testcluster.WithPolicies(testPolicies), testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { set(cfg) }))
	return c, c.WaitForLeader(t)
}

func wantLimitMessage(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(status.Convert(err).Message(), p) {
			t.Errorf("refusal %q does not say %q", status.Convert(err).Message(), p)
		}
	}
}

// A client ID that floods the leader is refused (ResourceExhausted naming
// the limit); a second client on the same leader keeps being granted and
// renewing. Negative control: with the limit off, the same flood is never
// refused.
func TestLeaseClientLimit(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("limit=%v", on), func(t *testing.T) {
			_, leader := limitedCluster(t, 1, func(cfg *coordinator.Config) {
				cfg.LeaseConnRPS = 0
				cfg.LeaseClientRPS, cfg.LeaseClientBurst = limitRPS, limitBurst
				// The message names the limit as the command that set it
				// does (rationd: its flag).
				cfg.SettingName = func(field string) string {
					if field == "LeaseClientRPS" {
						return "--lease-client-rps"
					}
					return ""
				}
				if !on {
					cfg.LeaseClientRPS = 0
				}
			})
			flooder := dial(t, leader.GRPCAddr())
			retry(t, "first acquire", func(ctx context.Context) (*api.LeaseResponse, error) {
				return dial(t, leader.GRPCAddr()).Acquire(ctx, acquireReq(caller("warmup", 1, 1), key("api", "warmup")))
			})
			refused := flood(t, flooder, floodCalls/2, func(int) string { return "flooder" })
			if !on {
				if len(refused) > 0 {
					t.Fatalf("limit off, yet %d flood calls were refused: %v", len(refused), refused[0])
				}
				return
			}
			if len(refused) < floodCalls/2-limitBurst-1 {
				t.Fatalf("%d of %d flood calls refused, want all but the burst %d", len(refused), floodCalls/2, limitBurst)
			}
			wantLimitMessage(t, refused[0], `client ID "flooder"`, "0.1 requests per second", "burst 5", "--lease-client-rps")
			// The flood goes on while the other client works.
			wellBehaved(t, dial(t, leader.GRPCAddr()), "good")
			if again := flood(t, flooder, floodCalls/2, func(int) string { return "flooder" }); len(again) < floodCalls/2-1 {
				t.Fatalf("the flooder was admitted again: %d of %d refused", len(again), floodCalls/2)
			}
			if n := leader.OpStats().LeaseLimited["client"]; n < uint64(len(refused)) {
				t.Errorf("LeaseLimited[client] = %d, want at least %d", n, len(refused))
			}
		})
	}
}

// A connection that floods under ever new client IDs is refused by the
// connection limit; a client on another connection keeps being served.
// Negative control: with the limit off, the same flood is never refused.
func TestLeaseConnLimit(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("limit=%v", on), func(t *testing.T) {
			_, leader := limitedCluster(t, 1, func(cfg *coordinator.Config) {
				cfg.LeaseClientRPS = 0
				cfg.LeaseConnRPS, cfg.LeaseConnBurst = limitRPS, limitBurst
				if !on {
					cfg.LeaseConnRPS = 0
				}
			})
			retry(t, "first acquire", func(ctx context.Context) (*api.LeaseResponse, error) {
				return dial(t, leader.GRPCAddr()).Acquire(ctx, acquireReq(caller("warmup", 1, 1), key("api", "warmup")))
			})
			flooder := dial(t, leader.GRPCAddr())
			refused := flood(t, flooder, floodCalls, func(i int) string { return fmt.Sprint("minted-", i) })
			if !on {
				if len(refused) > 0 {
					t.Fatalf("limit off, yet %d flood calls were refused: %v", len(refused), refused[0])
				}
				return
			}
			if len(refused) < floodCalls-limitBurst-1 {
				t.Fatalf("%d of %d flood calls refused, want all but the burst %d", len(refused), floodCalls, limitBurst)
			}
			wantLimitMessage(t, refused[0], "connection 127.0.0.1:", "0.1 requests per second", "(LeaseConnRPS)")
			wellBehaved(t, dial(t, leader.GRPCAddr()), "good")
			if n := leader.OpStats().LeaseLimited["conn"]; n < uint64(len(refused)) {
				t.Errorf("LeaseLimited[conn] = %d, want at least %d", n, len(refused))
			}
		})
	}
}

// The server that first receives a call counts it; the leader does not
// count a forwarded call again. One client ID makes a burst's worth of
// calls through each follower: every call is granted, though the leader
// sees twice its burst. Negative control: the same calls made to the
// leader directly are refused past the burst. In plaintext the leader
// knows a forwarding server by its gossip address; with TLS and
// --tls-verify-server-hostname, by its certificate.
func TestLeaseLimitCountsOnFirstServer(t *testing.T) {
	small := func(cfg *coordinator.Config) {
		cfg.LeaseConnRPS = 0
		cfg.LeaseClientRPS, cfg.LeaseClientBurst = limitRPS, spreadBurst
	}
	t.Run("plaintext", func(t *testing.T) {
		c, _ := limitedCluster(t, 3, small)
		countsOnFirstServer(t, c)
	})
	t.Run("tls", func(t *testing.T) {
		ca := testtls.NewCA(t, "ca")
		stores := make([]*tlsutil.Store, 8)
		for i := range stores {
			stores[i] = ca.Store(ca.Server("ration"))
		}
		client := ca.Store(ca.Client("app")).ClientConfig(tlsutil.ServerName("ration"))
		c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), testcluster.WithClientTLS(client),
			testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
				cfg.TLS, cfg.VerifyServerHostname = stores[i], true
				small(cfg)
			}))
		countsOnFirstServer(t, c)
	})
}

// spreadBurst and spreadCalls: each follower sees spreadCalls calls (and
// room for retries of those a leader change fails as Unavailable); the
// leader, if it counted them, would see more than its burst.
const (
	spreadBurst = 20
	spreadCalls = 12
)

func countsOnFirstServer(t *testing.T, c *testcluster.Cluster) {
	leader := c.WaitForStableLeader(t)
	c.WaitForFeatures(t)
	seq := uint64(0)
	for _, f := range c.Followers() {
		lc := c.Client(c.Index(f))
		for i := 0; i < spreadCalls; i++ {
			seq++
			req := acquireReq(caller("spread", 1, seq), key("api", "spread"))
			if _, err := testcluster.RetryUnavailable(func(ctx context.Context) (*api.LeaseResponse, error) { return lc.Acquire(ctx, req) }); err != nil {
				t.Fatalf("call %d through %s: %v (counted again by the leader?)", i+1, f.ID(), err)
			}
		}
	}
	if n := leader.OpStats().LeaseLimited["client"]; n != 0 {
		t.Fatalf("the leader refused %d forwarded calls", n)
	}
	refused := flood(t, c.Client(c.Index(leader)), 2*spreadBurst, func(int) string { return "direct" })
	if len(refused) < spreadBurst-1 {
		t.Fatalf("negative control: %d of %d direct calls refused, want all past the burst", len(refused), 2*spreadBurst)
	}
}

// However many client IDs call, the limiter holds at most
// LeaseLimiterMaxEntries buckets.
func TestLeaseLimiterMemoryBounded(t *testing.T) {
	const maxEntries = 50
	_, leader := limitedCluster(t, 1, func(cfg *coordinator.Config) {
		cfg.LeaseConnRPS = 0
		cfg.LeaseClientRPS, cfg.LeaseClientBurst, cfg.LeaseLimiterMaxEntries = 1000, 1000, maxEntries
	})
	lc := dial(t, leader.GRPCAddr())
	peak := 0
	for i := 0; i < 20*maxEntries; i++ {
		// No keys: refused InvalidArgument by validation, after the
		// limiter has counted the call (cheap: nothing reaches the log).
		_, err := lc.Acquire(rpcCtx(t), &api.AcquireRequest{Caller: caller(fmt.Sprint("id-", i), 1, 1)})
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("call %d: %v", i, err)
		}
		peak = max(peak, leader.OpStats().LeaseLimiterEntries["client"])
	}
	t.Logf("%d client IDs: at most %d buckets held (bound %d)", 20*maxEntries, peak, maxEntries)
	if peak > maxEntries {
		t.Fatalf("the limiter held %d buckets, more than its bound %d", peak, maxEntries)
	}
	if peak < maxEntries/2 {
		t.Fatalf("the limiter held at most %d buckets: was it counting?", peak)
	}
}

// The defaults validate, and each bad limit setting is refused by
// Config.Validate naming its flag.
func TestLeaseLimitConfigValidate(t *testing.T) {
	base := coordinator.TestConfig()
	base.ID, base.DataDir = "s", t.TempDir()
	base.RaftAddr, base.GRPCAddr, base.GossipAddr = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	d := coordinator.DefaultConfig()
	if d.LeaseClientRPS <= 0 || d.LeaseConnRPS < d.LeaseClientRPS || d.MaxConcurrentStreams == 0 {
		t.Errorf("defaults %v/%v/%v: want the limits on, a connection allowed at least one client's rate", d.LeaseClientRPS, d.LeaseConnRPS, d.MaxConcurrentStreams)
	}
	for _, c := range []struct {
		set  func(*coordinator.Config)
		want string
	}{
		{func(c *coordinator.Config) { c.LeaseClientRPS = -1 }, "LeaseClientRPS -1"},
		{func(c *coordinator.Config) { c.LeaseConnRPS = math.Inf(1) }, "LeaseConnRPS +Inf"},
		{func(c *coordinator.Config) { c.LeaseConnBurst = -1 }, "LeaseConnBurst -1"},
		{func(c *coordinator.Config) { c.LeaseLimiterMaxEntries = 0 }, "max entries"},
	} {
		cfg := base
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %s, got %v", c.want, err)
		}
	}
	off := base
	off.LeaseClientRPS, off.LeaseConnRPS, off.LeaseLimiterMaxEntries = 0, 0, 0
	if err := off.Validate(); err != nil {
		t.Errorf("limits off: %v", err)
	}
}

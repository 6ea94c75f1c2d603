package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// callMeter counts the lease calls each server receives first (not
// forwarded), per client ID and per second.
type callMeter struct {
	mu     sync.Mutex
	counts map[string]int // "server/client/second"
	peak   int
	peakAt string
}

func (m *callMeter) interceptor(server string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		r, ok := req.(interface{ GetCaller() *api.Caller })
		if ok && len(md.Get(coordinator.ForwardedMetadataKey)) == 0 {
			k := fmt.Sprintf("%s/%s/%d", server, r.GetCaller().GetClientId(), time.Now().Unix())
			m.mu.Lock()
			m.counts[k]++
			if m.counts[k] > m.peak {
				m.peak, m.peakAt = m.counts[k], k
			}
			m.mu.Unlock()
		}
		return h(ctx, req)
	}
}

// TestClientStaysUnderLeaseLimits: the client library, under load on
// many keys and across a leader failover (its retries), never reaches the
// default lease API limits (coordinator/limits.go): no call is refused,
// and the most calls one client makes to one server in a second stay
// far (10x) below the default per-client rate.
func TestClientStaysUnderLeaseLimits(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	meter := &callMeter{counts: map[string]int{}}
	c := testcluster.New(t, 3, testcluster.WithPolicies(steadyPolicy), testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
		cfg.GRPCServerOptions = append(cfg.GRPCServerOptions, grpc.ChainUnaryInterceptor(meter.interceptor(fmt.Sprint("s", i))))
	}))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	def := coordinator.DefaultConfig()
	if got := c.Config(0).LeaseClientRPS; got != def.LeaseClientRPS || c.Config(0).LeaseConnRPS != def.LeaseConnRPS {
		t.Fatalf("the cluster runs limits %v/%v, not the defaults", got, c.Config(0).LeaseConnRPS)
	}
	const clients, keys = 4, 100
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("replica-%d", i)})
		var lims []*client.Limiter
		for k := 0; k < keys; k++ {
			lims = append(lims, cl.Limiter("writes", client.Key{"tenant": fmt.Sprint("t-", k)}))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				lims[n%keys].AllowN(1)
				lims[0].AllowN(1) // one hot key
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// Every client renews its keys for a while (renew_after 400ms, 2s
	// leases), then the leader is killed and they carry on at the next.
	waitCalls := func(n int) {
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			meter.mu.Lock()
			defer meter.mu.Unlock()
			if len(meter.counts) < n {
				return fmt.Errorf("%d server-client-seconds seen", len(meter.counts))
			}
			return nil
		})
	}
	var limited uint64
	count := func(s *coordinator.Server) {
		st := s.OpStats()
		limited += st.LeaseLimited["client"] + st.LeaseLimited["conn"]
	}
	waitCalls(clients * 4)
	leader := c.WaitForLeader(t)
	c.Kill(c.Index(leader))
	count(leader) // its figures, final
	c.WaitForLeader(t)
	before := func() int { meter.mu.Lock(); defer meter.mu.Unlock(); return len(meter.counts) }()
	waitCalls(before + clients*4)
	for _, s := range c.Servers() {
		count(s)
	}
	meter.mu.Lock()
	peak, at := meter.peak, meter.peakAt
	meter.mu.Unlock()
	t.Logf("peak: %d lease calls in one second from one client to one server (%s); default limit %v/s (burst two seconds' worth)", peak, at, def.LeaseClientRPS)
	if limited > 0 {
		t.Fatalf("%d lease calls of the client library were refused by the default limits", limited)
	}
	if float64(peak) > def.LeaseClientRPS/10 {
		t.Fatalf("a client made %d calls in one second to one server, within 10x of the default limit %v/s", peak, def.LeaseClientRPS)
	}
}

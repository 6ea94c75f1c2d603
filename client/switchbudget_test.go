package client_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Tests of the switch budget (docs/design.md §3.4, "The switch budget"):
// promotions of keys decided remotely need a server's grant, from a
// budget per policy per server, so a storm of promotions from many
// clients is bounded for the whole cluster, not per client.

// stormRate is the servers' RemotePromotionRate in the storm: one grant
// per second per policy per server.
const stormRate = 1

// stormResult is what a promotion storm did.
type stormResult struct {
	servers   int
	remote    int           // keys remote when the storm started
	promoted  int64         // promotions (lease acquires) in the storm, forced ones aside
	forced    int64         // promotions because no server answered
	asks      int64         // promotions asked of the servers
	denials   int64         // of them refused
	elapsed   time.Duration // from the storm's start to the last count
	maxClient int64         // the most one client promoted in an evaluation
}

// bound is the most promotions the switch budget lets the cluster grant
// in the storm: S servers × ρ × (1 + t).
func (r stormResult) bound() float64 {
	return float64(r.servers) * stormRate * (1 + r.elapsed.Seconds())
}

// promotionStorm: 40 clients with no routing configured (the evaluation
// sped up) call one key at 2/s on a policy whose burst of 4 seats four of
// them, so most of them go remote (TestRemoteByDefaultThinKeysGoRemote);
// then every client calls it at 10/s, above PromoteRate, all at once:
// every remote key wants its lease back. The storm ends once every
// remote key has asked for its promotion and either all were promoted or
// the servers denied twice as many requests as there are remote keys.
func promotionStorm(t *testing.T) stormResult {
	t.Helper()
	c := testcluster.New(t, 3, testcluster.WithPolicies(remotePolicy),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.RemotePromotionRate = stormRate }))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	fast := client.EdgeRouting{Interval: 100 * time.Millisecond, PromoteAfter: 300 * time.Millisecond, DemoteAfter: 300 * time.Millisecond, Timeout: testcluster.DefaultWait}
	const n = 40
	cls := make([]*client.Client, n)
	lims := make([]*client.Limiter, n)
	for i := range cls {
		cls[i] = newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("pod-%02d", i), EdgeRouting: fast})
		lims[i] = cls[i].Limiter("trickle", client.Key{"tenant": "acme"})
	}
	sum := func() (s client.EdgeStats) {
		for _, cl := range cls {
			e := cl.EdgeStats()
			s.Remote += e.Remote
			s.Promotions += e.Promotions
			s.Forced += e.Forced
			s.PromotionAsks += e.PromotionAsks
			s.PromotionDenials += e.PromotionDenials
			s.MostPromoted = max(s.MostPromoted, e.MostPromoted)
		}
		return s
	}
	var period atomic.Int64
	period.Store(int64(500 * time.Millisecond))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range lims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(time.Duration(period.Load()))
			defer tk.Stop()
			cur := period.Load()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					l.AllowN(1)
					if p := period.Load(); p != cur {
						cur = p
						tk.Reset(time.Duration(p))
					}
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := sum(); s.Remote < n*3/4 {
			return fmt.Errorf("%d keys remote; want at least %d", s.Remote, n*3/4)
		}
		return nil
	})
	before := sum()
	start := time.Now()
	period.Store(int64(100 * time.Millisecond))
	var last client.EdgeStats
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		last = sum()
		asks, promoted := last.PromotionAsks-before.PromotionAsks, last.Promotions-before.Promotions
		if asks < int64(before.Remote) && promoted < int64(before.Remote) {
			return fmt.Errorf("%d of %d remote keys asked, %d promoted", asks, before.Remote, promoted)
		}
		if denied := last.PromotionDenials - before.PromotionDenials; promoted < int64(before.Remote) && denied < 2*int64(before.Remote) {
			return fmt.Errorf("%d of %d promoted, %d denied yet", promoted, before.Remote, denied)
		}
		return nil
	})
	forced := last.Forced - before.Forced
	return stormResult{servers: c.Len(), remote: before.Remote, promoted: last.Promotions - before.Promotions - forced, forced: forced,
		asks: last.PromotionAsks - before.PromotionAsks, denials: last.PromotionDenials - before.PromotionDenials,
		elapsed: time.Since(start), maxClient: last.MostPromoted}
}

// TestSwitchBudgetBoundsPromotionStorm: in the storm, the promotions
// (each a lease acquire) across all 40 clients stay within the servers'
// budget S·ρ·(1 + t), though each client alone would be allowed
// MaxSwitches (256) per 100 ms; the keys denied stay remote and ask again.
func TestSwitchBudgetBoundsPromotionStorm(t *testing.T) {
	r := promotionStorm(t)
	t.Logf("storm: %d remote keys, %d asks, %d denied, %d promoted (%d forced) in %v; budget bound %.1f", r.remote, r.asks, r.denials, r.promoted, r.forced, r.elapsed, r.bound())
	if float64(r.promoted) > r.bound() {
		t.Fatalf("%d promotions in %v, above the switch budget's %.1f (%d servers at %d/s)", r.promoted, r.elapsed, r.bound(), r.servers, stormRate)
	}
	if r.denials == 0 {
		t.Fatalf("no promotion denied in a storm of %d remote keys: the budget was not reached", r.remote)
	}
}

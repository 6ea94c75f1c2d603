package client_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// A roomy policy whose leases last 30s but are renewed every 200ms: a lease
// that leaves the cluster's listing within seconds was released, not
// expired.
const evictPolicies = `
policies:
  - name: tenants
    algorithm: token-bucket
    rate: 1000
    burst: 1000
    key: [tenant]
    lease: {duration: 30s, renew_after: 200ms}
`

// heldPolicies is evictPolicies without renewals while a test runs (the
// first comes at half the usable span, after about 15s). A renewal
// re-divides with the measured demand: after one probe the lease's cap
// shrinks to about one token, and the client's bucket with it, so an
// evicted lease would return about one token and a grant right after its
// release would start with little more than the pool minted since
// (r·elapsed: under 11 tokens within 11ms). Without renewals the lease
// keeps its whole cap until the eviction, so its release returns every
// unspent token and the next grant starts with them, however soon it
// comes.
const heldPolicies = `
policies:
  - name: tenants
    algorithm: token-bucket
    rate: 1000
    burst: 1000
    key: [tenant]
    lease: {duration: 30s, renew_after: 20s}
`

// evictionClient starts a client with the given IdleTimeout and a
// collector over it.
func evictionClient(t *testing.T, c *testcluster.Cluster, id string, idle time.Duration) (*client.Client, prometheus.Collector) {
	t.Helper()
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: id, IdleTimeout: idle,
		FirstLeaseWait: 10 * time.Second, Logger: testLogger(t, id)})
	return cl, client.NewCollector(cl)
}

// metric returns the value of a per-policy counter or gauge of col (0 if
// the series is absent).
func metric(t *testing.T, col prometheus.Collector, name, policy string) float64 {
	t.Helper()
	v, _ := client.LookupMetric(t, col, name, "policy", policy)
	return v
}

// clusterLease returns clientID's lease on the tenants policy for tenant,
// as the leader lists it now, or nil.
func clusterLease(t *testing.T, c *testcluster.Cluster, clientID, tenant string) (*api.LeaseInfo, error) {
	resp, err := listLeases(c, t, "tenants")
	if err != nil {
		return nil, err
	}
	for _, l := range resp.GetLeases() {
		if l.GetClientId() == clientID && l.GetKey() == tenant {
			return l, nil
		}
	}
	return nil, nil
}

// waitEvicted waits until col has counted n evictions on the tenants policy.
func waitEvicted(t *testing.T, col prometheus.Collector, n float64) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if got := metric(t, col, "ration_client_limiter_evictions_total", "tenants"); got < n {
			return fmt.Errorf("%v evictions, want %v", got, n)
		}
		return nil
	})
}

// TestIdleLimiterEvicted: a limiter nothing is offered on is evicted after
// IdleTimeout, its lease leaves the cluster long before its 30s expiry
// (released, not expired), and Client.Limiter forgets it.
func TestIdleLimiterEvicted(t *testing.T) {
	c := startCluster(t, evictPolicies)
	cl, col := evictionClient(t, c, "idle", 300*time.Millisecond)
	key := client.Key{"tenant": "acme"}
	lim := cl.Limiter("tenants", key)
	waitLease(t, nil, lim)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		l, err := clusterLease(t, c, "idle", "acme")
		if err == nil && l == nil {
			err = fmt.Errorf("no lease listed yet")
		}
		return err
	})
	if n := metric(t, col, "ration_client_limiters", "tenants"); n != 1 {
		t.Fatalf("live limiters %v, want 1", n)
	}

	start := time.Now()
	waitEvicted(t, col, 1)
	testcluster.WaitFor(t, 5*time.Second, func() error {
		l, err := clusterLease(t, c, "idle", "acme")
		if err == nil && l != nil {
			err = fmt.Errorf("lease %d still listed, expires in %v", l.GetLeaseId(), time.Duration(l.GetExpiresInNanos()))
		}
		return err
	})
	t.Logf("evicted and released %v after the lease was seen", time.Since(start))
	if n := metric(t, col, "ration_client_limiters", "tenants"); n != 0 {
		t.Errorf("live limiters %v after the eviction, want 0", n)
	}
	// The decisions counted before the eviction are kept.
	if n := metric(t, col, "ration_client_decisions_total", "tenants"); n < 1 {
		t.Errorf("decisions_total %v after the eviction, want the probe's", n)
	}
	if again := cl.Limiter("tenants", key); again == lim {
		t.Error("Client.Limiter returned the evicted limiter")
	}
}

// TestBusyLimiterNotEvicted: a limiter used more often than IdleTimeout
// keeps its limiter and its lease (same lease ID, renewed throughout),
// while idle ones beside it are evicted twice over.
func TestBusyLimiterNotEvicted(t *testing.T) {
	c := startCluster(t, evictPolicies)
	const idle = 300 * time.Millisecond
	cl, col := evictionClient(t, c, "busy", idle)
	key := client.Key{"tenant": "busy"}
	busy := cl.Limiter("tenants", key)
	waitLease(t, nil, busy)
	var first *api.LeaseInfo
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		var err error
		if first, err = clusterLease(t, c, "busy", "busy"); err == nil && first == nil {
			err = fmt.Errorf("no lease listed yet")
		}
		return err
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var denied atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(idle / 10)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if !busy.AllowN(1).Allowed {
				denied.Add(1)
			}
		}
	}()
	// Two idle limiters evicted one after the other: at least two
	// IdleTimeouts of load on the busy one.
	cl.Limiter("tenants", client.Key{"tenant": "quiet-1"})
	waitEvicted(t, col, 1)
	cl.Limiter("tenants", client.Key{"tenant": "quiet-2"})
	waitEvicted(t, col, 2)
	close(stop)
	wg.Wait()

	if n := metric(t, col, "ration_client_limiter_evictions_total", "tenants"); n != 2 {
		t.Errorf("%v evictions, want 2 (the quiet ones)", n)
	}
	if again := cl.Limiter("tenants", key); again != busy {
		t.Error("the busy limiter was evicted")
	}
	if n := denied.Load(); n > 0 {
		t.Errorf("%d of the busy limiter's calls were denied", n)
	}
	l, err := clusterLease(t, c, "busy", "busy")
	if err != nil {
		t.Fatal(err)
	}
	if l == nil || l.GetLeaseId() != first.GetLeaseId() {
		t.Errorf("busy lease now %v, want lease %d still held", l, first.GetLeaseId())
	}
}

// TestEvictedLimiterAdmitsAgain: a caller that kept an evicted *Limiter
// gets admissions again: its next call acquires a new lease (waiting for
// it as on a new key) through the live limiter for its key, which starts
// with the tokens the eviction released.
func TestEvictedLimiterAdmitsAgain(t *testing.T) {
	c := startCluster(t, heldPolicies)
	cl, col := evictionClient(t, c, "held", 200*time.Millisecond)
	key := client.Key{"tenant": "acme"}
	lim := cl.Limiter("tenants", key)
	waitLease(t, nil, lim)
	var old *api.LeaseInfo
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		var err error
		if old, err = clusterLease(t, c, "held", "acme"); err == nil && old == nil {
			err = fmt.Errorf("no lease listed yet")
		}
		return err
	})
	waitEvicted(t, col, 1)
	testcluster.WaitFor(t, 5*time.Second, func() error {
		l, err := clusterLease(t, c, "held", "acme")
		if err == nil && l != nil {
			err = fmt.Errorf("lease %d still listed", l.GetLeaseId())
		}
		return err
	})

	// FirstLeaseWait is 10s: the first call waits for the new grant.
	if d := lim.AllowN(1); !d.Allowed || d.Reason != client.Allowed {
		t.Fatalf("first call on the evicted limiter: %+v (err %v), want Allowed", d, lim.Err())
	}
	for i := range 10 {
		if !lim.Allow() {
			t.Fatalf("call %d on the re-acquired limiter refused", i)
		}
	}
	l, err := clusterLease(t, c, "held", "acme")
	if err != nil {
		t.Fatal(err)
	}
	// A new grant: the old lease left the listing, and this one expires
	// later. (Its ID can be the old one's: a key whose pool refilled with
	// no lease held is collected, and its next ledger numbers from 1.)
	if l == nil || l.GetExpiresNanos() <= old.GetExpiresNanos() {
		t.Fatalf("lease after re-acquiring: %v, want a new one (old %v)", l, old)
	}
	// The release credited what the probe left (the old lease's start but
	// one token; nothing else held the budget), and the new grant took it.
	if got, want := l.GetStartMilli(), old.GetStartMilli()-1000; got < want {
		t.Errorf("new lease started with %d milli-tokens, want at least the %d the evicted one left", got, want)
	}
	live := cl.Limiter("tenants", key)
	if live == lim {
		t.Fatal("the evicted limiter is registered again")
	}
	// The live limiter and the held one share the new lease.
	if d := live.AllowN(1); !d.Allowed {
		t.Fatalf("live limiter: %+v", d)
	}
	if n := metric(t, col, "ration_client_limiters", "tenants"); n != 1 {
		t.Errorf("live limiters %v, want 1", n)
	}
	if err := lim.Err(); err != nil {
		t.Errorf("Err on the held limiter: %v", err)
	}
}

// TestNegativeIdleTimeoutNeverEvicts: with IdleTimeout < 0 an unused
// limiter keeps its lease, renewed, while a client with eviction on (the
// reference) evicts its own idle limiter twice.
func TestNegativeIdleTimeoutNeverEvicts(t *testing.T) {
	c := startCluster(t, evictPolicies)
	keep, keepCol := evictionClient(t, c, "keep", -1)
	key := client.Key{"tenant": "acme"}
	lim := keep.Limiter("tenants", key)
	waitLease(t, nil, lim)
	var first *api.LeaseInfo
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		var err error
		if first, err = clusterLease(t, c, "keep", "acme"); err == nil && first == nil {
			err = fmt.Errorf("no lease listed yet")
		}
		return err
	})

	ref, refCol := evictionClient(t, c, "reference", 300*time.Millisecond)
	ref.Limiter("tenants", client.Key{"tenant": "r1"})
	waitEvicted(t, refCol, 1)
	ref.Limiter("tenants", client.Key{"tenant": "r2"})
	waitEvicted(t, refCol, 2)

	if again := keep.Limiter("tenants", key); again != lim {
		t.Error("the limiter was evicted with IdleTimeout < 0")
	}
	if n := metric(t, keepCol, "ration_client_limiter_evictions_total", "tenants"); n != 0 {
		t.Errorf("%v evictions with IdleTimeout < 0", n)
	}
	l, err := clusterLease(t, c, "keep", "acme")
	if err != nil {
		t.Fatal(err)
	}
	if l == nil || l.GetLeaseId() != first.GetLeaseId() {
		t.Fatalf("lease now %v, want lease %d still held", l, first.GetLeaseId())
	}
	// Renewed meanwhile: its expiry moved on with the renewals.
	if l.GetExpiresNanos() <= first.GetExpiresNanos() {
		t.Errorf("lease expiry %d not after %d: not renewed", l.GetExpiresNanos(), first.GetExpiresNanos())
	}
	if d := lim.AllowN(1); !d.Allowed {
		t.Errorf("after the wait: %+v", d)
	}
}

// TestEvictionRace: goroutines use held limiters of a few keys in bursts
// while the loop evicts them after 20ms idle, and others look them up
// again; run under -race. Every decision is one a limiter can give.
func TestEvictionRace(t *testing.T) {
	c := startCluster(t, evictPolicies)
	cl, col := evictionClient(t, c, "churn", 20*time.Millisecond)
	const keys = 6
	held := make([]*client.Limiter, keys)
	for k := range held {
		held[k] = cl.Limiter("tenants", client.Key{"tenant": fmt.Sprint("k", k)})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	for g := range 4 {
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
				// The goroutines visit the keys together, 50ms each, so a
				// key goes quiet for 250ms between visits; a goroutine of
				// its own holds each one a tick longer or shorter.
				k := (n/10 + g%2) % keys
				var d client.Decision
				switch n % 4 {
				case 0:
					d = held[k].AllowN(1)
				case 1:
					d = cl.Limiter("tenants", client.Key{"tenant": fmt.Sprint("k", k)}).AllowN(1)
				case 2:
					d = cl.AllowAll(1, held[k], held[k])
				default:
					d.Allowed = held[k].Allow()
					d.Reason = client.Allowed
					if !d.Allowed {
						d.Reason = client.NoLease
					}
				}
				switch d.Reason {
				case client.Allowed, client.NoLease, client.Limited:
				default:
					bad.Store(fmt.Sprintf("%+v", d))
				}
				_ = held[k].Err()
			}
		}()
	}
	waitEvicted(t, col, 20)
	close(stop)
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Errorf("unexpected decision %v", b)
	}
	t.Logf("%v evictions, %v live limiters", metric(t, col, "ration_client_limiter_evictions_total", "tenants"),
		metric(t, col, "ration_client_limiters", "tenants"))
}

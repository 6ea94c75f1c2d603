package client_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestContendedTrickleGoesRemote: a pod calls a key at 2/s beside a hog
// that wants all of r (20/s): the pod's seat holds about its own demand,
// a cap of two costs and more (not thin by the cap rule), but the key is
// contended (Grant.contended), so the pod's trickle is decided remotely,
// where the key's one built-in edge lease banks what the pod's small
// bucket would waste (docs/design.md §3.4, "A contended key"). The
// negative control (contended-ignored, contended_faults_test.go) keeps
// the seat.
func TestContendedTrickleGoesRemote(t *testing.T) {
	t.Parallel()
	pod, contended := contendedPod(t, 0)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := pod.EdgeStats(); s.Remote != 1 {
			return fmt.Errorf("the pod's key is not remote (%d contended renewals, %+v)", contended.Load(), s)
		}
		return nil
	})
	t.Logf("the pod's key went remote after %d contended renewals", contended.Load())
}

// contendedRoute is the routing both runs use: evaluated every 100 ms, a
// lease thin for 300 ms goes remote.
var contendedRoute = client.EdgeRouting{Interval: 100 * time.Millisecond, PromoteAfter: 300 * time.Millisecond, Timeout: testcluster.DefaultWait}

// contendedPod starts TestContendedTrickleGoesRemote's load on
// contendedKey and returns the pod's client and its count of renewals
// answered contended.
// waitRenewals > 0: first wait until that many contended renewals.
func contendedPod(t *testing.T, waitRenewals int64) (*client.Client, *atomic.Int64) {
	t.Helper()
	var contended atomic.Int64
	pod, pl, hl := contendedKey(t, client.Config{EdgeRouting: contendedRoute, OnGrant: func(g client.GrantInfo) {
		if g.Renewal && g.Contended {
			contended.Add(1)
		}
	}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pace(500*time.Millisecond, stop, func() { pl.AllowN(1) }) }()
	go func() { defer wg.Done(); pace(25*time.Millisecond, stop, func() { hl.AllowN(1) }) }()
	t.Cleanup(func() { close(stop); wg.Wait() })
	if waitRenewals > 0 {
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			if n := contended.Load(); n < waitRenewals {
				return fmt.Errorf("%d contended renewals, want %d", n, waitRenewals)
			}
			return nil
		})
	}
	return pod, &contended
}

// contendedKey starts a cluster with the contended policy (r = 20/s,
// B = 40), a pod client (cfg, with the cluster's servers and its ID
// filled in) holding the key's first lease, and a hog client with leases
// only; it returns the pod and both limiters on the key. The pod takes
// its lease first, so it is never starved (a cap below one cost goes
// remote by the cap rule).
func contendedKey(t *testing.T, cfg client.Config) (pod *client.Client, pl, hl *client.Limiter) {
	t.Helper()
	c := startCluster(t, "policies:\n  - {name: contend, algorithm: token-bucket, rate: 20, burst: 40, key: [tenant], lease: {duration: 2s, renew_after: 400ms}}\n")
	cfg.Servers, cfg.ClientID = servers(c), "pod"
	pod = newClient(t, cfg)
	key := client.Key{"tenant": "acme"}
	pl = pod.Limiter("contend", key)
	if err := pl.WaitN(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	hog := newClient(t, client.Config{Servers: servers(c), ClientID: "hog", NoRemote: true})
	return pod, pl, hog.Limiter("contend", key)
}

// TestEvictedRemoteKeyComesBackRemote: a key evicted as idle while it was
// decided remotely, and called again within DemoteAfter, starts remote,
// as it was: no new lease, which would hold a share of the contended key
// for its first renewal interval, asking for all that is fair before it
// has measured its trickle (docs/design.md §3.4, "A contended key").
func TestEvictedRemoteKeyComesBackRemote(t *testing.T) {
	t.Parallel()
	var leases atomic.Int64
	// DemoteAfter well past the test's span: the key is remembered that
	// long after its eviction.
	route := contendedRoute
	route.DemoteAfter = 5 * time.Minute
	pod, pl, hl := contendedKey(t, client.Config{EdgeRouting: route, IdleTimeout: time.Second, OnGrant: func(g client.GrantInfo) {
		if !g.Renewal {
			leases.Add(1)
		}
	}})
	key := client.Key{"tenant": "acme"}
	stopHog, stopPod := make(chan struct{}), make(chan struct{})
	var podOnce sync.Once
	endPod := func() { podOnce.Do(func() { close(stopPod) }) }
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pace(25*time.Millisecond, stopHog, func() { hl.AllowN(1) }) }()
	go func() { defer wg.Done(); pace(500*time.Millisecond, stopPod, func() { pl.AllowN(1) }) }()
	t.Cleanup(func() { close(stopHog); endPod(); wg.Wait() })
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := pod.EdgeStats(); s.Remote != 1 {
			return fmt.Errorf("the pod's key is not remote: %+v", s)
		}
		return nil
	})
	endPod()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if s := pod.EdgeStats(); s.Remote+s.Leased != 0 {
			return fmt.Errorf("the pod's idle key is not evicted yet: %+v", s)
		}
		return nil
	})
	before, checks := leases.Load(), pod.EdgeStats().Checks
	again := pod.Limiter("contend", key)
	if s := pod.EdgeStats(); s.Remote != 1 {
		t.Fatalf("the key called again after its eviction is not remote: %+v", s)
	}
	for range 3 {
		again.AllowN(1)
	}
	if s := pod.EdgeStats(); s.Checks < checks+3 {
		t.Errorf("three calls on the key back from eviction sent %d Checks, want 3", s.Checks-checks)
	}
	// The loop has run a round since (a release or acquire would have
	// been sent in it): no new lease.
	rounds := pod.EdgeStats().Evaluations
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if e := pod.EdgeStats().Evaluations; e < rounds+2 {
			return fmt.Errorf("%d routing evaluations since, want 2", e-rounds)
		}
		return nil
	})
	if n := leases.Load() - before; n != 0 {
		t.Errorf("the key back from eviction took %d new leases, want none (it was remote)", n)
	}
}

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

// contendedPod starts TestContendedTrickleGoesRemote's load and returns
// the pod's client and its count of renewals answered contended. The pod
// takes its lease first, so it is never starved (a cap below one cost
// goes remote by the cap rule); the hog, with leases only, comes after.
// waitRenewals > 0: first wait until that many contended renewals.
func contendedPod(t *testing.T, waitRenewals int64) (*client.Client, *atomic.Int64) {
	t.Helper()
	c := startCluster(t, "policies:\n  - {name: contend, algorithm: token-bucket, rate: 20, burst: 40, key: [tenant], lease: {duration: 2s, renew_after: 400ms}}\n")
	var contended atomic.Int64
	pod := newClient(t, client.Config{Servers: servers(c), ClientID: "pod", EdgeRouting: contendedRoute, OnGrant: func(g client.GrantInfo) {
		if g.Renewal && g.Contended {
			contended.Add(1)
		}
	}})
	pl := pod.Limiter("contend", client.Key{"tenant": "acme"})
	if err := pl.WaitN(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	hog := newClient(t, client.Config{Servers: servers(c), ClientID: "hog", NoRemote: true})
	hl := hog.Limiter("contend", client.Key{"tenant": "acme"})
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

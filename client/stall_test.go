package client_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/testcluster"
)

// A process stopped past its lease's deadline (SIGSTOP, a VM pause, a long
// GC) must not admit from the expired lease when it resumes. The coarse
// clock's refresh goroutine may run after the goroutines that decide, so
// its reading can be seconds stale: the hot path must not trust it (found
// by the fault suite, 2026-12-01: a replica resumed after SIGSTOP admitted
// 26 tokens from a lease expired 10 s before). Here the refresh goroutine
// is stopped for good (Clock.Stop freezes Now), the client is cut off from
// the cluster so the lease cannot be renewed, and real time runs past the
// deadline.
func TestStaleCoarseClockAdmitsNothingPastTheDeadline(t *testing.T) {
	t.Parallel()
	c := startCluster(t, `
policies:
  - name: stall
    algorithm: token-bucket
    rate: 1
    burst: 1000
    lease: {duration: 1s, renew_after: 200ms}
`)
	ps, addrs := proxies(t, c)
	clk := coarseclock.New(time.Millisecond)
	var deadline atomic.Int64 // unix nanos of the usable span's end
	cl := newClient(t, client.Config{Servers: addrs, ClientID: "stalled", Clock: clk, OnGrant: func(g client.GrantInfo) {
		deadline.Store(time.Now().Add(g.UsableFor).UnixNano())
	}})
	lim := cl.Limiter("stall", client.Key{})
	waitLease(t, nil, lim)
	cutAll(ps)
	clk.Stop() // Now stays where it is: the refresh goroutine never runs again
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := deadline.Load(); time.Now().UnixNano() <= d+int64(50*time.Millisecond) {
			return fmt.Errorf("the lease is usable for %v more", time.Until(time.Unix(0, d)))
		}
		return nil
	})
	for i := range 100 {
		if d := lim.AllowN(1); d.Allowed {
			t.Fatalf("call %d admitted past the lease's deadline on a stale coarse clock: %+v", i, d)
		}
	}
}

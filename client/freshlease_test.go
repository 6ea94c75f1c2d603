package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
)

// TestFreshLeaseKeepsBound: a client alone on a fresh key, offered ten
// times r from its first call, keeps B + r·W exactly (no slack) in every
// window, the first half second after the grant included. Its first call
// waits for the grant and is woken by it, so it takes its first token a
// moment after the bucket was created full, under a coarse reading that
// has not caught up with the creation: the bucket then minted the time it
// had spent full before that take (lease.AtomicBucket's full mark), about
// one run in sixteen of a key 1-11 milli-tokens above the bound within
// its first 0.6 s. Several fresh keys per cluster, one after the other.
func TestFreshLeaseKeepsBound(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	c := startCluster(t, lifetimePolicy)
	const keys = 6
	for k := range keys {
		h := newHistory()
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("fresh-%d", k)})
		lim := cl.Limiter("sync", client.Key{"tenant": fmt.Sprintf("fresh-%d", k)})
		quit := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); load(h, "a", lim, lifetimeLoad, 800*time.Millisecond, quit) }()
		wg.Wait()
		close(quit)
		_ = cl.Close()
		checkBoundSpans(t, fmt.Sprintf("key %d", k), h.spanSnapshot(), lifetimeBound)
	}
}

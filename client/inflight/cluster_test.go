package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/inflight"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestClusterConcurrencyLimit: two replicas' inflight.Cluster limiters on
// one concurrency policy never run more than its limit at once between
// them, on a real cluster; a full queue and a bounded wait fail with this
// package's errors.
func TestClusterConcurrencyLimit(t *testing.T) {
	const N = 3
	c := testcluster.New(t, 3, testcluster.WithPolicies("policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n"))
	c.WaitForLeader(t)
	c.ApplyPolicies(t, fmt.Sprintf("policies:\n  - {name: inflight, algorithm: concurrency, limit: %d, max_duration: 2s, key: [tenant]}\n", N))
	var addrs []string
	for i := 0; i < c.Len(); i++ {
		addrs = append(addrs, c.Server(i).GRPCAddr())
	}
	var now, peak, done atomic.Int64
	var wg sync.WaitGroup
	var stop atomic.Bool
	lims := make([]*inflight.ClusterLimiter, 2)
	for i := range lims {
		cl, err := client.New(context.Background(), client.Config{Servers: addrs, ClientID: fmt.Sprintf("r%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		lim := inflight.Cluster(cl, "inflight", "tenant", inflight.Config{MaxQueue: 16, MaxWait: time.Second})
		t.Cleanup(func() { _ = lim.Close() })
		lims[i] = lim
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					err := lim.Do(context.Background(), "acme", func(ctx context.Context) error {
						v := now.Add(1)
						for m := peak.Load(); v > m && !peak.CompareAndSwap(m, v); m = peak.Load() {
						}
						if _, ok := ctx.Deadline(); !ok {
							t.Error("the slot's context has no deadline (max_duration 2s)")
						}
						select { // the work, which ends early if its slot's context does
						case <-time.After(2 * time.Millisecond):
						case <-ctx.Done():
						}
						now.Add(-1)
						return nil
					})
					if err == nil {
						done.Add(1)
					} else if !errors.Is(err, inflight.ErrWaitTimeout) {
						t.Errorf("do: %v", err)
						return
					}
				}
			}()
		}
	}
	testcluster.WaitFor(t, 60*time.Second, func() error {
		if done.Load() < 200 {
			return fmt.Errorf("%d done", done.Load())
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests, at most %d at once", done.Load(), peak.Load())
	if peak.Load() > N {
		t.Fatalf("%d at once, more than the limit %d", peak.Load(), N)
	}
	// No queue: a busy key fails at once with ErrQueueFull.
	cl, err := client.New(context.Background(), client.Config{Servers: addrs, ClientID: "r-noqueue"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nq := inflight.Cluster(cl, "inflight", "tenant", inflight.Config{MaxWait: 100 * time.Millisecond})
	defer nq.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	testcluster.WaitFor(t, 30*time.Second, func() error {
		_, rel, err := nq.Acquire(ctx, "other-tenant")
		if err != nil {
			return err
		}
		releases = append(releases, rel)
		if len(releases) < N {
			return fmt.Errorf("%d held", len(releases))
		}
		return nil
	})
	if _, _, err := nq.Acquire(ctx, "other-tenant"); !errors.Is(err, inflight.ErrQueueFull) {
		t.Fatalf("a full key with no queue: %v", err)
	}
}

// TestClusterIdleKeysReleased: a key nobody has used for IdleTimeout has
// its handle dropped (its slot lease released), a key with a slot held
// keeps its handle however long, and a dropped key works again.
func TestClusterIdleKeysReleased(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies("policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n"))
	c.WaitForLeader(t)
	c.ApplyPolicies(t, "policies:\n  - {name: inflight, algorithm: concurrency, limit: 4, max_duration: 4s, key: [tenant]}\n")
	cl, err := client.New(context.Background(), client.Config{Servers: []string{c.Server(0).GRPCAddr()}, ClientID: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l := inflight.Cluster(cl, "inflight", "tenant", inflight.Config{MaxQueue: 8, IdleTimeout: 50 * time.Millisecond})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, releaseBusy, err := l.Acquire(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseBusy()
	if err := l.Do(ctx, "idle", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		// Each request on "fresh" lets the limiter sweep.
		if err := l.Do(ctx, "fresh", func(context.Context) error { return nil }); err != nil {
			return err
		}
		if n := l.Keys(); n != 2 {
			return fmt.Errorf("%d keys, want busy and fresh", n)
		}
		return nil
	})
	if _, running, _ := l.State(client.Key{"tenant": "busy"}); running != 1 {
		t.Fatalf("the busy key: %d running, want its slot still held", running)
	}
	if err := l.Do(ctx, "idle", func(context.Context) error { return nil }); err != nil {
		t.Fatalf("a dropped key again: %v", err)
	}
}

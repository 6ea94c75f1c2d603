package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/lease"
)

const zeroSharePolicy = `
policies:
  - name: reports
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant]
    lease: {duration: 4s, renew_after: 300ms, drift_ppm: 1000}
`

// TestZeroShareReplicaWaitsForItsShare: a replica whose lease has no cap
// (another replica holds the whole budget, until its first lease expires) answers a cost the policy's
// burst covers as Limited, retrying at its next renewal, not as
// ExceedsCapacity; a WaitN with a 20 s deadline waits and succeeds once
// the renewals move a share to it. Only a cost above the burst is hopeless.
func TestZeroShareReplicaWaitsForItsShare(t *testing.T) {
	c := startCluster(t, zeroSharePolicy)
	servers := []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}
	a := newClient(t, client.Config{Servers: servers, ClientID: "replica-a", FirstLeaseWait: testcluster.DefaultWait})
	la := a.Limiter("reports", client.Key{"tenant": "acme"})
	if d := waitLease(t, nil, la); !d.Allowed {
		t.Fatalf("a's first call: %+v", d)
	}
	// a asked first, with no history: it holds all of r and B. b's first
	// lease therefore has no cap.
	var cap0 bool
	b := newClient(t, client.Config{Servers: servers, ClientID: "replica-b", FirstLeaseWait: testcluster.DefaultWait,
		OnGrant: func(g client.GrantInfo) {
			if !g.Renewal && g.CapMilli == 0 {
				cap0 = true
			}
		}})
	lb := b.Limiter("reports", client.Key{"tenant": "acme"})
	d := lb.AllowN(5)
	if d.Reason == client.NoLease {
		t.Fatalf("b has no lease: %v", lb.Err())
	}
	if d.Allowed {
		t.Skip("b's first lease had room (a renewed before b asked); the zero-share case did not arise (a loaded machine)")
	}
	if d.Reason != client.Limited || d.RetryAfter <= 0 || d.RetryAfter == lease.RetryNever || d.RetryAfter > time.Second {
		t.Fatalf("b, cost 5 within the burst of 10, on a zero share (first cap 0: %v): %+v; want Limited until the next renewal", cap0, d)
	}
	if err := lb.WaitN(context.Background(), 11); err == nil || errors.Is(err, client.ErrWouldExceedDeadline) {
		t.Fatalf("WaitN(11) on a burst of 10: %v, want exceeds-capacity", err)
	}
	if d := lb.AllowN(11); d.Reason != client.ExceedsCapacity || d.RetryAfter != lease.RetryNever {
		t.Fatalf("AllowN(11) on a burst of 10: %+v, want ExceedsCapacity", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if err := lb.WaitN(ctx, 5); err != nil {
		t.Fatalf("WaitN(5) with a 20 s deadline on a zero share: %v after %v", err, time.Since(start))
	}
	t.Logf("b's share arrived and admitted cost 5 after %v", time.Since(start))
}

// TestRatePerMinuteThroughTheCluster: rate: 1/m reaches the replica
// exactly. After the one-token burst, the next token is a minute (and the
// drift factor's 0.1%) away, not the 62.5 s of a rate rounded down to
// 0.016/s.
func TestRatePerMinuteThroughTheCluster(t *testing.T) {
	c := startCluster(t, `
policies:
  - name: slow
    algorithm: token-bucket
    rate: 1/m
    burst: 1
    key: [tenant]
`)
	cl := newClient(t, client.Config{Servers: []string{c.Server(0).GRPCAddr()}, ClientID: "slow-replica", FirstLeaseWait: testcluster.DefaultWait})
	lim := cl.Limiter("slow", client.Key{"tenant": "acme"})
	if d := waitLease(t, nil, lim); !d.Allowed {
		t.Fatalf("first call: %+v", d)
	}
	d := lim.AllowN(1)
	if d.Allowed || d.Reason != client.Limited {
		t.Fatalf("second call: %+v", d)
	}
	if d.RetryAfter < 55*time.Second || d.RetryAfter > 60060*time.Millisecond {
		t.Fatalf("retry after %v, want just under a minute (1/m, exactly)", d.RetryAfter)
	}
}

// TestManyReplicasOnASmallBurst: 12 replicas on r = 12/s, B = 4: an even
// split is a third of a token each, below every cost, and admitted
// nothing once the first holder's lease was cut. Whole-token caps to a
// subset keep admitting. The figure (share of r admitted in the steady
// state) is logged, not asserted: this is a real cluster on a shared
// machine.
func TestManyReplicasOnASmallBurst(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("12 clients under load for several seconds")
	}
	c := startCluster(t, `
policies:
  - name: small
    algorithm: token-bucket
    rate: 12
    burst: 4
    key: [tenant]
    lease: {duration: 2s, renew_after: 300ms}
`)
	servers := []string{c.Server(0).GRPCAddr(), c.Server(1).GRPCAddr(), c.Server(2).GRPCAddr()}
	const replicas, dur, steadyFrom = 12, 8 * time.Second, 4 * time.Second
	h := newHistory()
	stop := make(chan struct{})
	done := make(chan struct{}, replicas)
	for i := range replicas {
		cl := newClient(t, client.Config{Servers: servers, ClientID: fmt.Sprintf("replica-%02d", i)})
		lim := cl.Limiter("small", client.Key{"tenant": "acme"})
		go func() {
			defer func() { done <- struct{}{} }()
			load(h, fmt.Sprint(i), lim, 200*time.Millisecond, dur, stop) // 5/s each: 60/s offered
		}()
	}
	for range replicas {
		<-done
	}
	close(stop)
	adm := h.snapshot()
	checkBound(t, "12 replicas, r=12/s, B=4", adm, quotacheck.Bound{CapacityMilli: 4000, RateMilliPerSec: 12_000})
	steady := admittedIn(adm, steadyFrom, dur)
	t.Logf("admitted %.1f tokens/s from %v to %v = %.0f%% of r", float64(steady)/1000/(dur-steadyFrom).Seconds(), steadyFrom, dur,
		100*float64(steady)/1000/(dur-steadyFrom).Seconds()/12)
	if steady == 0 {
		t.Fatal("nothing admitted in the steady state: the burst is split in slivers below every cost")
	}
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Policies whose buckets barely refill (rate 0.001/s: a client's bucket
// then mints 1/(1+ρ) = 0 milli-tokens per second, so levels change only by
// admissions and refunds), and two slow ones for WaitN.
const apiPolicies = `
policies:
  - name: outer
    algorithm: token-bucket
    rate: 0.001
    burst: 100
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: inner
    algorithm: token-bucket
    rate: 0.001
    burst: 1
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: roomy
    algorithm: token-bucket
    rate: 0.001
    burst: 100
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: shadow-inner
    algorithm: token-bucket
    rate: 0.001
    burst: 1
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
    shadow: true
  - name: slow
    algorithm: token-bucket
    rate: 1
    burst: 1
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
  - name: glacial
    algorithm: token-bucket
    rate: 0.01
    burst: 1
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
`

// TestAllowAllRefundsEarlierLayers: AllowAll charges every layer or none.
// When the second layer refuses, the first is refunded: its level after
// the failed AllowAll is what it was before. When both have room, both are
// charged. A shadow layer that would have refused charged nothing, so a
// later refusal must not "refund" it either.
func TestAllowAllRefundsEarlierLayers(t *testing.T) {
	c := startCluster(t, apiPolicies)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "layers"})
	key := client.Key{"tenant": "acme"}
	outer, inner, roomy, shadow := cl.Limiter("outer", key), cl.Limiter("inner", key), cl.Limiter("roomy", key), cl.Limiter("shadow-inner", key)
	for _, l := range []*client.Limiter{outer, inner, roomy, shadow} {
		if d := waitLease(t, nil, l); !d.Allowed {
			t.Fatalf("first admission: %+v", d)
		}
	}
	// inner and shadow-inner (burst 1) are now empty; outer and roomy hold 99.
	before := outer.AllowN(1)
	if !before.Allowed {
		t.Fatalf("outer: %+v", before)
	}
	d := cl.AllowAll(1, outer, inner)
	if d.Allowed || d.Reason != client.Limited {
		t.Fatalf("AllowAll with an empty second layer: %+v, want refused as Limited", d)
	}
	after := outer.AllowN(1)
	if !after.Allowed || after.RemainingMilli != before.RemainingMilli-1000 {
		t.Fatalf("outer after the failed AllowAll: %+v; before it %+v: the refused AllowAll changed its level", after, before)
	}

	r0 := roomy.AllowN(1)
	o0 := outer.AllowN(1)
	if d := cl.AllowAll(2, outer, roomy); !d.Allowed {
		t.Fatalf("AllowAll with room in both layers: %+v", d)
	}
	o1, r1 := outer.AllowN(1), roomy.AllowN(1)
	if o1.RemainingMilli != o0.RemainingMilli-3000 || r1.RemainingMilli != r0.RemainingMilli-3000 {
		t.Fatalf("AllowAll(2) charged outer %d and roomy %d milli-tokens, want 2000 each",
			o0.RemainingMilli-o1.RemainingMilli-1000, r0.RemainingMilli-r1.RemainingMilli-1000)
	}

	// shadow-inner is empty: it would refuse, so it admits as ShadowDenied
	// without charging. inner then refuses; nothing may be refunded into
	// shadow-inner's bucket.
	if d := shadow.AllowN(1); !d.Allowed || d.Reason != client.ShadowDenied {
		t.Fatalf("empty shadow layer: %+v, want ShadowDenied", d)
	}
	if d := cl.AllowAll(1, shadow, inner); d.Allowed {
		t.Fatalf("AllowAll(shadow, empty inner): %+v, want refused", d)
	}
	if d := shadow.AllowN(1); d.Reason != client.ShadowDenied || d.RemainingMilli != 0 {
		t.Fatalf("shadow layer after the refused AllowAll: %+v, want still empty (ShadowDenied): a refund minted a token it never charged", d)
	}
}

// TestWaitN: WaitN waits when the predicted wait fits the context's
// deadline; fails at once with ErrWouldExceedDeadline when it does not;
// and at most MaxWaiters callers wait per limiter (ErrTooManyWaiters).
func TestWaitN(t *testing.T) {
	c := startCluster(t, apiPolicies)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "waiter", MaxWaiters: 2})
	slow := cl.Limiter("slow", client.Key{"tenant": "acme"}) // 1 token/s, burst 1
	waitLease(t, nil, slow)                                  // takes the one token

	// The next token is about 1s away: a 10s deadline fits.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	start := time.Now()
	err := slow.WaitN(ctx, 1)
	cancel()
	waited := time.Since(start)
	if err != nil {
		t.Fatalf("WaitN with a deadline that fits: %v", err)
	}
	if waited < 300*time.Millisecond {
		t.Fatalf("WaitN returned after %v: the bucket was empty, it should have waited for the next token (~1s)", waited)
	}
	t.Logf("WaitN waited %v for a token", waited)

	// Empty again, the next token ~1s away: a 400ms deadline does not fit.
	ctx, cancel = context.WithTimeout(context.Background(), 400*time.Millisecond)
	start = time.Now()
	err = slow.WaitN(ctx, 1)
	cancel()
	// The next token is ~1s away, past the 400ms deadline: WaitN's first
	// check answers ErrWouldExceedDeadline, before any wait; a WaitN that
	// waited into the deadline instead returns context.DeadlineExceeded.
	// So the error says it answered at once (no elapsed-time threshold,
	// which a stall of a loaded machine could cross).
	if !errors.Is(err, client.ErrWouldExceedDeadline) {
		t.Fatalf("WaitN with a deadline that does not fit: %v, want ErrWouldExceedDeadline", err)
	}
	t.Logf("ErrWouldExceedDeadline after %v", time.Since(start))

	// MaxWaiters = 2: two callers wait (no deadline, a token is ~100s
	// away); a third is refused with ErrTooManyWaiters.
	glacial := cl.Limiter("glacial", client.Key{"tenant": "acme"})
	waitLease(t, nil, glacial)
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- glacial.WaitN(wctx, 1) }()
	}
	third := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond*500)
		defer cancel()
		return glacial.WaitN(ctx, 1) // if it gets a slot, the wait does not fit: it returns at once
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if err := third(); !errors.Is(err, client.ErrTooManyWaiters) {
			return fmt.Errorf("third caller: %v", err)
		}
		return nil
	})
	wcancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("waiter: %v, want context.Canceled", err)
		}
	}
	// The slots are free again.
	if err := third(); !errors.Is(err, client.ErrWouldExceedDeadline) {
		t.Fatalf("after the waiters left: %v, want ErrWouldExceedDeadline (a slot, but too long a wait)", err)
	}
}

// TestFirstLease: while the cluster cannot answer (every connection is
// held open but not relayed) the first AllowN on a new key waits
// FirstLeaseWait and answers NoLease; later calls answer NoLease at once;
// once the connections go through, the first call after the grant is
// admitted. With a reachable cluster the very first call waits for the
// grant and is admitted.
func TestFirstLease(t *testing.T) {
	c := startCluster(t, shiftPolicy)
	ps, addrs := proxies(t, c)
	for _, p := range ps {
		p.Hold()
	}
	const wait = 300 * time.Millisecond
	cl := newClient(t, client.Config{Servers: addrs, ClientID: "first", FirstLeaseWait: wait})
	lim := cl.Limiter("shared", client.Key{"tenant": "acme"})
	start := time.Now()
	d := lim.AllowN(1)
	took := time.Since(start)
	if d.Allowed || d.Reason != client.NoLease {
		t.Fatalf("first call with the cluster unreachable: %+v, want NoLease", d)
	}
	if took < wait-5*time.Millisecond || took > wait+time.Second {
		t.Fatalf("first call answered after %v, want about FirstLeaseWait = %v", took, wait)
	}
	start = time.Now()
	d = lim.AllowN(1)
	// Only the first call waits: the second must not wait FirstLeaseWait
	// again (compared with the whole wait, not a fraction of it, which a
	// stall of a loaded machine could exceed).
	if took := time.Since(start); d.Reason != client.NoLease || took >= wait {
		t.Fatalf("second call: %+v after %v, want NoLease at once (only the first call waits)", d, took)
	}
	for _, p := range ps {
		p.Release()
	}
	var first client.Decision
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		first = lim.AllowN(1)
		if first.Reason == client.NoLease {
			return fmt.Errorf("no lease yet")
		}
		return nil
	})
	if !first.Allowed || first.Reason != client.Allowed {
		t.Fatalf("first call after the grant: %+v, want Allowed", first)
	}

	direct := newClient(t, client.Config{Servers: servers(c), ClientID: "direct", FirstLeaseWait: 10 * time.Second})
	start = time.Now()
	d = direct.Limiter("shared", client.Key{"tenant": "other"}).AllowN(1)
	if !d.Allowed || d.Reason != client.Allowed {
		t.Fatalf("first call with a reachable cluster: %+v, want Allowed", d)
	}
	t.Logf("first call with a reachable cluster admitted after %v", time.Since(start))
}

// TestNewIncarnationRevokesOld: a second client with the same ClientID and
// a larger incarnation (a restarted process) makes the cluster drop the
// old incarnation's lease as soon as it speaks, long before that lease's
// expiry (30s away). The old incarnation, if it is in fact still running,
// learns it was superseded at its next renewal and stops admitting.
func TestNewIncarnationRevokesOld(t *testing.T) {
	c := startCluster(t, apiPolicies)
	key := client.Key{"tenant": "acme"}
	old := newClient(t, client.Config{Servers: servers(c), ClientID: "dup", Incarnation: 100, Logger: testLogger(t, "old")})
	oldLim := old.Limiter("roomy", key)
	waitLease(t, nil, oldLim)
	resp, err := listLeases(c, t, "roomy")
	if err != nil {
		t.Fatal(err)
	}
	l := leaseOf(resp, "dup")
	if l == nil || l.GetIncarnation() != 100 {
		t.Fatalf("old incarnation's lease: %v", resp.GetLeases())
	}
	if in := time.Duration(l.GetExpiresInNanos()); in < 20*time.Second {
		t.Fatalf("old lease expires in %v, want ~30s", in)
	}

	start := time.Now()
	newer := newClient(t, client.Config{Servers: servers(c), ClientID: "dup", Incarnation: 200})
	newLim := newer.Limiter("roomy", key)
	waitLease(t, nil, newLim)
	resp, err = listLeases(c, t, "roomy")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetLeases()) != 1 || resp.GetLeases()[0].GetIncarnation() != 200 {
		t.Fatalf("after the new incarnation's first grant: leases %v, want only incarnation 200's", resp.GetLeases())
	}
	t.Logf("old incarnation's lease gone %v after the new client started (its expiry was %v away)", time.Since(start), time.Duration(l.GetExpiresInNanos()))

	// The old process, still running, hears at its next renewal (<= 500ms)
	// that it was superseded, and must stop admitting.
	testcluster.WaitFor(t, 5*time.Second, func() error {
		if d := oldLim.AllowN(1); d.Allowed || d.Reason != client.Unavailable {
			return fmt.Errorf("old incarnation still decides %+v (last error %v)", d, oldLim.Err())
		}
		return nil
	})
	t.Logf("old incarnation stopped admitting: %v", oldLim.Err())
}

// TestAllowAllLayers: AllowAllLayers returns -1 when every layer admits
// and the refusing layer's index otherwise, with the layers before it
// refunded; AllowAllDetail fills each evaluated layer's own decision, so a
// shadow-denied layer that is not the last one is visible. Neither
// allocates.
func TestAllowAllLayers(t *testing.T) {
	c := startCluster(t, apiPolicies)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "layers-index"})
	key := client.Key{"tenant": "idx"}
	outer, inner, roomy, shadow := cl.Limiter("outer", key), cl.Limiter("inner", key), cl.Limiter("roomy", key), cl.Limiter("shadow-inner", key)
	for _, l := range []*client.Limiter{outer, inner, roomy, shadow} {
		if d := waitLease(t, nil, l); !d.Allowed {
			t.Fatalf("first admission: %+v", d)
		}
	}
	// inner and shadow-inner (burst 1) are now empty; outer and roomy hold 99.
	if d, i := cl.AllowAllLayers(1, outer, roomy); !d.Allowed || i != -1 {
		t.Fatalf("AllowAllLayers(outer, roomy) = %+v, %d; want admitted, -1", d, i)
	}
	if _, i := cl.AllowAllLayers(1); i != -1 {
		t.Fatalf("AllowAllLayers() refused by layer %d, want -1", i)
	}

	o0, r0 := outer.AllowN(1), roomy.AllowN(1)
	d, i := cl.AllowAllLayers(1, outer, roomy, inner)
	if d.Allowed || d.Reason != client.Limited || i != 2 {
		t.Fatalf("AllowAllLayers(outer, roomy, empty inner) = %+v, %d; want refused as Limited by layer 2", d, i)
	}
	o1, r1 := outer.AllowN(1), roomy.AllowN(1)
	if o1.RemainingMilli != o0.RemainingMilli-1000 || r1.RemainingMilli != r0.RemainingMilli-1000 {
		t.Fatalf("the refused AllowAllLayers changed outer by %d and roomy by %d milli-tokens, want 0",
			o0.RemainingMilli-o1.RemainingMilli-1000, r0.RemainingMilli-r1.RemainingMilli-1000)
	}
	if d, i := cl.AllowAllLayers(1, inner, outer); d.Allowed || i != 0 {
		t.Fatalf("AllowAllLayers(empty inner, outer) = %+v, %d; want refused by layer 0", d, i)
	}

	// AllowAllDetail: the empty shadow layer admits as ShadowDenied, seen
	// in its own entry even when a later layer decides.
	var decs [3]client.Decision
	if i := cl.AllowAllDetail(1, []*client.Limiter{shadow, outer}, decs[:]); i != -1 {
		t.Fatalf("AllowAllDetail(shadow, outer) = %d, want -1", i)
	}
	if !decs[0].Allowed || !decs[0].Shadow || decs[0].Reason != client.ShadowDenied || !decs[1].Allowed || decs[1].Shadow {
		t.Fatalf("AllowAllDetail(shadow, outer) decisions %+v, want [ShadowDenied, Allowed]", decs[:2])
	}
	decs = [3]client.Decision{}
	o0 = outer.AllowN(1)
	if i := cl.AllowAllDetail(1, []*client.Limiter{shadow, inner, outer}, decs[:]); i != 1 {
		t.Fatalf("AllowAllDetail(shadow, empty inner, outer) = %d, want 1", i)
	}
	if !decs[0].Shadow || decs[1].Allowed || decs[1].Reason != client.Limited || decs[2] != (client.Decision{}) {
		t.Fatalf("AllowAllDetail(shadow, empty inner, outer) decisions %+v, want [ShadowDenied, Limited, untouched]", decs)
	}
	if o1 := outer.AllowN(1); o1.RemainingMilli != o0.RemainingMilli-1000 {
		t.Fatalf("outer was charged by a refusal before it: %+v, before %+v", o1, o0)
	}
	// A short slice records only the layers it has room for.
	var one [1]client.Decision
	if i := cl.AllowAllDetail(1, []*client.Limiter{outer, inner}, one[:]); i != 1 || !one[0].Allowed {
		t.Fatalf("AllowAllDetail with a 1-entry slice = %d, %+v; want 1, outer's admission", i, one[0])
	}

	lims := []*client.Limiter{outer, roomy, inner}
	if n := testing.AllocsPerRun(1000, func() { cl.AllowAllLayers(1, lims...) }); n != 0 {
		t.Errorf("AllowAllLayers allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { cl.AllowAllDetail(1, lims, decs[:]) }); n != 0 {
		t.Errorf("AllowAllDetail allocates %v times per call, want 0", n)
	}
	if n := testing.AllocsPerRun(1000, func() { cl.AllowAll(1, lims...) }); n != 0 {
		t.Errorf("AllowAll allocates %v times per call, want 0", n)
	}
}

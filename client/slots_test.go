package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

const slotYAML = `
policies:
  - name: inflight
    algorithm: concurrency
    limit: %d
    max_duration: 2s
    key: [tenant]
`

func newSlots(t *testing.T, cl *client.Client, tenant string) *client.Slots {
	t.Helper()
	s := cl.Slots("inflight", map[string]string{"tenant": tenant}, client.SlotOptions{})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// inflight counts the requests running across every client at once.
type inflight struct {
	now, max, done atomic.Int64
}

func (f *inflight) run(t *testing.T, s *client.Slots, hold time.Duration, stop *atomic.Bool, n *atomic.Int64) {
	for !stop.Load() {
		// The request's context lives until it ends: the slot's context
		// is derived from it (cancelling it at once made every request
		// end at once, holding its slot for no time).
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		rctx, release, err := s.Acquire(ctx)
		if err != nil {
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("acquire: %v", err)
				return
			}
			continue
		}
		v := f.now.Add(1)
		for {
			m := f.max.Load()
			if v <= m || f.max.CompareAndSwap(m, v) {
				break
			}
		}
		select {
		case <-time.After(hold): // the request's work
		case <-rctx.Done():
		}
		f.now.Add(-1)
		release()
		release() // twice: harmless
		cancel()
		f.done.Add(1)
		if n != nil {
			n.Add(1)
		}
	}
}

// TestSlotsClusterWideLimit: three clients, each with more workers than
// the limit, never run more than N requests at once between them, on a
// real cluster; every client gets to run some.
func TestSlotsClusterWideLimit(t *testing.T) {
	const N = 4
	if got := clusterWideMax(t, N, false); got > N {
		t.Fatalf("%d requests ran at once, more than the limit %d", got, N)
	}
}

// TestSlotsClusterWideLimitNegativeControl: one client that starts
// requests past its slots (client.SlotsIgnoreLimit) is caught.
func TestSlotsClusterWideLimitNegativeControl(t *testing.T) {
	const N = 4
	if got := clusterWideMax(t, N, true); got <= N {
		t.Fatalf("the control (a client ignoring its slot count) was not caught: at most %d at once", got)
	} else {
		t.Logf("caught as expected: %d at once, limit %d", got, N)
	}
}

func clusterWideMax(t *testing.T, N int, broken bool) int64 {
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, N))
	var f inflight
	var stop atomic.Bool
	var wg sync.WaitGroup
	per := make([]atomic.Int64, 3)
	for i := range 3 {
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("replica-%d", i)})
		s := newSlots(t, cl, "acme")
		if broken && i == 0 {
			client.SlotsIgnoreLimit(s)
		}
		for range 6 {
			wg.Add(1)
			go func() { defer wg.Done(); f.run(t, s, 3*time.Millisecond, &stop, &per[i]) }()
		}
	}
	testcluster.WaitFor(t, 60*time.Second, func() error {
		for i := range per {
			if per[i].Load() < 20 {
				return fmt.Errorf("replica-%d ran %d requests", i, per[i].Load())
			}
		}
		if broken && f.max.Load() <= int64(N) {
			// The control runs until the checker sees it (or gives up).
			return fmt.Errorf("the control has run at most %d at once so far", f.max.Load())
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests, at most %d at once", f.done.Load(), f.max.Load())
	return f.max.Load()
}

// TestSlotsMoveToBusyClient: a client that goes idle gives its slots
// back, and a busy one gets them.
func TestSlotsMoveToBusyClient(t *testing.T) {
	const N = 4
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, N))
	a := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "a"}), "acme")
	b := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "b"}), "acme")
	var f inflight
	var stopA, stopB atomic.Bool
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() { defer wg.Done(); f.run(t, a, 2*time.Millisecond, &stopA, nil) }()
	}
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if l, _, _ := a.State(); l != N {
			return fmt.Errorf("a holds %d slots", l)
		}
		return nil
	})
	stopA.Store(true)
	wg.Wait()
	for range 6 {
		wg.Add(1)
		go func() { defer wg.Done(); f.run(t, b, 2*time.Millisecond, &stopB, nil) }()
	}
	testcluster.WaitFor(t, 30*time.Second, func() error {
		la, _, _ := a.State()
		lb, _, _ := b.State()
		if lb != N || la != 0 {
			return fmt.Errorf("a holds %d slots, b %d", la, lb)
		}
		return nil
	})
	stopB.Store(true)
	wg.Wait()
	if f.max.Load() > N {
		t.Fatalf("%d requests ran at once, more than the limit %d", f.max.Load(), N)
	}
}

// TestSlotsKilledClientReturnAfterExpiry: a client that dies holding every
// slot (requests running, no release) keeps them held until its lease's
// expiry, never less; then another client gets them.
func TestSlotsKilledClientReturnAfterExpiry(t *testing.T) {
	t.Parallel()
	const N = 2
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, N))
	a := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "a"}), "acme")
	b := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "b"}), "acme")
	for range N {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, _, err := a.Acquire(ctx) // never released: the process dies
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	lastSend := client.KillSlots(a)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, release, err := b.Acquire(ctx)
	got := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	// The lease's expiry is at least its last renewal's send time plus the
	// lease duration (the commit came later), less the clocks' drift.
	earliest := lastSend.Add(5*time.Second - 5*time.Millisecond)
	t.Logf("b started %v after a's last renewal", got.Sub(lastSend))
	if got.Before(earliest) {
		t.Fatalf("b started %v after a's last renewal, before its lease could expire", got.Sub(lastSend))
	}
}

// TestSlotsCarelessCallers: a cancelled context, a policy that is not a
// concurrency policy, a closed handle, releasing twice.
func TestSlotsCarelessCallers(t *testing.T) {
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, 1))
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "careless"})
	s := newSlots(t, cl, "acme")
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Acquire(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	_, rel, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rel()
	rel() // no double free: the limit stays 1
	_, rel2, err := s.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel3 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel3()
	if _, _, err := s.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second request with limit 1: %v", err)
	}
	if _, running, _ := s.State(); running != 1 {
		t.Fatalf("%d running after a double release, want 1", running)
	}
	rel2()
	// A token-bucket policy through Slots: a precise refusal, not a hang.
	tb := cl.Slots("other", nil, client.SlotOptions{})
	defer tb.Close()
	if _, _, err := tb.Acquire(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a token-bucket policy: %v", err)
	}
	// A policy that does not exist.
	nx := cl.Slots("nope", nil, client.SlotOptions{})
	defer nx.Close()
	if _, _, err := nx.Acquire(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("no such policy: %v", err)
	}
	_ = s.Close()
	if _, _, err := s.Acquire(ctx); !errors.Is(err, client.ErrSlotsClosed) {
		t.Fatalf("after close: %v", err)
	}
	// Several handles of one client, on two keys and twice on one, used at
	// once: each its own holder, none answered with another's record.
	hs := []*client.Slots{newSlots(t, cl, "k1"), newSlots(t, cl, "k2"), newSlots(t, cl, "k3"), newSlots(t, cl, "k3")}
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				_, rel, err := h.Acquire(ctx)
				if err != nil {
					t.Errorf("handle: %v", err)
					return
				}
				rel()
			}
		}()
	}
	wg.Wait()
}

// TestSlotsBackToBackKeepTheirSlot: a replica that runs one short request
// after another at concurrency 1 (each holds its slot 0.4 ms, then 0.4 ms
// pass before the next; no queue) keeps its slot across renewals: each
// renewal asks for the peak in use since the last one, not the count at
// the instant it is sent (0 half the time here). Counted after the first
// request starts, over three renewals: nothing refused. The negative
// control (client.SlotsInstantDemand, the old rule) gives its slot back
// at the first renewal that reads 0, and its next request is refused.
func TestSlotsBackToBackKeepTheirSlot(t *testing.T) {
	t.Parallel()
	if refused := backToBackRefusals(t, false, 3); refused != 0 {
		t.Fatalf("%d back-to-back requests refused with the lease held", refused)
	}
}

func TestSlotsBackToBackKeepTheirSlotNegativeControl(t *testing.T) {
	t.Parallel()
	// Until caught: each renewal reads 0 with probability about 1/2.
	if refused := backToBackRefusals(t, true, 40); refused == 0 {
		t.Fatal("the control (instantaneous demand) was not caught: no request refused in 40 renewals")
	} else {
		t.Logf("caught as expected: %d requests refused", refused)
	}
}

// backToBackRefusals runs the back-to-back requests until the handle has
// sent renewals more renewals (or, for the control, a request is refused)
// and returns the refusals.
func backToBackRefusals(t *testing.T, instant bool, renewals int64) (refused int64) {
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, 4))
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "back-to-back"})
	s := cl.Slots("inflight", map[string]string{"tenant": "acme"}, client.SlotOptions{MaxQueue: -1})
	t.Cleanup(func() { _ = s.Close() })
	if instant {
		client.SlotsInstantDemand(s)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error { // the first lease
		_, rel, err := s.Acquire(context.Background())
		if err == nil {
			rel()
		}
		return err
	})
	tick := time.NewTicker(400 * time.Microsecond)
	defer tick.Stop()
	from := client.SlotsSends(s)
	var ran int64
	giveUp := time.Now().Add(90 * time.Second)
	for client.SlotsSends(s) < from+renewals {
		if time.Now().After(giveUp) {
			t.Fatalf("%d renewals in 90s (%d requests ran, %d refused)", client.SlotsSends(s)-from, ran, refused)
		}
		<-tick.C // the gap between requests
		_, rel, err := s.Acquire(context.Background())
		switch {
		case errors.Is(err, client.ErrSlotQueueFull):
			refused++
			if instant {
				return refused // caught
			}
			continue
		case err != nil:
			t.Fatal(err)
		}
		ran++
		<-tick.C // the request's work
		rel()
	}
	t.Logf("%d requests ran, %d refused, over %d renewals", ran, refused, client.SlotsSends(s)-from)
	return refused
}

// TestSlotsLoweredCountWaitsForDrain: client a runs N long requests (1 s
// each, in a loop) when b starts wanting slots too; the cluster lowers a's
// count at a renewal, and a acknowledges it only once its running
// requests have drained to it, so b gets a's slots only as a's requests
// end: never more than N in flight between them. Its negative control
// (client/slots_faults_test.go, -tags ration_faults: a acknowledges the
// lowered count at once) runs more than N.
func TestSlotsLoweredCountWaitsForDrain(t *testing.T) {
	t.Parallel()
	if got := loweredCountMax(t, nil, false); got > 4 {
		t.Fatalf("%d requests ran at once, more than the limit 4", got)
	}
}

// loweredCountMax runs the scenario of TestSlotsLoweredCountWaitsForDrain
// and returns the most requests in flight at once. breakA, if set, is
// called before a's first grant and returns what mends it (a's slot client
// keeps the broken rule; b's is made after the mend); untilOver runs until
// more than N ran at once (the control), at most a minute.
func loweredCountMax(t *testing.T, breakA func() (mend func()), untilOver bool) int64 {
	const N = 4
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, N))
	mend := func() {}
	if breakA != nil {
		mend = breakA()
	}
	a := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "a"}), "acme")
	var f inflight
	var stopA, stopB atomic.Bool
	var perA, perB atomic.Int64
	var wg sync.WaitGroup
	defer func() { stopA.Store(true); stopB.Store(true); wg.Wait() }()
	// Each client's workers start a quarter of a request apart, so their
	// requests end spread out (ending all at once, a's drain to its
	// lowered count before any renewal could acknowledge it early).
	stagger := func(i int) { <-time.After(time.Duration(i) * 250 * time.Millisecond) }
	for i := range N {
		wg.Add(1)
		go func() { defer wg.Done(); stagger(i); f.run(t, a, time.Second, &stopA, &perA) }()
	}
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if l, r, _ := a.State(); l != N || r != N {
			return fmt.Errorf("a holds %d slots and runs %d requests", l, r)
		}
		return nil
	})
	mend()
	b := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "b"}), "acme")
	for i := range N {
		wg.Add(1)
		go func() { defer wg.Done(); stagger(i); f.run(t, b, time.Second, &stopB, &perB) }()
	}
	testcluster.WaitFor(t, 60*time.Second, func() error {
		if perB.Load() < 2*N {
			return fmt.Errorf("b ran %d requests (a %d, at most %d at once)", perB.Load(), perA.Load(), f.max.Load())
		}
		if untilOver && f.max.Load() <= N {
			la, ra, wa := a.State()
			lb, rb, wb := b.State()
			return fmt.Errorf("the control has run at most %d at once so far (a: limit %d, running %d, waiting %d; b: %d, %d, %d)", f.max.Load(), la, ra, wa, lb, rb, wb)
		}
		return nil
	})
	t.Logf("a ran %d requests, b %d; at most %d at once (limit %d)", perA.Load(), perB.Load(), f.max.Load(), N)
	return f.max.Load()
}

package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Slots across a refused renewal (docs/concurrency.md §3, rule 7): client
// a holds all N slots with long requests that honour their context; then
// the operator restores a snapshot (a's lease is dropped, every slot held
// for a lease duration), or deletes the policy and re-applies it once a's
// renewal has been refused (a's lease is kept, held until its expiry).
// Either way a's renewal is refused, a drops the lease and acquires a new
// one while its requests still run. Client b then wants slots too. a's
// requests must end by the deadline of the lease they started under,
// before the cluster frees their slots for b: never more than N in flight.
// (Before the rule, a's new grant moved their cancel time to its own
// deadline, which its renewals kept moving: 6 in flight against 4, for as
// long as they ran.)
//
// No max_duration; a cancel grace of 1s, so that a's requests, cancelled a
// second before their lease's deadline, are certainly gone before b starts
// on a loaded machine. (With no grace they are cancelled at the deadline
// itself, which precedes the cluster's expiry only by the drift margin,
// about 10 ms of a 5 s lease: the bound then counts on work that returns
// at once, ε_over of docs/concurrency.md §4. The break was the same.)
const slotCancelGraceYAML = `
policies:
  - name: inflight
    algorithm: concurrency
    limit: %d
    cancel_grace: 1s
    key: [tenant]
`

// inflightSpan counts requests in flight across clients: the most at once,
// and how long more than limit ran.
type inflightSpan struct {
	mu         sync.Mutex
	limit      int64
	now, max   int64
	aboveSince time.Time
	above      time.Duration
}

func (f *inflightSpan) enter() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	f.max = max(f.max, f.now)
	if f.now == f.limit+1 {
		f.aboveSince = time.Now()
	}
}

func (f *inflightSpan) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now == f.limit+1 {
		f.above += time.Since(f.aboveSince)
	}
	f.now--
}

func (f *inflightSpan) read() (most int64, above time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	above = f.above
	if f.now > f.limit {
		above += time.Since(f.aboveSince)
	}
	return f.max, above
}

// slotsAcrossN is the scenario's limit N.
const slotsAcrossN = 4

// slotEvent is what happens to the cluster while a's requests run.
type slotEvent int

const (
	slotRestore slotEvent = iota // rationctl snapshot restore of a snapshot saved before a's grant
	slotReapply                  // the policy deleted, then re-applied after a's renewal was refused
)

// slotsAcrossEvent runs the scenario and returns the most requests in
// flight at once and how long more than N ran. breakA, if set, is called
// before a's first grant and returns what mends it; untilOver runs until
// more than N ran at once (the control).
func slotsAcrossEvent(t *testing.T, ev slotEvent, breakA func() (mend func()), untilOver bool) (int64, time.Duration) {
	const N = slotsAcrossN
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	yaml := fmt.Sprintf(slotCancelGraceYAML, N)
	applyWindowPolicy(t, c, yaml)
	snap := saveSnapshot(t, c)
	f := &inflightSpan{limit: N}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()

	mend := func() {}
	if breakA != nil {
		mend = breakA()
	}
	a := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "a"}), "acme")
	// a: N requests, each as long as the test, that end when their
	// context does.
	var aEnded atomic.Int64
	for range N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer aEnded.Add(1)
			rctx, release, err := a.Acquire(context.Background())
			if err != nil {
				t.Errorf("a: acquire: %v", err)
				return
			}
			defer release()
			f.enter()
			defer f.leave()
			select {
			case <-rctx.Done():
			case <-stop:
			}
		}()
	}
	testcluster.WaitFor(t, 30*time.Second, func() error {
		if l, r, _ := a.State(); l != N || r != N {
			return fmt.Errorf("a holds %d slots and runs %d requests", l, r)
		}
		return nil
	})
	mend()

	applySlotEvent(t, c, ev, a, snap, yaml)

	// b: N workers running short requests, as many as b gets slots for.
	b := newSlots(t, newClient(t, client.Config{Servers: servers(c), ClientID: "b"}), "acme")
	var bRan atomic.Int64
	for range N {
		wg.Add(1)
		go func() { defer wg.Done(); runShortSlots(t, b, f, stop, &bRan) }()
	}
	testcluster.WaitFor(t, 60*time.Second, func() error {
		most, above := f.read()
		switch {
		case most > N:
			return nil // caught: the control's aim, the test's failure
		case untilOver:
			return fmt.Errorf("the control has run at most %d at once so far (b ran %d)", most, bRan.Load())
		}
		if aEnded.Load() < N || bRan.Load() < 2*N {
			return fmt.Errorf("%d of a's requests ended, b ran %d; at most %d at once (above %d for %v)", aEnded.Load(), bRan.Load(), most, N, above)
		}
		return nil
	})
	most, above := f.read()
	t.Logf("%d of a's requests ended, b ran %d; at most %d in flight at once (limit %d), above it for %v", aEnded.Load(), bRan.Load(), most, N, above.Round(100*time.Millisecond))
	return most, above
}

// TestSlotsAcrossRestore: across a snapshot restore, in flight <= N.
func TestSlotsAcrossRestore(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster for about two slot leases")
	}
	if got, above := slotsAcrossEvent(t, slotRestore, nil, false); got > 4 {
		t.Fatalf("%d requests ran at once across the restore, more than the limit 4 (above it for %v)", got, above)
	}
}

// TestSlotsAcrossReapply: across a delete and re-apply of the policy, in
// flight <= N.
func TestSlotsAcrossReapply(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster for about two slot leases")
	}
	if got, above := slotsAcrossEvent(t, slotReapply, nil, false); got > 4 {
		t.Fatalf("%d requests ran at once across the delete and re-apply, more than the limit 4 (above it for %v)", got, above)
	}
}

// applySlotEvent restores snap, or deletes the policy and, once a's
// renewal has been refused (a holds no slots, its N requests still run),
// applies yaml again.
func applySlotEvent(t *testing.T, c *testcluster.Cluster, ev slotEvent, a *client.Slots, snap []byte, yaml string) {
	t.Helper()
	switch ev {
	case slotRestore:
		if err := restoreSnapshot(t, c, snap); err != nil {
			t.Fatalf("restore: %v", err)
		}
	case slotReapply:
		testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := leaderAdmin(t, c).DeletePolicy(ctx, &api.DeletePolicyRequest{Name: "inflight"})
			return err
		})
		// Across one renewal: a's is refused, and a drops its lease.
		testcluster.WaitFor(t, 30*time.Second, func() error {
			if l, r, _ := a.State(); l != 0 || r != slotsAcrossN {
				return fmt.Errorf("a holds %d slots and runs %d requests", l, r)
			}
			return nil
		})
		applyWindowPolicy(t, c, yaml)
	}
}

// runShortSlots runs 100 ms requests on s, counted in f, until stop.
func runShortSlots(t *testing.T, s *client.Slots, f *inflightSpan, stop <-chan struct{}, ran *atomic.Int64) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		rctx, release, err := s.AcquireWithin(context.Background(), 200*time.Millisecond)
		if errors.Is(err, client.ErrSlotWaitTimeout) {
			continue
		}
		if err != nil {
			t.Errorf("acquire: %v", err)
			return
		}
		f.enter()
		select {
		case <-time.After(100 * time.Millisecond): // the request's work
		case <-rctx.Done():
		case <-stop:
		}
		f.leave()
		release()
		ran.Add(1)
	}
}

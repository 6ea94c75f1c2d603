package fsm

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// Quorum recovery (rationd recover; PrepareRecovery), modelled: a
// cluster grants leases of per-tenant/acme (r = 10/s, B = 20, 5 s
// leases) to two clients; one server's disk stops at some entry (the
// survivor, lagging) while the others go on granting; then the others are
// lost for good, and the survivor is recovered from its own stale disk and
// leads a new cluster, whose cluster time continues from the survivor's
// (coordinator/leader.go: never from a wall clock), its leader taking over
// some time after the loss. Two new clients acquire from it. Every grant
// is stamped in real time: the lost cluster's cluster time is real time,
// the recovered one's is real time minus the gap. The checker: in every
// window [a, b] whose ends are grant times or deadlines, what every lease
// could admit (its start and top-up if granted within the window, its
// rate over the part of its life inside it) is at most B + r·(b - a).

// recGrant is one grant in real time.
type recGrant struct {
	at, until   int64 // real time granted, and its deadline (5 s later)
	tokens      int64 // start + top-up, milli-tokens
	rate        int64 // milli-tokens per second
	holder, who string
}

// checkRecoveryBound is the checker.
func checkRecoveryBound(grants []recGrant, rate, burst int64) error {
	var ends []int64
	for _, g := range grants {
		ends = append(ends, g.at, g.until)
	}
	for _, g := range grants {
		a := g.at
		for _, b := range ends {
			if b < a {
				continue
			}
			var got int64
			for _, h := range grants {
				if h.at >= a && h.at <= b {
					got += h.tokens
				}
				if lo, hi := max(a, h.at), min(b, h.until); hi > lo {
					got += h.rate * (hi - lo) / 1e9
				}
			}
			if limit := burst + rate*(b-a)/1e9; got > limit {
				return fmt.Errorf("window [%.2f s, %.2f s] could admit %d milli-tokens, more than B + r·W = %d; grants: %+v",
					float64(a)/1e9, float64(b)/1e9, got, limit, grants)
			}
		}
	}
	return nil
}

// recoveryHistory runs one history; broken is the recovery's rule.
func recoveryHistory(t *testing.T, broken fault) func(*rapid.T) {
	return func(rt *rapid.T) {
		h := newHarness(t)
		h.enableFeatures(KnownFeatures)
		var grants []recGrant
		seq := map[string]uint64{}
		grant := func(hh *harness, clusterAt, realAt int64, client, who string) {
			seq[client]++
			ops := hh.batch(clusterAt, acquire(caller(client, 1, seq[client]), tenant("acme")))
			if ops[0].Err != nil {
				return
			}
			for _, kl := range ops[0].Lease.GetLeases() {
				if g := kl.GetGrant(); g != nil {
					grants = append(grants, recGrant{at: realAt, until: realAt + 5*sec, tokens: g.GetStartMilli() + g.GetTopUpMilli(),
						rate: g.GetRateMilliPerSec(), holder: client, who: who})
				}
			}
		}
		steps := rapid.IntRange(1, 8).Draw(rt, "steps")
		cut := rapid.IntRange(0, steps).Draw(rt, "cut") // the survivor's disk stops before step cut
		var stale []byte
		staleAt, at := int64(0), int64(0)
		for i := range steps {
			if i == cut {
				stale, staleAt = snapshotBytes(t, h.f), at
			}
			at += rapid.Int64Range(sec/10, 2*sec).Draw(rt, "gap")
			grant(h, at, at, rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "client"), "lost")
		}
		if stale == nil {
			stale, staleAt = snapshotBytes(t, h.f), at
		}
		// The quorum is lost at real time at; the recovered leader takes
		// over delay later, its cluster time continuing from staleAt.
		offset := at + rapid.Int64Range(0, 3*sec).Draw(rt, "delay") - staleAt
		prepared, err := prepareRecovery(stale, broken)
		if err != nil {
			rt.Fatal(err)
		}
		r := New(nil)
		if err := r.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
			rt.Fatal(err)
		}
		rh := &harness{t: t, f: r, index: 1 << 20}
		ct := staleAt
		for range rapid.IntRange(1, 8).Draw(rt, "acquires") {
			ct += rapid.Int64Range(0, 3*sec).Draw(rt, "after")
			grant(rh, ct, ct+offset, rapid.SampledFrom([]string{"c", "d"}).Draw(rt, "new client"), "recovered")
		}
		if err := checkRecoveryBound(grants, 10_000, 20_000); err != nil {
			rt.Fatal(err)
		}
	}
}

// TestRecoveryKeepsTheBound: with rule (j)'s hold, no history breaks
// the bound. The control is TestRecoveryNegativeControl.
func TestRecoveryKeepsTheBound(t *testing.T) {
	rapid.Check(t, recoveryHistory(t, faultNone))
}

// TestPrepareRecoveryHolds: the recovered state holds every budget from
// its own cluster time for the longest lease duration plus the margin,
// in a new lease-ID generation, and keeps its policies.
func TestPrepareRecoveryHolds(t *testing.T) {
	h := newHarness(t)
	h.enableFeatures(KnownFeatures)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	prepared, err := PrepareRecovery(snapshotBytes(t, h.f))
	if err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
		t.Fatal(err)
	}
	if g.ClusterTime() != sec || g.Features()&FeatureRestoreHold == 0 || len(g.Policies()) != 2 {
		t.Fatalf("recovered at %d, features %#x, %d policies", g.ClusterTime(), g.Features(), len(g.Policies()))
	}
	until := sec + 5*sec + RestoreHoldMarginNanos
	for _, p := range g.Policies() {
		until = max(until, sec+p.LeaseDurationNanos+RestoreHoldMarginNanos)
	}
	if g.st.restoreHoldUntil != until {
		t.Fatalf("hold until %d, want %d", g.st.restoreHoldUntil, until)
	}
	rh := &harness{t: t, f: g, index: 1000}
	gr := grantOf(t, rh.batch(2*sec, acquire(caller("b", 1, 1), tenant("acme"))))
	if gr.GetRateMilliPerSec() != 0 || gr.GetStartMilli() != 0 || gr.GetLeaseId() <= 1<<32 || gr.GetLeaseId() <= a.GetLeaseId() {
		t.Fatalf("granted %v during the hold", gr)
	}
	if _, err := PrepareRecovery([]byte("not a snapshot")); err == nil {
		t.Fatal("PrepareRecovery took a bad snapshot")
	}
}

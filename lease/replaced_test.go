package lease

import (
	"errors"
	"testing"
)

// TestGrantKeepsReplacedTermsHeld (rule h): a grant that replaces the same
// holder's live lease keeps the replaced lease's held terms, summed with
// the new lease's, until the replaced lease's expiry; only then does the
// budget they held come back.
func TestGrantKeepsReplacedTermsHeld(t *testing.T) {
	l := newTestLedger(t, 10_000, 10_000)
	g1 := grant(t, l, 0, "a", 1, 1<<40, 1<<40) // all of r and B
	if g1.RateMilliPerSec != 10_000 || g1.CapMilli != 10_000 {
		t.Fatalf("first grant = %+v", g1)
	}
	// The same holder asks again 1s later (a second limiter of the process,
	// say): the first lease's terms are still held, so nothing is left.
	g2 := grant(t, l, sec, "a", 2, 1<<40, 1<<40)
	if g2.RateMilliPerSec != 0 || g2.CapMilli != 0 || g2.StartMilli != 0 {
		t.Fatalf("a replacing grant got %+v while the replaced lease still holds all of r and B", g2)
	}
	if hr, hc := l.heldTotal(); hr != 10_000 || hc != 10_000 {
		t.Fatalf("held %d/%d after the replacement, want 10000/10000", hr, hc)
	}
	// A renewal of the new lease cannot take the replaced terms either.
	r, err := l.Renew(2*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g2.LeaseID, DemandRateMilliPerSec: 1 << 40, DemandBurstMilli: 1 << 40, TTLNanos: 10 * sec})
	if err != nil || r.RateMilliPerSec != 0 || r.CapMilli != 0 {
		t.Fatalf("renewal beside held replaced terms = %+v, %v", r, err)
	}
	mustInv(t, l)
	// The replaced lease is gone for its holder: renewing it fails.
	if _, err := l.Renew(2*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g1.LeaseID, TTLNanos: 10 * sec}); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("renewing the replaced lease: %v, want ErrLeaseExpired", err)
	}
	// At the replaced lease's expiry (10s) its terms are freed.
	if _, err := l.Expire(10 * sec); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if hr, hc := l.heldTotal(); hr != 0 || hc != 0 {
		t.Fatalf("held %d/%d after the replaced lease's expiry, want 0/0", hr, hc)
	}
	r, err = l.Renew(11*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g2.LeaseID, DemandRateMilliPerSec: 1 << 40, DemandBurstMilli: 1 << 40, TTLNanos: 10 * sec})
	if err != nil || r.RateMilliPerSec != 10_000 || r.CapMilli != 10_000 {
		t.Fatalf("renewal after the replaced terms expired = %+v, %v", r, err)
	}
}

// TestGrantReplacingExpiredLeaseHoldsNothing: a replaced lease already past
// its expiry (not yet removed by Expire) is not in use: nothing is kept.
func TestGrantReplacingExpiredLeaseHoldsNothing(t *testing.T) {
	l := newTestLedger(t, 10_000, 10_000)
	grant(t, l, 0, "a", 1, 1<<40, 1<<40)
	g := grant(t, l, 10*sec, "a", 2, 1<<40, 1<<40)
	if g.RateMilliPerSec != 10_000 || g.CapMilli != 10_000 {
		t.Fatalf("grant replacing an expired lease = %+v, want all of r and B", g)
	}
	if le := l.Leases()[0]; len(le.Replaced) != 0 {
		t.Fatalf("kept %+v of an expired lease", le.Replaced)
	}
}

// TestReleaseKeepsReplacedTermsHeld: releasing the new lease frees its own
// terms at once (rule e) but not its replaced leases' (rule h): the lease
// stays as a placeholder under a fresh ID until they expire.
func TestReleaseKeepsReplacedTermsHeld(t *testing.T) {
	l := newTestLedger(t, 10_000, 10_000)
	g1 := grant(t, l, 0, "a", 1, 4_000, 4_000)
	g2 := grant(t, l, sec, "a", 2, 1<<40, 1<<40)
	if g2.RateMilliPerSec != 6_000 || g2.CapMilli != 6_000 {
		t.Fatalf("replacing grant = %+v, want the 6000/6000 the replaced lease leaves", g2)
	}
	if _, err := l.Release(2*sec, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: g2.LeaseID, UnspentMilli: 6_000}); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if hr, hc := l.heldTotal(); hr != 4_000 || hc != 4_000 {
		t.Fatalf("held %d/%d after the release, want the replaced lease's 4000/4000", hr, hc)
	}
	le := l.Leases()
	if len(le) != 1 || le[0].ID == g1.LeaseID || le[0].ID == g2.LeaseID || le[0].Current.RateMilliPerSec != 0 || le[0].Current.CapMilli != 0 {
		t.Fatalf("placeholder = %+v", le)
	}
	for _, id := range []LeaseID{g1.LeaseID, g2.LeaseID} {
		if _, err := l.Renew(3*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: id, TTLNanos: 10 * sec}); err == nil {
			t.Fatalf("renewed lease %d after its release", id)
		}
		if _, err := l.Release(3*sec, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: id}); err == nil {
			t.Fatalf("released lease %d twice", id)
		}
	}
	if next, ok := l.NextExpiry(); !ok || next != 10*sec {
		t.Fatalf("NextExpiry = %d, %v; want the replaced lease's expiry 10s", next, ok)
	}
	if gone, err := l.Expire(10 * sec); err != nil || len(gone) != 1 {
		t.Fatalf("Expire at 10s = %v, %v", gone, err)
	}
	mustInv(t, l)
	if l.LeaseCount() != 0 {
		t.Fatalf("%d leases left", l.LeaseCount())
	}
}

// TestReplacedTermsAreBounded: however often one holder is granted while
// its previous lease is live, it keeps at most maxReplaced entries, and
// what they hold never shrinks below the replaced leases' sum.
func TestReplacedTermsAreBounded(t *testing.T) {
	l := newTestLedger(t, 100_000, 100_000)
	for i := range 20 {
		grant(t, l, int64(i)*sec/10, "a", uint64(i+1), 5_000, 5_000)
	}
	le := l.Leases()[0]
	if len(le.Replaced) > maxReplaced {
		t.Fatalf("%d replaced entries", len(le.Replaced))
	}
	// 20 grants of 5000 each, all live: 100000 held in all.
	if hr, hc := l.heldTotal(); hr != 100_000 || hc != 100_000 {
		t.Fatalf("held %d/%d, want 100000/100000", hr, hc)
	}
}

// TestRevokeFreesReplacedTerms: a newer incarnation means the whole older
// process is gone, so its leases' replaced terms go with them.
func TestRevokeFreesReplacedTerms(t *testing.T) {
	l := newTestLedger(t, 10_000, 10_000)
	grant(t, l, 0, "a", 1, 4_000, 4_000)
	grant(t, l, sec, "a", 2, 4_000, 4_000)
	if _, err := l.Revoke(2*sec, "a", 2); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if hr, hc := l.heldTotal(); hr != 0 || hc != 0 {
		t.Fatalf("held %d/%d after the revoke", hr, hc)
	}
}

// TestReplacingAfterAReductionStaysOvercommitted: a lease granted under a
// larger budget, reduced by a renewal after a Reconfigure lowered r, then
// replaced by its holder: the replaced entry keeps its largest version
// until its latest expiry (conservative), past the reduction's own
// expiry, so the ledger stays overcommitted that long and rule (a) is
// checked against the old budget until then (found by the budget-lifetime
// property test, fsm, with a re-applied policy and a careless holder).
func TestReplacingAfterAReductionStaysOvercommitted(t *testing.T) {
	l := newTestLedger(t, 10_000, 10_000)
	g1 := grant(t, l, 0, "c", 1, 1<<40, 0) // all of r, until 10s
	cfg := l.Config()
	cfg.RateMilliPerSec = 5_000
	if err := l.Reconfigure(sec, cfg); err != nil {
		t.Fatal(err)
	}
	// Renewed with no demand at 2s: the 10/s version is superseded, held
	// until 10s; the current terms run to 12s.
	if _, err := l.Renew(2*sec, RenewRequest{ClientID: "c", Incarnation: 1, LeaseID: g1.LeaseID, TTLNanos: 10 * sec}); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	grant(t, l, 3*sec, "c", 2, 0, 0) // replaces it: held 10/s until 12s
	mustInv(t, l)
	for _, at := range []int64{10 * sec, 11 * sec} {
		if _, err := l.Expire(at); err != nil {
			t.Fatal(err)
		}
		mustInv(t, l)
		if hr, _ := l.heldTotal(); hr != 10_000 {
			t.Fatalf("held rate %d at %v, want the replaced 10000 until 12s", hr, at)
		}
	}
}

package lease

import (
	"errors"
	"testing"
)

// versionedGrant grants a versioned lease demanding the whole budget.
func versionedGrant(t *testing.T, l *Ledger, now int64, id string) Grant {
	t.Helper()
	g, err := l.Grant(now, GrantRequest{ClientID: id, Incarnation: 1, Seq: 1, DemandRateMilliPerSec: l.Config().RateMilliPerSec,
		DemandBurstMilli: l.Config().CapacityMilli, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	return g
}

func versionedRenew(t *testing.T, l *Ledger, now int64, id string, g Grant, acked uint64, clamped int64) Grant {
	t.Helper()
	r, err := l.Renew(now, RenewRequest{ClientID: id, Incarnation: 1, LeaseID: g.LeaseID, DemandRateMilliPerSec: l.Config().RateMilliPerSec,
		DemandBurstMilli: l.Config().CapacityMilli, TTLNanos: 10 * sec, AckedVersion: acked,
		ClampedMilli: clamped})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	return r
}

// Rule (i), as make demo meets it: the first of four replicas gets the
// whole burst, the others' arrival cuts its cap to a quarter, and its
// bucket loses the rest when it installs the cut. Its acknowledging
// renewal returns that to the pool, and the others' raised caps are topped
// up from it, so the burst is not destroyed.
func TestClampedTokensReturnThroughThePool(t *testing.T) { // rule (i)
	l := newTestLedger(t, 50_000, 100_000)
	a := versionedGrant(t, l, 0, "a")
	if a.StartMilli != 100_000 || l.PoolMilli() != 0 {
		t.Fatalf("first grant %+v, pool %d", a, l.PoolMilli())
	}
	others := map[string]Grant{}
	for _, id := range []string{"b", "c", "d"} {
		others[id] = versionedGrant(t, l, 0, id)
		if g := others[id]; g.CapMilli != 0 || g.StartMilli != 0 {
			t.Fatalf("%s granted %+v while a holds the whole burst", id, g)
		}
	}
	// a renews: its share is cut to a quarter, the old terms still held.
	a2 := versionedRenew(t, l, sec/10, "a", a, 1, 0)
	if a2.CapMilli != 25_000 || a2.Version != 2 || a2.returnedMilli != 0 {
		t.Fatalf("a's renewal = %+v", a2)
	}
	// a installs version 2 (its bucket clamps 100 to 25 tokens) and says so.
	a3 := versionedRenew(t, l, sec/5, "a", a2, 2, 75_000)
	if a3.returnedMilli != 75_000 {
		t.Fatalf("acknowledging renewal returned %d of the 75000 clamped, want all", a3.returnedMilli)
	}
	// The same renewal again (a duplicate) returns nothing more: the
	// versions above version 2 were dropped by the first.
	if dup := versionedRenew(t, l, sec/5, "a", a3, 2, 75_000); dup.returnedMilli != 0 {
		t.Fatalf("a duplicated acknowledgement returned %d again", dup.returnedMilli)
	}
	// The others' renewals raise their caps and fill them from the pool.
	var topped int64
	for _, id := range []string{"b", "c", "d"} {
		g := versionedRenew(t, l, sec/5, id, others[id], 1, 0)
		if g.CapMilli != 25_000 {
			t.Fatalf("%s's renewal = %+v, want a quarter of the burst", id, g)
		}
		topped += g.TopUpMilli
	}
	if topped < 74_000 {
		t.Fatalf("the others were topped up with %d of the 75000 a returned", topped)
	}
	if st := l.Stats(); st.BurnedMilli > 1_000 {
		t.Fatalf("burned %d milli-tokens", st.BurnedMilli)
	}
}

// A clamp report is bounded by the cap the older versions hold above the
// acknowledged one and must be in range.
func TestClampReportIsBounded(t *testing.T) {
	l := newTestLedger(t, 50_000, 100_000)
	a := versionedGrant(t, l, 0, "a")
	versionedGrant(t, l, 0, "b") // a's share halves at its renewal
	a2 := versionedRenew(t, l, sec/10, "a", a, 1, 0)
	if a2.CapMilli != 50_000 {
		t.Fatalf("a's renewal = %+v", a2)
	}
	// Acknowledging version 1 (the whole burst) claims a clamp, but no
	// version older than 1 exists: nothing returns.
	if g := versionedRenew(t, l, sec/4, "a", a2, 1, 40_000); g.returnedMilli != 0 {
		t.Fatalf("a clamp with no older version held returned %d", g.returnedMilli)
	}
	if _, err := l.Renew(sec/3, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID, TTLNanos: sec,
		AckedVersion: 2, ClampedMilli: -1}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("a negative clamp: %v, want ErrInvalidRequest", err)
	}
	l2 := newTestLedger(t, 50_000, 100_000)
	a = versionedGrant(t, l2, 0, "a")
	versionedGrant(t, l2, 0, "b")
	a2 = versionedRenew(t, l2, sec/10, "a", a, 1, 0)
	// A report above the cut (100000 - 50000) returns only the cut.
	if g := versionedRenew(t, l2, sec/5, "a", a2, 2, 90_000); g.returnedMilli != 50_000 {
		t.Fatalf("a clamp of 90000 against a cut of 50000 returned %d", g.returnedMilli)
	}
}

// Rule (j): after HoldAll (a snapshot restore) the whole budget is held
// until the hold ends: grants and renewals get nothing, the pool is empty
// and mints nothing; then it mints from empty. RaiseNextID keeps lease IDs
// from being reused, so a release of a lease granted before the restore
// cannot end a new one.
func TestHoldAllAfterRestore(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000) // full pool
	old := grant(t, l, 0, "a", 1, 10_000, 100_000)
	saved := l.State()
	// Restored from before a's grant... (here: from the same moment, with
	// a's lease in it; a's later lease 2 is unknown to it).
	r, err := NewLedgerFromState(saved)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.HoldAll(sec, sec+10*sec); err != nil {
		t.Fatal(err)
	}
	r.RaiseNextID(l.State().NextID + 5)
	mustInv(t, r)
	if r.PoolMilli() != 0 {
		t.Fatalf("pool %d after the hold began, want 0", r.PoolMilli())
	}
	g := grant(t, r, 2*sec, "b", 1, 10_000, 100_000)
	if g.RateMilliPerSec != 0 || g.CapMilli != 0 || g.StartMilli != 0 {
		t.Fatalf("a grant during the hold got %+v", g)
	}
	if g.LeaseID <= old.LeaseID+5 {
		t.Fatalf("a grant after the restore reused lease ID %d", g.LeaseID)
	}
	if _, err := r.Expire(11 * sec); err != nil { // the hold ends at 11 s
		t.Fatal(err)
	}
	if r.PoolMilli() != 0 {
		t.Fatalf("the pool minted %d during the hold", r.PoolMilli())
	}
	if _, err := r.Expire(13 * sec); err != nil {
		t.Fatal(err)
	}
	mustInv(t, r)
	// b's lease still holds nothing: the pool mints at r from 11 s.
	if got := r.PoolMilli(); got != 20_000 {
		t.Fatalf("pool %d two seconds after the hold, want 20000", got)
	}
	if full := r.PoolFullAt(); full <= 13*sec {
		t.Fatalf("pool full at %d", full)
	}
}

package lease

import "testing"

// TestHoldAllKeepsDebt: a restore's HoldAll (rule j) keeps the key's
// debt and counts every allowance the restored state does not account
// for as debt too: leases granted after the snapshot may have used them.
func TestHoldAllKeepsDebt(t *testing.T) {
	l, err := newLedger(LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 10_000, StartFull: true, MaxDebtMilli: 12_000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Grant(1, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 1_000, DemandBurstMilli: 10_000, TTLNanos: 5 * NanosPerSecond})
	if err != nil || g.DebtAllowanceMilli != 6_000 {
		t.Fatalf("grant %+v, %v", g, err)
	}
	if _, err := l.Release(2, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, DebtMilli: 2_500}); err != nil {
		t.Fatal(err)
	}
	if l.DebtMilli() != 2_500 {
		t.Fatalf("debt %d after the release, want 2500", l.DebtMilli())
	}
	if err := l.HoldAll(3, 10*NanosPerSecond); err != nil {
		t.Fatal(err)
	}
	if l.DebtMilli() != 12_000 || l.PoolMilli() != 0 {
		t.Fatalf("after HoldAll: debt %d, pool %d; want all of max_debt owed, an empty pool", l.DebtMilli(), l.PoolMilli())
	}
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	// Bad releases are refused, changing nothing.
	g, _ = l.Grant(4, GrantRequest{ClientID: "b", Incarnation: 1, Seq: 1, TTLNanos: NanosPerSecond})
	for _, req := range []ReleaseRequest{
		{ClientID: "b", Incarnation: 1, LeaseID: g.LeaseID, DebtMilli: -1},
		{ClientID: "b", Incarnation: 1, LeaseID: g.LeaseID, DebtMilli: 1, UnspentMilli: 1},
	} {
		if _, err := l.Release(5, req); err == nil {
			t.Fatalf("release %+v accepted", req)
		}
	}
	if _, err := newLedger(LedgerConfig{RateMilliPerSec: 1, CapacityMilli: 1, MaxDebtMilli: -1}, 0); err == nil {
		t.Fatal("a negative max debt accepted")
	}
}

// TestChargeN: a charge after the fact is never refused; the level goes
// down to minus the allowance, the rest is excess; a level below zero
// admits nothing and refills from below.
func TestChargeN(t *testing.T) {
	b, err := NewAtomicBucketWithLevel(BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000}, 0, 4_000)
	if err != nil {
		t.Fatal(err)
	}
	if lvl, ex := b.ChargeN(0, 6_000); lvl != 0 || ex != 2_000 {
		t.Fatalf("no allowance: level %d, excess %d; want 0 and 2000", lvl, ex)
	}
	b.SetDebtAllowance(5_000)
	if lvl, ex := b.ChargeN(0, 3_000); lvl != -3_000 || ex != 0 {
		t.Fatalf("level %d, excess %d; want -3000, 0", lvl, ex)
	}
	if lvl, ex := b.ChargeN(0, 1<<62); lvl != -5_000 || ex != 1<<62-2_000 {
		t.Fatalf("a huge charge: level %d, excess %d", lvl, ex)
	}
	if lvl, ex := b.ChargeN(0, -1); lvl != -5_000 || ex != 0 {
		t.Fatalf("a negative charge changed the level: %d, %d", lvl, ex)
	}
	if d := b.AllowN(0, 1); d.Allowed || d.RetryAfter != 5_001_000_000 {
		t.Fatalf("in debt: %+v; want refused until 5.001 tokens are minted", d)
	}
	if lvl := b.LevelMilli(6 * NanosPerSecond); lvl != 1_000 {
		t.Fatalf("after 6 s at 1/s: level %d, want 1000", lvl)
	}
	if _, ok := b.TakeN(6*NanosPerSecond, 1_000); !ok {
		t.Fatal("the paid bucket refused")
	}
}

package lease

import (
	"errors"
	"testing"
)

const sec = NanosPerSecond

func newTestLedger(t *testing.T, r, b int64) *Ledger {
	t.Helper()
	l, err := newLedger(LedgerConfig{RateMilliPerSec: r, CapacityMilli: b, StartFull: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustInv(t *testing.T, l *Ledger) {
	t.Helper()
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func grant(t *testing.T, l *Ledger, now int64, id string, seq uint64, rate, burst int64) Grant {
	t.Helper()
	g, err := l.Grant(now, GrantRequest{ClientID: id, Incarnation: 1, Seq: seq, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	return g
}

func TestGrantDebitsPool(t *testing.T) { // rule (c)
	l := newTestLedger(t, 10_000, 100_000)
	g := grant(t, l, 0, "a", 1, 4_000, 30_000)
	if g.RateMilliPerSec != 4_000 || g.CapMilli != 30_000 || g.StartMilli != 30_000 {
		t.Fatalf("grant = %+v", g)
	}
	if l.PoolMilli() != 70_000 {
		t.Fatalf("pool = %d, want 70000", l.PoolMilli())
	}
	// The pool now mints at r - 4000 = 6000/s, up to B - 30000.
	if _, err := l.Expire(sec / 2); err != nil {
		t.Fatal(err)
	}
	if l.PoolMilli() != 70_000 {
		t.Fatalf("full pool minted: %d", l.PoolMilli())
	}
}

func TestPoolMintsAtUnleasedRate(t *testing.T) { // rule (g)
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 10_000, CapacityMilli: 100_000}, 0)
	grant(t, l, 0, "a", 1, 4_000, 30_000)
	if _, err := l.Expire(2 * sec); err != nil {
		t.Fatal(err)
	}
	if got := l.PoolMilli(); got != 12_000 {
		t.Fatalf("pool after 2 s at 6000/s = %d, want 12000", got)
	}
	// The leader proposes the expiry at a's expiry time, 10 s.
	if next, _ := l.NextExpiry(); next != 10*sec {
		t.Fatalf("next expiry %d", next)
	}
	if _, err := l.Expire(10 * sec); err != nil {
		t.Fatal(err)
	}
	if got := l.PoolMilli(); got != 60_000 {
		t.Fatalf("pool at 10 s = %d, want 60000", got)
	}
	if _, err := l.Expire(14 * sec); err != nil {
		t.Fatal(err)
	}
	// From 10 s the pool mints at the full 10000/s up to the full B.
	if got := l.PoolMilli(); got != 100_000 {
		t.Fatalf("pool = %d, want 100000", got)
	}
	mustInv(t, l)
}

func TestRenewReductionStaysHeld(t *testing.T) { // rule (b) and (d)
	l := newTestLedger(t, 10_000, 100_000)
	ga := grant(t, l, 0, "a", 1, 10_000, 100_000)
	if ga.RateMilliPerSec != 10_000 || ga.CapMilli != 100_000 {
		t.Fatalf("lone client should get everything it asks: %+v", ga)
	}
	gb := grant(t, l, sec, "b", 1, 10_000, 100_000)
	if gb.RateMilliPerSec != 0 || gb.CapMilli != 0 {
		t.Fatalf("b got capacity a still holds: %+v", gb)
	}
	// a renews; fair share is now half, but the old terms stay held until
	// a's old expiry (10 s).
	ra, err := l.Renew(2*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: ga.LeaseID, DemandRateMilliPerSec: 10_000, DemandBurstMilli: 100_000, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if ra.RateMilliPerSec != 5_000 || ra.CapMilli != 50_000 || ra.StartMilli != 0 {
		t.Fatalf("renewal = %+v", ra)
	}
	if hr, hc := l.heldTotal(); hr != 10_000 || hc != 100_000 {
		t.Fatalf("held = %d/%d, want the old 10000/100000 until 10 s", hr, hc)
	}
	rb, err := l.Renew(9*sec, RenewRequest{ClientID: "b", Incarnation: 1, LeaseID: gb.LeaseID, DemandRateMilliPerSec: 10_000, DemandBurstMilli: 100_000, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	if rb.RateMilliPerSec != 0 {
		t.Fatalf("b got rate before a's old terms expired: %+v", rb)
	}
	rb, err = l.Renew(10*sec, RenewRequest{ClientID: "b", Incarnation: 1, LeaseID: gb.LeaseID, DemandRateMilliPerSec: 10_000, DemandBurstMilli: 100_000, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if rb.RateMilliPerSec != 5_000 || rb.CapMilli != 50_000 || rb.StartMilli != 0 {
		t.Fatalf("b after a's reduction expired: %+v", rb)
	}
}

func TestReleaseCreditsAtMostCap(t *testing.T) { // rule (e)
	l := newTestLedger(t, 1_000, 10_000)
	g := grant(t, l, 0, "a", 1, 1_000, 4_000)
	res, err := l.Release(sec, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, UnspentMilli: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if res.CreditedMilli != 4_000 {
		t.Fatalf("credited %d, want the cap 4000", res.CreditedMilli)
	}
	if hr, hc := l.heldTotal(); hr != 0 || hc != 0 {
		t.Fatalf("release left %d/%d held", hr, hc)
	}
	if _, err := l.Release(sec, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("second release: %v", err)
	}
}

func TestExpiryReturnsNoTokens(t *testing.T) { // rule (f)
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 0, CapacityMilli: 10_000, StartFull: true}, 0)
	grant(t, l, 0, "a", 1, 0, 4_000)
	gone, err := l.Expire(10 * sec)
	if err != nil || len(gone) != 1 {
		t.Fatalf("expire = %v, %v", gone, err)
	}
	mustInv(t, l)
	if l.PoolMilli() != 6_000 {
		t.Fatalf("pool = %d: expiry returned tokens", l.PoolMilli())
	}
}

func TestStaleGrantCannotReplace(t *testing.T) {
	l := newTestLedger(t, 1_000, 10_000)
	grant(t, l, 0, "a", 2, 1_000, 1_000)
	_, err := l.Grant(sec, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, TTLNanos: sec})
	if !errors.Is(err, ErrStaleGrant) {
		t.Fatalf("stale grant: %v", err)
	}
	mustInv(t, l)
}

func TestRenewExpiredLease(t *testing.T) {
	l := newTestLedger(t, 1_000, 10_000)
	g := grant(t, l, 0, "a", 1, 1_000, 1_000)
	_, err := l.Renew(10*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, TTLNanos: sec})
	if !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("renew after expiry: %v", err)
	}
}

func TestLedgerRejectsBadInput(t *testing.T) {
	l := newTestLedger(t, 1_000, 10_000)
	grant(t, l, 5*sec, "a", 1, 1, 1)
	before := l.State()
	cases := []struct {
		name string
		err  error
		do   func() error
	}{
		{"empty client", ErrInvalidRequest, func() error { _, err := l.Grant(6*sec, GrantRequest{TTLNanos: sec}); return err }},
		{"zero ttl", ErrInvalidRequest, func() error { _, err := l.Grant(6*sec, GrantRequest{ClientID: "b"}); return err }},
		{"negative demand", ErrInvalidRequest, func() error {
			_, err := l.Grant(6*sec, GrantRequest{ClientID: "b", TTLNanos: sec, DemandBurstMilli: -1})
			return err
		}},
		{"time backwards", ErrTimeBackwards, func() error { _, err := l.Grant(sec, GrantRequest{ClientID: "b", TTLNanos: sec}); return err }},
		{"expire backwards", ErrTimeBackwards, func() error { _, err := l.Expire(sec); return err }},
		{"negative unspent", ErrInvalidRequest, func() error {
			_, err := l.Release(6*sec, ReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: 1, UnspentMilli: -5})
			return err
		}},
		{"unknown lease", ErrLeaseNotFound, func() error {
			_, err := l.Renew(6*sec, RenewRequest{ClientID: "zz", LeaseID: 9, TTLNanos: sec})
			return err
		}},
	}
	for _, c := range cases {
		if err := c.do(); !errors.Is(err, c.err) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.err)
		}
	}
	after := l.State()
	if after.NowNanos != before.NowNanos || after.PoolMilli != before.PoolMilli || len(after.Leases) != len(before.Leases) {
		t.Fatalf("rejected requests changed state: %+v -> %+v", before, after)
	}
}

func TestTooManyLeases(t *testing.T) {
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 1_000, CapacityMilli: 1_000, MaxLeases: 2}, 0)
	grant(t, l, 0, "a", 1, 1, 1)
	grant(t, l, 0, "b", 1, 1, 1)
	if _, err := l.Grant(0, GrantRequest{ClientID: "c", TTLNanos: sec}); !errors.Is(err, ErrTooManyLeases) {
		t.Fatalf("third lease: %v", err)
	}
}

func TestStateRoundTrip(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000)
	g := grant(t, l, 0, "a", 1, 10_000, 100_000)
	grant(t, l, sec, "b", 1, 5_000, 5_000)
	if _, err := l.Renew(2*sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, DemandRateMilliPerSec: 1, DemandBurstMilli: 1, TTLNanos: 10 * sec}); err != nil {
		t.Fatal(err)
	}
	s := l.State()
	r, err := NewLedgerFromState(s)
	if err != nil {
		t.Fatal(err)
	}
	// Both replicas apply the same operations and stay identical.
	for _, x := range []*Ledger{l, r} {
		if _, err := x.Expire(11 * sec); err != nil {
			t.Fatal(err)
		}
	}
	a, b := l.State(), r.State()
	if a.PoolMilli != b.PoolMilli || a.Stats != b.Stats || len(a.Leases) != len(b.Leases) {
		t.Fatalf("diverged: %+v vs %+v", a, b)
	}
	// A corrupt state is refused.
	s.PoolMilli = s.Config.CapacityMilli + 1
	if _, err := NewLedgerFromState(s); err == nil {
		t.Fatal("restored a state that breaks rule (a)")
	}
}

func TestLedgerHugeValues(t *testing.T) {
	l, err := newLedger(LedgerConfig{RateMilliPerSec: MaxRateMilliPerSec, CapacityMilli: MaxCapacityMilli, StartFull: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Grant(0, GrantRequest{ClientID: "a", DemandRateMilliPerSec: MaxRateMilliPerSec / 3, DemandBurstMilli: MaxCapacityMilli / 3, TTLNanos: MaxTTLNanos})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	// The lease expires after a day; three days later the pool has
	// refilled to its cap without overflow.
	if _, err := l.Expire(MaxTTLNanos); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Expire(3 * 24 * 3600 * sec); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if l.PoolMilli() != MaxCapacityMilli {
		t.Fatalf("pool = %d, want full %d (grant %+v)", l.PoolMilli(), MaxCapacityMilli, g)
	}
}

func TestReconfigureHonoursHeldCapacity(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000)
	grant(t, l, 0, "a", 1, 10_000, 60_000)
	// Halve the budget: a's terms are honoured until its expiry at 10 s.
	if err := l.Reconfigure(sec, LedgerConfig{RateMilliPerSec: 5_000, CapacityMilli: 50_000}); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if l.PoolMilli() != 0 {
		t.Fatalf("pool %d: the new budget has no room while a holds 60000", l.PoolMilli())
	}
	g := grant(t, l, 2*sec, "b", 1, 10_000, 50_000)
	if g.RateMilliPerSec != 0 || g.CapMilli != 0 {
		t.Fatalf("b got %+v while a overcommits the new budget", g)
	}
	if _, err := l.Expire(10 * sec); err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if hr, hc := l.heldTotal(); hr != 0 || hc != 0 {
		t.Fatalf("held %d/%d after expiry", hr, hc)
	}
	// A renewal by b now divides the new budget.
	if _, err := l.Expire(20 * sec); err != nil {
		t.Fatal(err)
	}
	if l.PoolMilli() > 50_000 {
		t.Fatalf("pool %d above the new B", l.PoolMilli())
	}
}

func TestRevokeOlderIncarnations(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000)
	grant(t, l, 0, "a", 1, 10_000, 60_000)
	gone, err := l.Revoke(sec, "a", 2)
	if err != nil || len(gone) != 1 {
		t.Fatalf("revoke = %v, %v", gone, err)
	}
	mustInv(t, l)
	if l.PoolMilli() != 40_000 {
		t.Fatalf("pool %d: a revoke must return no tokens", l.PoolMilli())
	}
	if gone, _ := l.Revoke(sec, "a", 2); len(gone) != 0 {
		t.Fatal("revoked twice")
	}
}

// ExpireThrough advances the pool to now but removes only leases expired by
// the cut-off: a new leader's margin for leases it inherited.
func TestExpireThroughKeepsLeasesInsideTheMargin(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000)
	grant(t, l, 0, "a", 1, 1_000, 1_000) // expires at 10 s
	gone, err := l.ExpireThrough(11*sec, 9*sec)
	if err != nil || len(gone) != 0 {
		t.Fatalf("expired %v, %v before the cut-off reached the expiry", gone, err)
	}
	if l.NowNanos() != 11*sec {
		t.Fatalf("ledger time %d, want 11 s", l.NowNanos())
	}
	mustInv(t, l)
	if gone, _ := l.ExpireThrough(12*sec, 10*sec); len(gone) != 1 {
		t.Fatalf("lease not expired once the cut-off reached its expiry: %v", gone)
	}
	// A cut-off later than now is capped at now.
	grant(t, l, 12*sec, "b", 1, 1_000, 1_000) // expires at 22 s
	if gone, _ := l.ExpireThrough(13*sec, 30*sec); len(gone) != 0 {
		t.Fatalf("a cut-off beyond now expired %v", gone)
	}
}

func TestNewLedgerWithPool(t *testing.T) {
	cfg := LedgerConfig{RateMilliPerSec: 10_000, CapacityMilli: 20_000, StartFull: true}
	for _, c := range []struct{ pool, want int64 }{{-5, 0}, {0, 0}, {7_000, 7_000}, {20_000, 20_000}, {1 << 50, 20_000}} {
		l, err := NewLedgerWithPool(cfg, 5, c.pool)
		if err != nil {
			t.Fatal(err)
		}
		if l.PoolMilli() != c.want {
			t.Errorf("pool %d: starts at %d, want %d", c.pool, l.PoolMilli(), c.want)
		}
		if err := l.CheckInvariants(); err != nil {
			t.Errorf("pool %d: %v", c.pool, err)
		}
		// It mints from there like any ledger: full after (B - pool)/r.
		if got, want := l.PoolFullAt(), 5+nanosToMint(10_000, 20_000-c.want); got != want {
			t.Errorf("pool %d: full at %d, want %d", c.pool, got, want)
		}
	}
	if _, err := NewLedgerWithPool(LedgerConfig{RateMilliPerSec: -1, CapacityMilli: 1}, 0, 0); err == nil {
		t.Error("an invalid config was accepted")
	}
}

// A cap the others' held caps squeeze below the lease's largest cost would
// admit nothing and keep that much from everyone: the lease gets nothing
// and asks again at its renewal.
func TestNoCapBelowTheLargestCostWhileOthersHold(t *testing.T) {
	l := newTestLedger(t, 10_000, 10_000)
	grant(t, l, 0, "a", 1, 7_000, 7_000)
	g, err := l.Grant(sec, GrantRequest{ClientID: "b", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 10_000, DemandBurstMilli: 10_000, DemandMaxCostMilli: 5_000, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	if g.CapMilli != 0 || g.RateMilliPerSec != 0 {
		t.Fatalf("b got %+v: a sliver below its cost of 5000", g)
	}
	// A cost that fits what a leaves is granted.
	g, err = l.Grant(sec, GrantRequest{ClientID: "c", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: 10_000, DemandBurstMilli: 10_000, DemandMaxCostMilli: 2_000, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	if g.CapMilli < 2_000 || g.RateMilliPerSec == 0 {
		t.Fatalf("c got %+v, want at least its cost of 2000", g)
	}
	mustInv(t, l)
}

func TestNegativeMaxCostIsRefused(t *testing.T) {
	l := newTestLedger(t, 1_000, 10_000)
	if _, err := l.Grant(0, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandMaxCostMilli: -1, TTLNanos: sec}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("grant with a negative max cost: %v", err)
	}
	g := grant(t, l, 0, "a", 2, 1_000, 1_000)
	if _, err := l.Renew(sec, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, DemandMaxCostMilli: -5, TTLNanos: sec}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("renew with a negative max cost: %v", err)
	}
	mustInv(t, l)
}

// A policy update that changes the rate period restates the leases' terms
// in the new unit, rounding up, so what they hold still covers what their
// clients mint.
func TestReconfigureRestatesRatesPerPeriod(t *testing.T) {
	l, _ := newLedger(LedgerConfig{RateMilliPerSec: 1000, CapacityMilli: 1000, StartFull: true, RatePeriodNanos: 60 * sec}, 0)
	g := grant(t, l, 0, "a", 1, 1<<40, 1<<40) // 1000 per minute
	if g.RateMilliPerSec != 1000 {
		t.Fatalf("grant %+v", g)
	}
	if err := l.Reconfigure(sec, LedgerConfig{RateMilliPerSec: 17, CapacityMilli: 1000}); err != nil {
		t.Fatal(err)
	}
	if hr, _ := l.heldTotal(); hr != 17 { // ceil(1000/60)
		t.Fatalf("held %d per second after the restatement, want 17", hr)
	}
	mustInv(t, l)
}

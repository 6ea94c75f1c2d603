package lease

import "testing"

// The acknowledgement rule (docs/design.md §3.2, Renew): at the commit of a
// renewal acknowledging version v, superseded versions strictly older than
// v are dropped; v itself and newer versions stay held.

func vgrant(t *testing.T, l *Ledger, now int64, id string, rate, burst int64) Grant {
	t.Helper()
	g, err := l.Grant(now, GrantRequest{ClientID: id, Incarnation: 1, Seq: 1, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, TTLNanos: 10 * sec})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	return g
}

func vrenew(t *testing.T, l *Ledger, now int64, id string, g Grant, rate, burst int64, acked uint64) Grant {
	t.Helper()
	out, err := l.Renew(now, RenewRequest{ClientID: id, Incarnation: 1, LeaseID: g.LeaseID, DemandRateMilliPerSec: rate, DemandBurstMilli: burst, TTLNanos: 10 * sec,
		AckedVersion: acked})
	if err != nil {
		t.Fatal(err)
	}
	mustInv(t, l)
	return out
}

func heldOf(t *testing.T, l *Ledger, id string) (rate, capMilli int64) {
	t.Helper()
	for _, le := range l.Leases() {
		if le.ClientID == id {
			return le.HeldAt(l.NowNanos())
		}
	}
	t.Fatalf("no lease of %s", id)
	return 0, 0
}

// converge sets up a (full r, B) reduced to (r/2, B/2) by b's arrival:
// a's versions 1 (full) and 2 (half) are live.
func converge(t *testing.T) (*Ledger, Grant, Grant) {
	t.Helper()
	l := newTestLedger(t, 10_000, 100_000)
	a1 := vgrant(t, l, 0, "a", 1<<40, 1<<40)
	if a1.Version != 1 || a1.RateMilliPerSec != 10_000 {
		t.Fatalf("first grant %+v", a1)
	}
	b := vgrant(t, l, sec/10, "b", 1<<40, 1<<40)
	if b.RateMilliPerSec != 0 {
		t.Fatalf("b got %d while a holds all of r", b.RateMilliPerSec)
	}
	a2 := vrenew(t, l, sec, "a", a1, 1<<40, 1<<40, 1)
	if a2.Version != 2 || a2.RateMilliPerSec != 5_000 || a2.CapMilli != 50_000 {
		t.Fatalf("reducing renewal %+v", a2)
	}
	if r, c := heldOf(t, l, "a"); r != 10_000 || c != 100_000 {
		t.Fatalf("acknowledging version 1 dropped it: held %d/%d", r, c)
	}
	return l, a2, b
}

func TestAckDropsOlderVersionsAtCommit(t *testing.T) {
	l, a2, b := converge(t)
	if !a2.AckSoon {
		t.Fatal("a holds a reduced share it could free: it should acknowledge soon")
	}
	// a installed version 2 and acknowledges it: version 1 is freed now,
	// not at its expiry 9 s later.
	a3 := vrenew(t, l, 1200*sec/1000, "a", a2, 1<<40, 1<<40, 2)
	if r, c := heldOf(t, l, "a"); r != 5_000 || c != 50_000 {
		t.Fatalf("held after the acknowledgement %d/%d, want 5000/50000", r, c)
	}
	if a3.RenewSoon || a3.AckSoon {
		t.Fatalf("a holds its fair share and nothing superseded: %+v", a3)
	}
	b2 := vrenew(t, l, 1300*sec/1000, "b", b, 1<<40, 1<<40, b.Version)
	if b2.RateMilliPerSec != 5_000 || b2.CapMilli != 50_000 {
		t.Fatalf("the newcomer's share after the acknowledgement: %+v", b2)
	}
	if b2.RenewSoon || b2.AckSoon {
		t.Fatalf("b holds its fair share: %+v", b2)
	}
}

func TestAckNeverDropsTheAcknowledgedVersion(t *testing.T) {
	l, a2, _ := converge(t)
	// A renewal still acknowledging 1 (the client has not installed 2):
	// nothing may be dropped; 1 stays held.
	vrenew(t, l, 1100*sec/1000, "a", a2, 1<<40, 1<<40, 1)
	if r, c := heldOf(t, l, "a"); r != 10_000 || c != 100_000 {
		t.Fatalf("held %d/%d, want the acknowledged version 1's 10000/100000", r, c)
	}
}

func TestDelayedAckDropsNothingNewer(t *testing.T) {
	l := newTestLedger(t, 12_000, 120_000)
	a1 := vgrant(t, l, 0, "a", 1<<40, 1<<40)
	vgrant(t, l, 1, "b", 1<<40, 1<<40)
	a2 := vrenew(t, l, sec, "a", a1, 1<<40, 1<<40, 1) // 6000: v1 (12000) held
	// The client installed version 2 and acknowledges it: 1 goes.
	a3 := vrenew(t, l, 2*sec, "a", a2, 1<<40, 1<<40, 2)
	// A third client arrives; a's next renewal cuts it to 4000 (v4),
	// but its answer is lost: the client still uses version 3 (6000).
	vgrant(t, l, 2*sec+1, "c", 1<<40, 1<<40)
	a4 := vrenew(t, l, 3*sec, "a", a3, 1<<40, 1<<40, 3)
	if a4.Version != 4 || a4.RateMilliPerSec != 4_000 {
		t.Fatalf("a4 %+v", a4)
	}
	// A delayed duplicate of an earlier renewal, acknowledging 2, commits:
	// it must not drop 3, which the client is using.
	vrenew(t, l, 3*sec+1, "a", a4, 1<<40, 1<<40, 2)
	if r, _ := heldOf(t, l, "a"); r != 6_000 {
		t.Fatalf("held rate %d after a delayed acknowledgement of 2, want version 3's 6000", r)
	}
	// An acknowledgement of a version never granted is ignored.
	vrenew(t, l, 3*sec+2, "a", a4, 1<<40, 1<<40, 99)
	if r, _ := heldOf(t, l, "a"); r != 6_000 {
		t.Fatalf("held rate %d after acknowledging a future version, want 6000", r)
	}
}

func TestRenewSoonWhileBelowFairShare(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000)
	a1 := vgrant(t, l, 0, "a", 1<<40, 1<<40)
	b1 := vgrant(t, l, 1, "b", 1<<40, 1<<40)
	// a has not renewed yet: it holds all of r; b is below its fair share.
	b2 := vrenew(t, l, sec/4, "b", b1, 1<<40, 1<<40, b1.Version)
	if b2.RateMilliPerSec != 0 || !b2.RenewSoon {
		t.Fatalf("b below its fair share: %+v, want renew soon", b2)
	}
	// A lone lease at its full demand renews at the normal interval.
	a2 := vrenew(t, l, sec/2, "a", a1, 1<<40, 1<<40, a1.Version)
	if !a2.AckSoon || a2.RenewSoon {
		t.Fatalf("a was just reduced: %+v, want acknowledge soon", a2)
	}
	l2 := newTestLedger(t, 10_000, 100_000)
	c1 := vgrant(t, l2, 0, "c", 1<<40, 1<<40)
	if c2 := vrenew(t, l2, sec, "c", c1, 1<<40, 1<<40, c1.Version); c2.RenewSoon || c2.AckSoon {
		t.Fatalf("a lone lease holding all it asks for: %+v", c2)
	}
	// A light user getting all it asks for is not short either.
	l3 := newTestLedger(t, 10_000, 100_000)
	d1 := vgrant(t, l3, 0, "d", 1<<40, 1<<40)
	e1 := vgrant(t, l3, 1, "e", 1_000, 10_000)
	d2 := vrenew(t, l3, sec, "d", d1, 1<<40, 1<<40, d1.Version)
	d3 := vrenew(t, l3, 2*sec, "d", d2, 1<<40, 1<<40, d2.Version)
	e2 := vrenew(t, l3, 2*sec+1, "e", e1, 1_000, 10_000, e1.Version)
	if e2.RateMilliPerSec != 1_000 || e2.RenewSoon || e2.AckSoon {
		t.Fatalf("light user %+v", e2)
	}
	if d4 := vrenew(t, l3, 3*sec, "d", d3, 1<<40, 1<<40, d3.Version); d4.RateMilliPerSec != 9_000 || d4.RenewSoon || d4.AckSoon {
		t.Fatalf("heavy user in steady state %+v", d4)
	}
}

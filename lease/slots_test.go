package lease

import (
	"errors"
	"reflect"
	"testing"
)

const slotTTL = 10 * NanosPerSecond

func newSlots(t *testing.T, n int64) *SlotLedger {
	t.Helper()
	l, err := NewSlotLedger(SlotConfig{Limit: n, DriftPPM: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func slotGrant(t *testing.T, l *SlotLedger, now int64, id string, seq uint64, demand int64) SlotGrant {
	t.Helper()
	g, err := l.Grant(now, SlotGrantRequest{ClientID: id, Incarnation: 1, Seq: seq, DemandSlots: demand, TTLNanos: slotTTL})
	if err != nil {
		t.Fatalf("grant %s: %v", id, err)
	}
	checkSlots(t, l)
	return g
}

func slotRenew(t *testing.T, l *SlotLedger, now int64, id string, g SlotGrant, demand int64, acked uint64) SlotGrant {
	t.Helper()
	r, err := l.Renew(now, SlotRenewRequest{ClientID: id, Incarnation: 1, LeaseID: g.LeaseID, DemandSlots: demand, TTLNanos: slotTTL, AckedVersion: acked})
	if err != nil {
		t.Fatalf("renew %s: %v", id, err)
	}
	checkSlots(t, l)
	return r
}

func checkSlots(t *testing.T, l *SlotLedger) {
	t.Helper()
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestSlotsMoveAsDemandShifts walks slots from one holder to a newcomer:
// the lowered count is held until the first holder acknowledges it (S2),
// then the newcomer's renewal takes the freed slots (S3).
func TestSlotsMoveAsDemandShifts(t *testing.T) {
	l := newSlots(t, 4)
	a := slotGrant(t, l, 1, "a", 1, 4)
	if a.Slots != 4 || a.Version != 1 {
		t.Fatalf("a = %+v, want 4 slots at version 1", a)
	}
	b := slotGrant(t, l, 2, "b", 1, 4)
	if b.Slots != 0 || !b.RenewSoon {
		t.Fatalf("b = %+v, want 0 slots and RenewSoon (a holds them all)", b)
	}
	a2 := slotRenew(t, l, 3, "a", a, 4, 1)
	if a2.Slots != 2 || a2.Version != 2 || !a2.AckSoon {
		t.Fatalf("a's renewal = %+v, want its fair 2 slots at version 2 with AckSoon", a2)
	}
	if h := l.heldTotal(); h != 4 {
		t.Fatalf("held %d after a's lowering, want 4 (the old count until acknowledged)", h)
	}
	if b2 := slotRenew(t, l, 4, "b", b, 4, 1); b2.Slots != 0 || !b2.RenewSoon {
		t.Fatalf("b's renewal before a's acknowledgement = %+v, want 0 slots, RenewSoon", b2)
	}
	// A delayed duplicate of a's first renewal (acknowledging 1) frees
	// nothing: a may be running under version 2 or 1.
	a3 := slotRenew(t, l, 5, "a", a, 4, 1)
	if l.heldTotal() != 4 {
		t.Fatalf("held %d after a renewal acknowledging version 1, want 4", l.heldTotal())
	}
	// a's running requests have dropped to 2: it acknowledges version 3
	// (the count it installed), which frees the older versions.
	a4 := slotRenew(t, l, 6, "a", a, 4, a3.Version)
	if a4.Slots != 2 || a4.AckSoon {
		t.Fatalf("a's acknowledging renewal = %+v, want 2 slots, no AckSoon", a4)
	}
	if h := l.heldTotal(); h != 2 {
		t.Fatalf("held %d after a's acknowledgement, want 2", h)
	}
	b3 := slotRenew(t, l, 7, "b", b, 4, 1)
	if b3.Slots != 2 {
		t.Fatalf("b's renewal after a's acknowledgement = %+v, want 2 slots", b3)
	}
	// Demand moves back: b goes idle, a takes everything once b
	// acknowledges its drop to 0.
	b4 := slotRenew(t, l, 8, "b", b, 0, b3.Version)
	if b4.Slots != 0 || l.heldTotal() != 4 {
		t.Fatalf("b idle = %+v, held %d: want 0 slots, 4 held (b's 2 until acknowledged)", b4, l.heldTotal())
	}
	slotRenew(t, l, 9, "b", b, 0, b4.Version)
	if a5 := slotRenew(t, l, 10, "a", a, 4, a4.Version); a5.Slots != 4 {
		t.Fatalf("a after b went idle = %+v, want 4", a5)
	}
}

// TestSlotAckAboveCurrentIgnored: an acknowledgement of a version never
// granted frees nothing.
func TestSlotAckAboveCurrentIgnored(t *testing.T) {
	l := newSlots(t, 2)
	a := slotGrant(t, l, 1, "a", 1, 2)
	slotGrant(t, l, 1, "b", 1, 2)
	slotRenew(t, l, 2, "a", a, 2, 1) // lowered to 1, version 2; 2 held
	slotRenew(t, l, 3, "a", a, 2, 99)
	if h := l.heldTotal(); h != 2 {
		t.Fatalf("held %d after an acknowledgement above the current version, want 2", h)
	}
}

// TestSlotExpiryAtLeaseEnd: a dead holder's slots come back at its expiry,
// not a nanosecond before (S5).
func TestSlotExpiryAtLeaseEnd(t *testing.T) {
	l := newSlots(t, 3)
	a := slotGrant(t, l, 100, "a", 1, 3)
	if e, ok := l.NextExpiry(); !ok || e != a.ExpiresNanos || e != 100+slotTTL {
		t.Fatalf("NextExpiry = %d %v, want %d", e, ok, 100+slotTTL)
	}
	if ids, _ := l.Expire(a.ExpiresNanos - 1); len(ids) != 0 || l.Free() != 0 {
		t.Fatalf("expired %v, free %d a nanosecond early", ids, l.Free())
	}
	if ids, _ := l.Expire(a.ExpiresNanos); len(ids) != 1 || l.Free() != 3 {
		t.Fatalf("expired %v, free %d at the expiry, want a's lease and 3", ids, l.Free())
	}
	if _, err := l.Renew(a.ExpiresNanos, SlotRenewRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID, TTLNanos: slotTTL}); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("renewal of an expired lease: %v, want ErrLeaseExpired", err)
	}
	// ExpireThrough (a new leader's margin) keeps inherited leases a while.
	b := slotGrant(t, l, a.ExpiresNanos, "b", 1, 3)
	if ids, _ := l.ExpireThrough(b.ExpiresNanos+5, b.ExpiresNanos-1); len(ids) != 0 {
		t.Fatalf("ExpireThrough removed %v inside the margin", ids)
	}
}

// TestSlotReleaseAndRevoke: a release frees at once (S4); a newer
// incarnation frees the older one's leases.
func TestSlotReleaseAndRevoke(t *testing.T) {
	l := newSlots(t, 2)
	a := slotGrant(t, l, 1, "a", 1, 2)
	if err := l.Release(2, SlotReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if l.Free() != 2 {
		t.Fatalf("free %d after release, want 2", l.Free())
	}
	if err := l.Release(3, SlotReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID}); !errors.Is(err, ErrLeaseNotFound) {
		t.Fatalf("second release: %v, want ErrLeaseNotFound", err)
	}
	slotGrant(t, l, 4, "b", 1, 2)
	if ids, err := l.Revoke(5, "b", 2); err != nil || len(ids) != 1 || l.Free() != 2 {
		t.Fatalf("revoke: %v %v, free %d", ids, err, l.Free())
	}
}

// TestSlotReplacedLeaseHeld: a grant replacing the holder's live lease
// keeps the old slots held until its expiry (S6), even after a release of
// the new lease.
func TestSlotReplacedLeaseHeld(t *testing.T) {
	l := newSlots(t, 3)
	a := slotGrant(t, l, 1, "a", 1, 2)
	a2 := slotGrant(t, l, 2, "a", 2, 3)
	if a2.Slots != 1 || l.heldTotal() != 3 {
		t.Fatalf("replacing grant = %+v, held %d: want 1 slot (2 still held by the replaced lease), 3 held", a2, l.heldTotal())
	}
	if _, err := l.Grant(3, SlotGrantRequest{ClientID: "a", Incarnation: 1, Seq: 2, DemandSlots: 1, TTLNanos: slotTTL}); !errors.Is(err, ErrStaleGrant) {
		t.Fatalf("stale grant: %v", err)
	}
	if err := l.Release(4, SlotReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: a2.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if l.heldTotal() != 2 {
		t.Fatalf("held %d after releasing the new lease, want the replaced 2", l.heldTotal())
	}
	if ids, _ := l.Expire(a.ExpiresNanos); len(ids) != 1 || l.heldTotal() != 0 {
		t.Fatalf("expire at the replaced lease's end: %v, held %d", ids, l.heldTotal())
	}
	checkSlots(t, l)
}

// TestSlotBadInput: every malformed request is a precise error and leaves
// the ledger unchanged.
func TestSlotBadInput(t *testing.T) {
	for _, n := range []int64{-1, MaxSlots + 1} {
		if _, err := NewSlotLedger(SlotConfig{Limit: n}, 0); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("limit %d: %v, want ErrInvalidConfig", n, err)
		}
	}
	if _, err := NewSlotLedger(SlotConfig{Limit: 1, DriftPPM: MaxDriftPPM + 1}, 0); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("drift: %v", err)
	}
	l := newSlots(t, 5)
	a := slotGrant(t, l, 10, "a", 1, 2)
	before := l.State()
	bad := []struct {
		name string
		err  error
		fn   func() error
	}{
		{"empty client", ErrInvalidRequest, func() error {
			_, err := l.Grant(11, SlotGrantRequest{Seq: 1, DemandSlots: 1, TTLNanos: slotTTL})
			return err
		}},
		{"negative demand", ErrInvalidRequest, func() error {
			_, err := l.Grant(11, SlotGrantRequest{ClientID: "b", Seq: 1, DemandSlots: -1, TTLNanos: slotTTL})
			return err
		}},
		{"huge demand", ErrInvalidRequest, func() error {
			_, err := l.Grant(11, SlotGrantRequest{ClientID: "b", Seq: 1, DemandSlots: MaxSlots + 1, TTLNanos: slotTTL})
			return err
		}},
		{"zero duration", ErrInvalidRequest, func() error {
			_, err := l.Grant(11, SlotGrantRequest{ClientID: "b", Seq: 1, DemandSlots: 1})
			return err
		}},
		{"weight", ErrInvalidRequest, func() error {
			_, err := l.Renew(11, SlotRenewRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID, Weight: -3, TTLNanos: slotTTL})
			return err
		}},
		{"time backwards", ErrTimeBackwards, func() error {
			_, err := l.Renew(9, SlotRenewRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID, TTLNanos: slotTTL})
			return err
		}},
		{"negative time", ErrTimeOutOfRange, func() error {
			_, err := l.Grant(-1, SlotGrantRequest{ClientID: "b", Seq: 1, DemandSlots: 1, TTLNanos: slotTTL})
			return err
		}},
		{"unknown lease", ErrLeaseNotFound, func() error {
			_, err := l.Renew(11, SlotRenewRequest{ClientID: "a", Incarnation: 1, LeaseID: 77, TTLNanos: slotTTL})
			return err
		}},
		{"release time backwards", ErrTimeBackwards, func() error {
			return l.Release(9, SlotReleaseRequest{ClientID: "a", Incarnation: 1, LeaseID: a.LeaseID})
		}},
		{"release empty client", ErrInvalidRequest, func() error {
			return l.Release(11, SlotReleaseRequest{LeaseID: a.LeaseID})
		}},
	}
	for _, c := range bad {
		if err := c.fn(); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
		if !reflect.DeepEqual(l.State(), before) {
			t.Fatalf("%s changed the ledger", c.name)
		}
	}
}

// TestSlotReconfigureAndHold: a lowered limit honours held counts until
// they expire; a restore hold grants nothing.
func TestSlotReconfigureAndHold(t *testing.T) {
	l := newSlots(t, 4)
	a := slotGrant(t, l, 1, "a", 1, 4)
	if err := l.Reconfigure(2, SlotConfig{Limit: 2}); err != nil {
		t.Fatal(err)
	}
	checkSlots(t, l)
	if b := slotGrant(t, l, 3, "b", 1, 2); b.Slots != 0 {
		t.Fatalf("b got %d slots while a holds 4 of the old limit", b.Slots)
	}
	// a's fair share of N = 2 beside b is 1 (its own 4 stay held until
	// it acknowledges; the room is N − b's 0 = 2).
	if a2 := slotRenew(t, l, 4, "a", a, 4, 1); a2.Slots != 1 || l.heldTotal() != 4 {
		t.Fatalf("a renewed under N = 2: %+v, held %d; want 1 slot, 4 held", a2, l.heldTotal())
	}
	if _, err := l.Expire(a.ExpiresNanos + slotTTL); err != nil {
		t.Fatal(err)
	}
	checkSlots(t, l)

	h := newSlots(t, 3)
	old := slotGrant(t, h, 1, "old", 1, 3)
	if err := h.HoldAll(1, 1+slotTTL); err != nil {
		t.Fatal(err)
	}
	h.RaiseNextID(old.LeaseID + 1)
	if _, err := h.Renew(2, SlotRenewRequest{ClientID: "old", Incarnation: 1, LeaseID: old.LeaseID, DemandSlots: 3, TTLNanos: slotTTL, AckedVersion: 1}); !errors.Is(err, ErrLeaseExpired) {
		t.Fatalf("renewal of a lease the restore dropped: %v, want ErrLeaseExpired", err)
	}
	if g := slotGrant(t, h, 2, "a", 1, 3); g.Slots != 0 {
		t.Fatalf("grant during a restore hold: %+v", g)
	}
	if h.Free() != 0 {
		t.Fatalf("free %d during the hold", h.Free())
	}
	if g := slotGrant(t, h, 2+slotTTL, "b", 1, 3); g.Slots != 1 {
		// After the hold b gets its fair share of 3 beside a's demand of 3
		// (a, first by ID, would get 2 at its renewal).
		t.Fatalf("grant after the hold: %+v, want 1 slot", g)
	}
}

// TestSlotStateRoundTrip: a snapshot's state rebuilds an identical ledger.
func TestSlotStateRoundTrip(t *testing.T) {
	l := newSlots(t, 3)
	a := slotGrant(t, l, 1, "a", 1, 3)
	slotGrant(t, l, 2, "b", 1, 3)
	slotRenew(t, l, 3, "a", a, 3, 1)
	st := l.State()
	r, err := NewSlotLedgerFromState(st)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.State(), st) {
		t.Fatalf("round trip differs:\n%+v\n%+v", r.State(), st)
	}
	bad := l.State()
	bad.Leases[0].Current.Slots = 9
	if _, err := NewSlotLedgerFromState(bad); err == nil {
		t.Fatal("a state holding more than N restored")
	}
}

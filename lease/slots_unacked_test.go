package lease

import "testing"

// TestSlotUnackedCutPastOvercommitRestores: N lowered from 4 to 2 under a
// lease holding 3; the holder renews without acknowledging the cut, so
// its 3 slots stay held (rule S2: its requests may still run) past the
// time the old leases would have expired. That state is reachable, so
// CheckInvariants must accept it and a snapshot of it must restore (a
// follower installing it, an operator's restore); it refused with "rule
// S1: held slots 3 exceed N 2". Counting each lease's current count (its
// unacknowledged cuts aside), S1 still holds against N.
func TestSlotUnackedCutPastOvercommitRestores(t *testing.T) {
	const sec = NanosPerSecond
	l, err := NewSlotLedger(SlotConfig{Limit: 4, DriftPPM: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Grant(0, SlotGrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandSlots: 3, TTLNanos: 10 * sec})
	if err != nil || g.Slots != 3 {
		t.Fatalf("grant: %+v %v", g, err)
	}
	if err := l.Reconfigure(sec, SlotConfig{Limit: 2, DriftPPM: 1000}); err != nil {
		t.Fatal(err)
	}
	// Renewals that never acknowledge the cut, past the old expiry.
	for at := int64(2); at <= 20; at += 2 {
		r, err := l.Renew(at*sec, SlotRenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, DemandSlots: 3, TTLNanos: 10 * sec})
		if err != nil {
			t.Fatalf("renew at %d s: %v", at, err)
		}
		if r.Slots > 2 {
			t.Fatalf("renew at %d s: %d slots under N = 2", at, r.Slots)
		}
		if err := l.CheckInvariants(); err != nil {
			t.Fatalf("at %d s: %v", at, err)
		}
	}
	if _, err := l.ExpireThrough(21*sec, 19*sec); err != nil {
		t.Fatal(err)
	}
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSlotLedgerFromState(l.State()); err != nil {
		t.Fatalf("restore: %v", err)
	}
	// A second holder's grant would break S1 counting current counts:
	// still refused by the check.
	st := l.State()
	st.Leases = append(st.Leases, SlotLease{ClientID: "b", Incarnation: 1, ID: st.NextID, Current: SlotShare{Slots: 1, ExpiresNanos: 30 * sec, Version: 1}})
	st.NextID++
	if _, err := NewSlotLedgerFromState(st); err == nil {
		t.Fatal("a state holding current counts above N restored")
	}
}

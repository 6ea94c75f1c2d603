package lease

import "testing"

// slotOverrunHistory is a targeted history for the deadline-cancel rule
// (docs/concurrency.md §3 rule 6, §4), judged by the in-flight count alone
// (no oracle): N = 1, ρ = 0.1%, clocks exact, 1 ms message delays. Holder
// A is granted the slot, starts a request longer than the lease, and is
// then cut off from every server (its renewals are lost). Its client
// cancels the request's context at cancelAt; the work returns after the
// whole grace, the longest latency the rule covers. The coordinator
// expires A's lease at its expiry; holder B asks 1 ms later, is granted
// the slot and starts a request at once. It returns the most requests in
// flight at once (over every instant: in flight changes only at the
// events below), and A's request's end.
func slotOverrunHistory(t *testing.T, fault SlotClientFault) (maxInflight, aEnd, expiry int64) {
	t.Helper()
	const (
		rho   = 1000
		ttl   = 100_000_000 // 100 ms
		grace = ttl / 8
		delay = 1_000_000
	)
	l, err := NewSlotLedger(SlotConfig{Limit: 1, DriftPPM: rho}, 0)
	if err != nil {
		t.Fatal(err)
	}
	client := func() *SlotClient {
		c := newSlotClient(t, SlotClientConfig{DriftPPM: rho, CancelGraceNanos: grace})
		c.fault = fault
		return c
	}
	a, b := client(), client()
	// A: grant sent at 0, committed at 1 ms, answered at 2 ms.
	g, err := l.Grant(delay, SlotGrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, Weight: 1, DemandSlots: 1, TTLNanos: ttl})
	if err != nil || g.Slots != 1 {
		t.Fatalf("A's grant: %+v %v", g, err)
	}
	if !a.InstallGrant(g, 0, 2*delay) {
		t.Fatal("A's grant not installed")
	}
	r, ok := a.TryStart(2 * delay)
	cancelAt := r.EndBy
	if !ok {
		t.Fatal("A's request refused")
	}
	// Cut off from here: A's renewals are lost, so nothing moves its
	// deadline. Its request (3 leases long) ends when the work returns,
	// the grace after its context's cancellation.
	aEnd = min(2*delay+3*ttl, cancelAt+grace)
	expiry = g.ExpiresNanos
	if freed, err := l.Expire(expiry); err != nil || len(freed) != 1 {
		t.Fatalf("expire at %d: %v %v", expiry, freed, err)
	}
	// B asks just after the expiry and starts as soon as it is answered.
	bSend := expiry + delay
	gb, err := l.Grant(bSend+delay, SlotGrantRequest{ClientID: "b", Incarnation: 1, Seq: 1, Weight: 1, DemandSlots: 1, TTLNanos: ttl})
	if err != nil || gb.Slots != 1 {
		t.Fatalf("B's grant: %+v %v", gb, err)
	}
	bStart := bSend + 2*delay
	if !b.InstallGrant(gb, bSend, bStart) {
		t.Fatal("B's grant not installed")
	}
	if _, ok := b.TryStart(bStart); !ok {
		t.Fatal("B's request refused")
	}
	maxInflight = 1
	if aEnd > bStart { // a request ending at t is not in flight at t
		maxInflight = 2
	}
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return maxInflight, aEnd, expiry
}

// TestSlotOverrunHistory: under the deadline-cancel rule, A's request ends
// by its deadline, before the expiry that frees its slot, so B's request
// never runs alongside it.
func TestSlotOverrunHistory(t *testing.T) {
	if n, end, expiry := slotOverrunHistory(t, slotClientFaultNone); n > 1 || end > expiry {
		t.Fatalf("%d requests in flight > N 1 (A's ends at %d, its lease expires at %d)", n, end, expiry)
	}
}

package lease

import (
	"errors"
	"testing"
)

// slotRefusedRenewalHistory is a targeted history for rule 7 of
// docs/concurrency.md §3 (a request never outlives the lease it started
// under), judged by the in-flight count alone: N = 4, ρ = 0.1%, clocks
// exact, 1 ms message delays, the deadline-cancel rule with a grace of
// TTL/8 and work that returns the whole grace after its context's
// cancellation (the longest latency the rule covers). Holder A is granted
// the 4 slots and starts 4 requests three leases long. Then either
//
//   - (restore) the operator restores a snapshot saved before A's grant:
//     every slot is held for a lease duration, A's lease is dropped; or
//   - (reapply) the policy is deleted and re-applied TTL/4 later: the
//     ledger is kept, A's lease with it, but A's renewal in between is
//     refused (the policy is gone).
//
// A's renewal is refused, A drops the lease and acquires a new one as soon
// as it can (0 slots: the hold, or its replaced lease's held count, rule
// S6). Once the cluster frees the old 4 (the hold's end, or the replaced
// lease's expiry), holder B asks and starts the 2 slots of its fair share
// at once. It returns the most requests in flight at once, when A's old
// requests end, and the old lease's local deadline.
func slotRefusedRenewalHistory(t *testing.T, fault SlotClientFault, reapply bool) (maxInflight, aEnd, aDeadline int64) {
	t.Helper()
	const (
		n     = 4
		rho   = 1000
		ttl   = 100_000_000 // 100 ms
		grace = ttl / 8
		delay = 1_000_000
	)
	l, err := NewSlotLedger(SlotConfig{Limit: n, DriftPPM: rho}, 0)
	if err != nil {
		t.Fatal(err)
	}
	saved := l.State() // the operator's snapshot, before A's grant
	client := func() *SlotClient {
		c := newSlotClient(t, SlotClientConfig{DriftPPM: rho, CancelGraceNanos: grace})
		c.fault = fault
		return c
	}
	a, b := client(), client()
	grant := func(at int64, who string, seq uint64) SlotGrant {
		t.Helper()
		g, err := l.Grant(at, SlotGrantRequest{ClientID: who, Incarnation: 1, Seq: seq, Weight: 1, DemandSlots: n, TTLNanos: ttl})
		if err != nil {
			t.Fatalf("%s's grant at %d: %v", who, at, err)
		}
		return g
	}
	// A: grant sent at 0, committed at 1 ms, answered at 2 ms; 4 requests.
	g := grant(delay, "a", 1)
	if g.Slots != n || !a.InstallGrant(g, 0, 2*delay) {
		t.Fatalf("A's grant: %+v", g)
	}
	var aRuns []SlotStart
	for range n {
		r, ok := a.TryStart(2 * delay)
		if !ok {
			t.Fatal("A's request refused")
		}
		aRuns = append(aRuns, r)
	}
	aDeadline = a.Deadline()
	// At 30 ms: the restore, or the policy's deletion (re-applied at 55 ms).
	const cut, reapplied int64 = 30 * delay, 55 * delay
	if !reapply {
		r, err := NewSlotLedgerFromState(saved)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.HoldAll(cut, cut+ttl); err != nil {
			t.Fatal(err)
		}
		r.RaiseNextID(l.s.NextID)
		l = r
	}
	// A renews at 40 ms: refused (the lease is gone, or so is the policy:
	// then the ledger never sees it). A drops the lease.
	id, _ := a.Lease()
	if !reapply {
		if _, err := l.Renew(41*delay, SlotRenewRequest{ClientID: "a", Incarnation: 1, LeaseID: id, Weight: 1, DemandSlots: n, TTLNanos: ttl, AckedVersion: a.AckedVersion()}); !errors.Is(err, ErrLeaseNotFound) && !errors.Is(err, ErrLeaseExpired) {
			t.Fatalf("A's renewal after the restore: %v", err)
		}
	}
	a.Drop()
	// A acquires anew as soon as the policy is there: 0 slots.
	aSend := int64(41 * delay)
	if reapply {
		aSend = reapplied + delay
	}
	g2 := grant(aSend+delay, "a", 2)
	if g2.Slots != 0 || !a.InstallGrant(g2, aSend, aSend+2*delay) {
		t.Fatalf("A's second grant: %+v", g2)
	}
	// A's old requests: cancelled at their lease's cancel time (the rule
	// under test), returning the grace later.
	for _, r := range aRuns {
		aEnd = max(aEnd, min(2*delay+3*ttl, a.CancelAtOf(r.GrantNo)+grace))
	}
	// The cluster frees the old slots: the hold's end, or the replaced
	// lease's expiry. B asks just after, and starts what it gets at once.
	freed := cut + ttl
	if reapply {
		freed = g.ExpiresNanos
	}
	if _, err := l.Expire(freed); err != nil {
		t.Fatal(err)
	}
	bSend := freed + delay
	gb := grant(bSend+delay, "b", 1)
	bStart := bSend + 2*delay
	if gb.Slots == 0 || !b.InstallGrant(gb, bSend, bStart) {
		t.Fatalf("B's grant: %+v", gb)
	}
	var bRunning int64
	for range gb.Slots {
		if _, ok := b.TryStart(bStart); ok {
			bRunning++
		}
	}
	maxInflight = n    // A's 4, before B's grant
	if aEnd > bStart { // a request ending at t is not in flight at t
		maxInflight = max(maxInflight, n+bRunning)
	}
	if err := l.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return maxInflight, aEnd, aDeadline
}

// TestSlotRefusedRenewalHistory: across a restore, and across a delete and
// re-apply of the policy, A's old requests end by their lease's deadline,
// before the cluster frees their slots, so B's never run alongside them.
func TestSlotRefusedRenewalHistory(t *testing.T) {
	for _, reapply := range []bool{false, true} {
		if got, end, deadline := slotRefusedRenewalHistory(t, slotClientFaultNone, reapply); got > 4 || end > deadline {
			t.Fatalf("reapply %v: %d requests in flight > N 4 (A's old requests end at %d, their lease's deadline is %d)", reapply, got, end, deadline)
		}
	}
}

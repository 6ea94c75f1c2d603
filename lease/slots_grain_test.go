package lease

import "testing"

// The clock-reading margin of the slot client's deadline
// (slotClockGrainNanos, docs/concurrency.md §3 "Clock readings"), replayed
// deterministically on the property model's own clocks (slotHolder.local
// and slotSim.cluster read whole nanoseconds, truncating).

// slotGrainCase is one grant (and optionally a renewal) with zero message
// delays, the holder's clock at −ρ and the leader's at +ρ: the edge where
// ClientDeadline has no slack left, so only the margin keeps the client's
// deadline at or before the coordinator's expiry in real time.
type slotGrainCase struct {
	rho            int64
	grantAt, ttl   int64 // real time of the grant's send (and commit), its D
	renewAt, renew int64 // a renewal sent (and committed) at renewAt with D = renew; 0: none
}

// run returns the real times the client's deadline and the coordinator's
// expiry are reached.
func (c slotGrainCase) run(t *testing.T, fault SlotClientFault) (deadlineReal, expiryReal int64) {
	t.Helper()
	s := &slotSim{leaderSkew: c.rho}
	h := &slotHolder{skewPPM: -c.rho}
	l, err := NewSlotLedger(SlotConfig{Limit: 1, DriftPPM: c.rho}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cl := newSlotClient(t, SlotClientConfig{DriftPPM: c.rho, CancelGraceNanos: c.ttl / 8})
	cl.fault = fault
	g, err := l.Grant(s.cluster(c.grantAt), SlotGrantRequest{ClientID: "h0", Incarnation: 1, Seq: 1, Weight: 1, DemandSlots: 1, TTLNanos: c.ttl})
	if err != nil {
		t.Fatal(err)
	}
	if !cl.InstallGrant(g, h.local(c.grantAt), h.local(c.grantAt)) {
		t.Fatalf("%+v: grant not installed", c)
	}
	if c.renewAt > 0 {
		g, err = l.Renew(s.cluster(c.renewAt), SlotRenewRequest{ClientID: "h0", Incarnation: 1, LeaseID: g.LeaseID, Weight: 1, DemandSlots: 1, TTLNanos: c.renew, AckedVersion: cl.AckedVersion()})
		if err != nil {
			t.Fatal(err)
		}
		if !cl.InstallRenewal(g, h.local(c.renewAt), h.local(c.renewAt)) {
			t.Fatalf("%+v: renewal not installed", c)
		}
	}
	e, _ := l.NextExpiry()
	s.now = max(c.grantAt, c.renewAt)
	return h.realAtLocal(s.now, cl.Deadline()), s.realAt(e)
}

// TestSlotClockGrainRegression is the history the property model found
// (TestSlotProtocolKeepsBound/cancel_at_deadline, rapid seed
// 8112058976858992391): ρ = 10%, the holder's clock at −ρ and the leader's
// at +ρ, zero delays; a grant with D = 100000007 ns sent at 6 ns and
// committed at 13 ns, a renewal at 2006 ns whose answer's TTL is the time
// left to the expiry (99997815 ns), a request started then and cancelled a
// grace before the deadline, that returns after exactly the grace. Without
// the margin its deadline, and so its end, is reached at 90909111 ns,
// 1 ns after the expiry frees its slot (at 90909110 ns); with it, it ends
// before the expiry.
func TestSlotClockGrainRegression(t *testing.T) {
	const rho, ttl, grace = 100_000, 100_000_007, 12_500_000
	replay := func(fault SlotClientFault) (end, expiry int64, held int64) {
		s := &slotSim{leaderSkew: rho}
		h := &slotHolder{skewPPM: -rho}
		l, err := NewSlotLedger(SlotConfig{Limit: 1, DriftPPM: rho}, 0)
		if err != nil {
			t.Fatal(err)
		}
		cl := newSlotClient(t, SlotClientConfig{DriftPPM: rho, CancelGraceNanos: grace})
		cl.fault = fault
		g, err := l.Grant(s.cluster(13), SlotGrantRequest{ClientID: "h0", Incarnation: 1, Seq: 1, Weight: 1, DemandSlots: 1, TTLNanos: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if !cl.InstallGrant(g, h.local(6), h.local(13)) {
			t.Fatal("grant not installed")
		}
		g, err = l.Renew(s.cluster(2006), SlotRenewRequest{ClientID: "h0", Incarnation: 1, LeaseID: g.LeaseID, Weight: 1, DemandSlots: 1, TTLNanos: 50_000_003, AckedVersion: cl.AckedVersion()})
		if err != nil {
			t.Fatal(err)
		}
		if g.TTLNanos != 99_997_815 {
			t.Fatalf("renewal answer's TTL %d, want the 99997815 ns left to the expiry", g.TTLNanos)
		}
		if !cl.InstallRenewal(g, h.local(2006), h.local(2006)) {
			t.Fatal("renewal not installed")
		}
		r, ok := cl.TryStart(h.local(2006))
		cancelLocal := r.EndBy
		if !ok || cancelLocal != cl.cancelAt() {
			t.Fatalf("start: %d %v", cancelLocal, ok)
		}
		// Cancelled at the cancel time; the work returns after exactly the
		// grace (the latency the rule covers: at most the grace).
		s.now = 2006
		cancelReal := h.realAtLocal(s.now, cancelLocal)
		end = h.realAtLocal(cancelReal, h.local(cancelReal)+grace)
		e, _ := l.NextExpiry()
		expiry = s.realAt(e)
		if _, err := l.Expire(s.cluster(expiry)); err != nil {
			t.Fatal(err)
		}
		for i := range l.s.Leases {
			held += l.s.Leases[i].HeldAt(s.cluster(expiry))
		}
		return end, expiry, held
	}
	end, expiry, held := replay(slotClientFaultNone)
	if held != 0 {
		t.Fatalf("the coordinator still holds %d at the expiry", held)
	}
	if end > expiry {
		t.Fatalf("the request ends at %d ns, after the expiry freed its slot at %d ns", end, expiry)
	}
	// The control: the same history without the margin breaks the bound.
	if !faultsBuilt {
		return // the control needs -tags ration_faults (controls_test.go)
	}
	if end, expiry, _ := replay(slotClientFaultNoClockGrain); end <= expiry {
		t.Fatalf("control not caught: without the clock margin the request ends at %d ns, expiry %d ns", end, expiry)
	} else {
		t.Logf("without the margin: the request ends at %d ns, the expiry frees its slot at %d ns", end, expiry)
	}
}

// TestSlotClockGrainSweep: at the no-slack edge, over many send times
// (every nanosecond phase of the model's truncating clocks), grants and
// renewals, and several ρ, the client's deadline is reached no later than
// the coordinator's expiry in real time; without the margin it is reached
// after it at some of them (the control).
func TestSlotClockGrainSweep(t *testing.T) {
	var cases, broken int
	for _, rho := range []int64{1000, 50_000, MaxDriftPPM} {
		for _, ttl := range []int64{100_000_007, 1_000_000_000, 2_999_999_999} {
			for at := int64(1); at <= 3000; at++ {
				for _, c := range []slotGrainCase{
					{rho: rho, grantAt: at, ttl: ttl},
					{rho: rho, grantAt: 1, ttl: ttl, renewAt: 1 + at*7, renew: ttl / 2},
				} {
					cases++
					d, e := c.run(t, slotClientFaultNone)
					if d > e {
						t.Fatalf("%+v: the deadline is reached at %d ns, after the expiry at %d ns", c, d, e)
					}
					if !faultsBuilt {
						continue // the control needs -tags ration_faults
					}
					if d, e := c.run(t, slotClientFaultNoClockGrain); d > e {
						broken++
					}
				}
			}
		}
	}
	if !faultsBuilt {
		return
	}
	if broken == 0 {
		t.Fatalf("control not caught: without the clock margin no deadline of %d passed its expiry", cases)
	}
	t.Logf("without the clock margin %d of %d deadlines are reached after the expiry", broken, cases)
}

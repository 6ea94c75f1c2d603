package lease

// A lease-level simulation of slot utilization: one real SlotLedger and
// replicas running the real SlotClient rules, a 1 ms network each way,
// renewals at renew_after and early (50 ms) while an answer says AckSoon or
// RenewSoon, prompt expiries, perfect clocks (ρ used only in the deadline
// arithmetic). Each active replica keeps a queue of requests of fixed length
// waiting; what it measures is how much of N the protocol keeps busy and how
// fast slots move when demand shifts, not the network. The in-flight count
// is also checked against N at every step.
//
// Reproduce the figures with
//
//	go test -count=1 -run 'TestSlotUtilization' -v ./lease

import (
	"fmt"
	"testing"
)

type slotUtilSim struct {
	n          int64
	replicas   int
	ttl        int64
	renewAfter int64
	maxDur     int64 // M (0: the deadline-cancel rule, grace 0)
	reqLen     int64 // every request runs this long (<= M)
	queue      int64 // requests each active replica keeps waiting
	active     func(i int, now int64) bool
	dur        int64
	// fullAt is set by run: the first time at or after from at which the
	// replicas active then run all N.
	fullAt *int64
}

type slotUtilReplica struct {
	id       string
	cl       *SlotClient
	ends     []slotUtilRun
	seq      uint64
	pending  bool
	arriveAt int64 // when the pending request reaches the coordinator
	sendAt   int64
	isGrant  bool
	answer   *SlotGrant
	answerAt int64
	renewAt  int64
}

// slotUtilRun is a running request: when it ends, and its start.
type slotUtilRun struct {
	end   int64
	start SlotStart
}

const (
	slotUtilTick  = int64(1e6) // 1 ms
	slotUtilDelay = int64(1e6) // one way
	slotUtilEarly = int64(50e6)
)

// run returns the busy fraction of N averaged over [from, to) and the
// highest in-flight count seen.
func (p slotUtilSim) run(t *testing.T, from, to int64) (busy float64, peak int64) {
	l, err := NewSlotLedger(SlotConfig{Limit: p.n, DriftPPM: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]*slotUtilReplica, p.replicas)
	for i := range rs {
		cl, err := NewSlotClient(SlotClientConfig{DriftPPM: 1000, MaxDurationNanos: p.maxDur})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = &slotUtilReplica{id: fmt.Sprintf("r%02d", i), cl: cl}
	}
	var busySum, samples int64
	for now := int64(0); now < p.dur; now += slotUtilTick {
		if _, err := l.Expire(now); err != nil {
			t.Fatal(err)
		}
		for i, r := range rs {
			// Requests end.
			kept := r.ends[:0]
			for _, e := range r.ends {
				if e.end <= now {
					r.cl.End(e.start)
				} else {
					kept = append(kept, e)
				}
			}
			r.ends = kept
			waiting := int64(0)
			if p.active(i, now) {
				waiting = p.queue
			}
			// The coordinator applies a request that has arrived.
			if r.pending && r.answer == nil && now >= r.arriveAt {
				var g SlotGrant
				var err error
				demand := r.cl.Demand(waiting)
				if r.isGrant {
					r.seq++
					g, err = l.Grant(now, SlotGrantRequest{ClientID: r.id, Incarnation: 1, Seq: r.seq, DemandSlots: demand, TTLNanos: p.ttl})
				} else {
					id, _ := r.cl.Lease()
					g, err = l.Renew(now, SlotRenewRequest{ClientID: r.id, Incarnation: 1, LeaseID: id, DemandSlots: demand, TTLNanos: p.ttl, AckedVersion: r.cl.AckedVersion()})
				}
				if err != nil {
					t.Fatalf("%s at %d: %v", r.id, now, err)
				}
				r.answer, r.answerAt = &g, now+slotUtilDelay
			}
			// The answer arrives and is installed.
			if r.answer != nil && now >= r.answerAt {
				g := *r.answer
				if r.isGrant {
					r.cl.InstallGrant(g, r.sendAt, now)
				} else {
					r.cl.InstallRenewal(g, r.sendAt, now)
				}
				r.pending, r.answer = false, nil
				r.renewAt = now + p.renewAfter
				if g.AckSoon || g.RenewSoon {
					r.renewAt = now + slotUtilEarly
				}
			}
			// Send the next request when due: a renewal while the lease is
			// held, idle or not (an idle replica's acknowledgement is what
			// frees a lowered count before the lease's expiry), a grant
			// when there is work and no lease.
			if !r.pending && ((r.cl.Usable(now) && now >= r.renewAt) || (!r.cl.Usable(now) && waiting > 0)) {
				r.pending, r.isGrant, r.sendAt, r.arriveAt = true, !r.cl.Usable(now), now, now+slotUtilDelay
			}
			// Start what the rules allow.
			for k := int64(0); k < waiting; k++ {
				st, ok := r.cl.TryStart(now)
				if !ok {
					break
				}
				r.ends = append(r.ends, slotUtilRun{end: min(now+p.reqLen, st.EndBy), start: st})
			}
		}
		var inflight int64
		for _, r := range rs {
			inflight += int64(len(r.ends))
		}
		if inflight > p.n {
			t.Fatalf("%d in flight > N %d at %d", inflight, p.n, now)
		}
		peak = max(peak, inflight)
		if p.fullAt != nil && *p.fullAt < 0 && now >= from {
			var act int64
			for i, r := range rs {
				if p.active(i, now) {
					act += int64(len(r.ends))
				}
			}
			if act == p.n {
				*p.fullAt = now
			}
		}
		if now >= from && now < to {
			busySum += inflight
			samples++
		}
	}
	return float64(busySum) / float64(samples*p.n), peak
}

// TestSlotUtilization: four replicas, each offered three times its share
// of N = 12 (a queue of 9 always waiting), keep N busy; when two go idle,
// the other two take their slots within a few early renewals.
func TestSlotUtilization(t *testing.T) {
	base := slotUtilSim{n: 12, replicas: 4, ttl: 2e9, renewAfter: 250e6, maxDur: 100e6, reqLen: 20e6, queue: 9, dur: 10e9,
		active: func(int, int64) bool { return true }}
	busy, peak := base.run(t, 2e9, 10e9)
	t.Logf("4 replicas at 3x offered load, N = 12, M = 100 ms, requests 20 ms: %.1f%% of N busy from 2 s to 10 s, peak %d", 100*busy, peak)
	if busy < 0.95 {
		t.Errorf("busy %.3f of N, want >= 0.95", busy)
	}
	// Two replicas go idle at 5 s: within 0.5 s the other two run N.
	shift := base
	shift.active = func(i int, now int64) bool { return i < 2 || now < 5e9 }
	full := int64(-1)
	shift.fullAt = &full
	after, _ := shift.run(t, 5e9, 10e9)
	t.Logf("two of four go idle at 5 s: the other two run all N from %.0f ms after; %.1f%% of N busy from 5 s to 10 s", float64(full-5e9)/1e6, 100*after)
	if full < 0 || full > 5.5e9 {
		t.Errorf("the two active replicas ran all N only at %d ns, want within 0.5 s of the shift", full)
	}
	if after < 0.95 {
		t.Errorf("after the shift busy %.3f of N, want >= 0.95", after)
	}
	// Without M (the deadline-cancel rule, grace 0 here: a figure, not
	// the bound), the same.
	cancel := base
	cancel.maxDur = 0
	b2, _ := cancel.run(t, 2e9, 10e9)
	t.Logf("the same without M: %.1f%% of N busy", 100*b2)
	if b2 < 0.95 {
		t.Errorf("without M busy %.3f of N, want >= 0.95", b2)
	}
}

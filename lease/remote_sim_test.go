package lease

// The model of remote decisions by default (docs/design.md §3.4, "Remote
// decisions by default"; client/edgeroute.go, coordinator/remote.go): the
// lease-level simulation of share_sim_test.go with the client's routing
// rule. Every replica starts local (a lease of its own); at each
// evaluation (once a second) a local replica whose lease has been thin
// for two seconds (a known demand below H, and a cap under two costs or
// a contended key, ThinSeat; at once for one below one cost, starved)
// releases it and goes remote:
// its calls are decided from the lease of one more holder, the built-in
// edge, whose demand is what the remote replicas offer. A remote replica
// offered at least H for two seconds, and not demoted in the last
// DemoteAfter, comes back local. Every admission, local or remote, is
// checked against B + r·W (remoteResult.broken); the negative control (remoteNoLease, in
// remote_sim_faults_test.go) serves remote calls without the edge's lease.

import (
	"cmp"
	"fmt"
	"math"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
)

type remoteSim struct {
	shareSim
	promoteRate  int64 // H, milli-tokens per second
	promoteAfter int64 // also how long a lease must stay thin
	demoteAfter  int64
	// leasesOnly: no routing (every replica keeps its lease), the
	// comparison.
	leasesOnly bool
	// remoteNoLease: the broken variant: a remote call is admitted when
	// the edge has no usable lease (and without charging any).
	remoteNoLease bool
	// ignoreContended: the routing before Grant.contended: a seat of a
	// contended key is thin only by its cap (the contended rule's
	// negative control, and the comparison).
	ignoreContended bool
	// poisson: exponential gaps between a replica's calls (a load
	// balancer's random spread), not shareSim's uniform ones.
	poisson bool
	// routeFrom: no replica is evaluated before it (a key that turns
	// contended once its shares have settled).
	routeFrom int64
	// edgeCrashAt, if positive, is when the edge crashes (it loses its
	// bucket, its lease stays held until it expires); it is back, and
	// acquires again, edgeDownFor later.
	edgeCrashAt, edgeDownFor int64
	// offerEvery, if set, is replica i's gap between calls from now on
	// (0: shareSim.offerEvery).
	offerEveryAt func(i int, now int64) int64
}

type remoteReplica struct {
	shareReplica
	remote                        bool
	grant                         Grant
	contended                     bool // the ledger's Contended after h's last grant or renewal
	demand                        Demand
	thinSince, remoteAt, promoted int64
	evalOffered, lastEvalOffered  int64 // cost offered since the last evaluation (promote rule)
	hotSince                      int64
}

type remoteResult struct {
	shareResult
	toRemote, toLocal int
	remoteAtEnd       int
	edgeAdmitted      int64
	// broken is the worst window over B + r·W, nil if the bound held.
	broken *quotacheck.Violation
}

// gap is the time to r's next call: shareSim's uniform gap, or with
// poisson an exponential one of mean every (at least a nanosecond).
func (r *remoteReplica) gap(every int64, poisson bool) int64 {
	g := r.nextGap(every)
	if !poisson {
		return g
	}
	u := (float64(r.rng>>11) + 0.5) / (1 << 53) // in (0, 1)
	return max(int64(-math.Log(u)*float64(every)), 1)
}

func (p remoteSim) run(t *testing.T) remoteResult {
	t.Helper()
	l, err := newLedger(LedgerConfig{RateMilliPerSec: p.rate, CapacityMilli: p.capacity, StartFull: true, DriftPPM: p.driftPPM, MaxLeases: maxLeasesLimit}, 0)
	if err != nil {
		t.Fatal(err)
	}
	rs := make([]*remoteReplica, p.replicas)
	for i := range rs {
		rs[i] = &remoteReplica{shareReplica: shareReplica{id: fmt.Sprintf("r%04d", i), renewAt: int64(i) * p.renewEvery / int64(p.replicas),
			nextOffer: int64(i) * p.offerEvery / int64(p.replicas), rng: uint64(i)*0x9E3779B97F4A7C15 + 1}}
	}
	edge := &remoteReplica{shareReplica: shareReplica{id: "rationd/s0", renewAt: 0}}
	var hist []quotacheck.Admission
	res := remoteResult{shareResult: shareResult{byReplica: make([]int64, p.replicas)}}
	// renew acquires or renews h's lease at now.
	renew := func(h *remoteReplica, now int64) {
		d := h.meter.report(now, h.offered, h.maxCost)
		h.offered, h.maxCost = 0, 0
		h.demand = d
		if !d.Known {
			d.RateMilliPerSec, d.BurstMilli = unknownDemand, unknownDemand
		}
		var g Grant
		if h.bucket == nil || now >= h.deadline {
			h.seq++
			g, err = l.Grant(now, GrantRequest{ClientID: h.id, Incarnation: 1, Seq: h.seq, DemandRateMilliPerSec: d.RateMilliPerSec,
				DemandBurstMilli: d.BurstMilli, DemandMaxCostMilli: d.MaxCostMilli, TTLNanos: p.ttl})
			if err != nil {
				t.Fatal(err)
			}
			h.leaseID = g.LeaseID
			if h.bucket, err = newTokenBucketWithLevel(p.bucketConfig(g), now, g.StartMilli); err != nil {
				t.Fatal(err)
			}
			h.deadline = ClientDeadline(now, g.TTLNanos, p.driftPPM)
		} else {
			g, err = l.Renew(now, RenewRequest{ClientID: h.id, Incarnation: 1, LeaseID: h.leaseID, DemandRateMilliPerSec: d.RateMilliPerSec,
				DemandBurstMilli: d.BurstMilli, DemandMaxCostMilli: d.MaxCostMilli, TTLNanos: p.ttl})
			if err != nil {
				t.Fatal(err)
			}
			must2(t, h.bucket.SetRate(now, p.bucketConfig(g).RateMilliPerSec))
			must2(t, h.bucket.SetCapacity(now, g.CapMilli))
			h.deadline = max(h.deadline, ClientDeadline(now, g.TTLNanos, p.driftPPM))
		}
		h.grant, h.contended = g, l.Contended()
		h.renewAt = now + p.renewEvery
		if err := l.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	// release gives h's lease back with its unspent tokens (a demotion:
	// the bucket stops minting and is drained first).
	release := func(h *remoteReplica, now int64) {
		if h.bucket != nil && now < h.deadline {
			must2(t, h.bucket.SetRate(now, 0))
			unspent, err := h.bucket.Drain(now)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Release(now, ReleaseRequest{ClientID: h.id, Incarnation: 1, LeaseID: h.leaseID, UnspentMilli: unspent}); err != nil {
				t.Fatal(err)
			}
		}
		h.bucket, h.meter, h.offered, h.maxCost = nil, DemandMeter{}, 0, 0
	}
	thin := func(h *remoteReplica) (thin, starved bool) {
		floor := max(h.demand.MaxCostMilli, p.cost, MilliPerToken)
		est := h.demand.RateMilliPerSec * 4 / 5
		if !h.demand.Known || est >= p.promoteRate {
			return false, false
		}
		return ThinSeat(h.grant.CapMilli, floor, h.contended && !p.ignoreContended)
	}
	admit := func(i int, h *remoteReplica, b *remoteReplica, now int64) {
		ok := false
		switch {
		case b.bucket != nil && now < b.deadline:
			d, err := b.bucket.Admit(now, p.cost)
			if err != nil {
				t.Fatal(err)
			}
			ok = d.Allowed
		case h.remote && p.remoteNoLease:
			ok = true // the broken variant: served by no lease holder
		}
		if !ok {
			return
		}
		hist = append(hist, quotacheck.Admission{AtNanos: now, CostMilli: p.cost, Who: b.id})
		if now >= p.from {
			res.admitted += p.cost
			res.byReplica[i] += p.cost
			if h.remote {
				res.edgeAdmitted += p.cost
			}
		}
	}
	nextEval := max(int64(sec), p.routeFrom)
	for now := int64(0); now < p.dur; now += p.tick {
		if next, ok := l.NextExpiry(); ok && next <= now {
			if _, err := l.Expire(now); err != nil {
				t.Fatal(err)
			}
		}
		if now >= nextEval && now >= p.routeFrom {
			nextEval += sec
			for _, r := range rs {
				rate := (r.evalOffered - r.lastEvalOffered) // per second: one evaluation a second
				r.lastEvalOffered = r.evalOffered
				if r.remote {
					if rate < p.promoteRate || now-r.remoteAt < p.demoteAfter {
						r.hotSince = 0
						continue
					}
					if r.hotSince == 0 {
						r.hotSince = now - sec
					}
					if now-r.hotSince >= p.promoteAfter {
						r.remote, r.promoted, r.hotSince, r.renewAt = false, now, 0, now
						res.toLocal++
					}
					continue
				}
				var isThin, starved bool
				if !p.leasesOnly && r.bucket != nil {
					isThin, starved = thin(r)
				}
				if !isThin {
					r.thinSince = 0
					continue
				}
				if r.thinSince == 0 {
					r.thinSince = now
				}
				if (starved || now-r.thinSince >= p.promoteAfter) && (r.remoteAt == 0 || now-r.promoted >= p.demoteAfter) {
					release(r, now)
					r.remote, r.remoteAt, r.thinSince = true, now, 0
					res.toRemote++
				}
			}
		}
		if p.edgeCrashAt > 0 && now >= p.edgeCrashAt && now < p.edgeCrashAt+p.tick {
			edge.bucket, edge.meter, edge.offered, edge.maxCost = nil, DemandMeter{}, 0, 0
			edge.renewAt = now + p.edgeDownFor
		}
		// The edge holds a lease once a replica is remote.
		if now >= edge.renewAt && (edge.bucket != nil || res.toRemote > 0) {
			renew(edge, now)
		}
		for i, r := range rs {
			if !r.remote && now >= r.renewAt {
				renew(r, now)
			}
			if !p.active(i) || now < r.nextOffer {
				continue
			}
			every := p.offerEvery
			if p.offerEveryAt != nil {
				every = cmp.Or(p.offerEveryAt(i, now), every)
			}
			for ; r.nextOffer <= now; r.nextOffer += r.gap(every, p.poisson) {
				r.evalOffered += p.cost
				if r.remote {
					edge.offered += p.cost
					edge.maxCost = max(edge.maxCost, p.cost)
					admit(i, r, edge, now)
					continue
				}
				r.offered += p.cost
				r.maxCost = max(r.maxCost, p.cost)
				admit(i, r, r, now)
			}
		}
	}
	for _, r := range rs {
		if r.remote {
			res.remoteAtEnd++
		}
	}
	res.broken = quotacheck.Check(hist, quotacheck.Bound{CapacityMilli: p.capacity, RateMilliPerSec: p.rate})
	span := p.dur - p.from
	res.perSecond = float64(res.admitted) / MilliPerToken / (float64(span) / float64(NanosPerSecond))
	res.ofRate = float64(res.admitted) / (float64(p.rate) * float64(span) / float64(NanosPerSecond))
	return res
}

// trickleSim: n replicas on r = 100/s, B = 100, each offering one call of
// cost 1 every offerEvery (jittered), the client's routing defaults
// (H = 5/s, T = 2 s, T' = 30 s); D = 5 s, renewals every D/3.
func trickleSim(n int, offerEvery int64) remoteSim {
	return remoteSim{shareSim: shareSim{rate: 100_000, capacity: 100_000, ttl: 5 * sec, renewEvery: 5 * sec / 3, driftPPM: 1000, replicas: n,
		active: everyone, offerEvery: offerEvery, cost: 1000, tick: 10 * 1e6, dur: 40 * sec, from: 10 * sec},
		promoteRate: 5000, promoteAfter: 2 * sec, demoteAfter: 30 * sec}
}

// routedAndLeasesOnly runs p routed and again with leases only, and fails
// t if either breaks B + r·W.
func routedAndLeasesOnly(t *testing.T, p remoteSim) (routed, leasesOnly remoteResult) {
	t.Helper()
	routed = p.run(t)
	if routed.broken != nil {
		t.Fatalf("bound broken: %v", routed.broken)
	}
	p.leasesOnly = true
	leasesOnly = p.run(t)
	if leasesOnly.broken != nil {
		t.Fatalf("bound broken with leases only: %v", leasesOnly.broken)
	}
	return routed, leasesOnly
}

// TestRemoteSimTrickle: 1000 replicas at 0.3/s each (3·r in total): with
// leases alone the no-slivers division leaves them near 30% of r; routed,
// the thin leases go remote and the edge's one lease serves them: ≥ 90%
// of r from 10 s on, within B + r·W.
func TestRemoteSimTrickle(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s simulation of 1000 replicas")
	}
	res, lo := routedAndLeasesOnly(t, trickleSim(1000, sec*10/3))
	t.Logf("1000 replicas at 0.3/s, r=100/s, B=100: %.1f%% of r from 10 s to 40 s (%.1f%% through the edge; leases only: %.1f%%); %d switched remote, %d back local, %d remote at the end",
		100*res.ofRate, 100*float64(res.edgeAdmitted)/max(float64(res.admitted), 1), 100*lo.ofRate, res.toRemote, res.toLocal, res.remoteAtEnd)
	if res.ofRate < 0.90 {
		t.Fatalf("admitted %.1f%% of r, want >= 90%%", 100*res.ofRate)
	}
}

// TestRemoteSimSaturatedSeats: 100 replicas at 1.6/s each on r = 100/s,
// B = 100: every replica's fair share is a one-token cap refilled at
// 1/s, which it saturates but cannot bank a second cost in, so with
// leases alone each call that finds its bucket empty waits for the next
// refill (periodic calls every 625 ms: 80% of r at best). A cap under
// two costs is thin (ThinSeat), so the replicas go remote and the edge's
// one lease, holding all of B, banks their variance: ≥ 95% of r, within
// B + r·W.
func TestRemoteSimSaturatedSeats(t *testing.T) {
	res, lo := routedAndLeasesOnly(t, trickleSim(100, sec*5/8))
	t.Logf("100 replicas at 1.6/s, r=100/s, B=100: %.1f%% of r from 10 s to 40 s (%.1f%% through the edge; leases only: %.1f%%); %d switched remote, %d remote at the end",
		100*res.ofRate, 100*float64(res.edgeAdmitted)/max(float64(res.admitted), 1), 100*lo.ofRate, res.toRemote, res.remoteAtEnd)
	if res.ofRate < 0.95 || lo.ofRate >= 0.95 {
		t.Fatalf("admitted %.1f%% of r routed, %.1f%% with leases only: want >= 95%% routed, and the case to need it", 100*res.ofRate, 100*lo.ofRate)
	}
}

// contendedSim: 10 replicas calling at random, 2/s each on average, on
// r = 20/s, B = 40, routed from 10 s on (their shares settled), measured
// from 20 s: each
// replica's equal share is about its own demand, with a 4-token cap (two
// costs and more: not thin by the cap rule), and their demands reported
// with headroom sum above r: a contended key.
func contendedSim() remoteSim {
	p := trickleSim(10, sec/2)
	p.rate, p.capacity, p.poisson = 20_000, 40_000, true
	p.routeFrom, p.from, p.dur = 10*sec, 20*sec, 50*sec
	return p
}

// TestRemoteSimContendedTrickle: on contendedSim's key, the seats the cap
// rule leaves (those whose share grew to two tokens as others went
// remote) each hold about their own demand: below it a seat refuses
// what its small bucket cannot bank, above it it leaves unused what the
// edge's callers are refused. With the contended rule every such seat
// goes remote and the edge's one lease serves them all: ≥ 95% of r,
// within B + r·W. The cap rule alone (ignoreContended, the negative
// control in remote_sim_faults_test.go) must stay below that.
func TestRemoteSimContendedTrickle(t *testing.T) {
	res, lo := routedAndLeasesOnly(t, contendedSim())
	t.Logf("10 replicas at 2/s, r=20/s, B=40: %.1f%% of r from 20 s to 50 s (%.1f%% through the edge; leases only: %.1f%%); %d switched remote, %d remote at the end",
		100*res.ofRate, 100*float64(res.edgeAdmitted)/max(float64(res.admitted), 1), 100*lo.ofRate, res.toRemote, res.remoteAtEnd)
	if res.ofRate < minContendedShare {
		t.Fatalf("admitted %.1f%% of r, want >= %.0f%%", 100*res.ofRate, 100*minContendedShare)
	}
}

// minContendedShare is TestRemoteSimContendedTrickle's bound.
const minContendedShare = 0.95

// TestRemoteSimHotStayLocal: 10 replicas at 30/s each on the same policy:
// every lease is thick (cap 10), so no key goes remote and nothing
// switches; utilization as with leases alone.
func TestRemoteSimHotStayLocal(t *testing.T) {
	res := trickleSim(10, sec/30).run(t)
	if res.broken != nil {
		t.Fatalf("bound broken: %v", res.broken)
	}
	t.Logf("10 replicas at 30/s: %.1f%% of r; %d switched remote", 100*res.ofRate, res.toRemote)
	if res.toRemote != 0 || res.ofRate < 0.90 {
		t.Fatalf("%d switched remote, %.1f%% of r: hot replicas must keep their leases and use r", res.toRemote, 100*res.ofRate)
	}
}

// switchSim: 200 replicas at 0.3/s go remote; from 20 s on, ten of them
// call at 20/s, are promoted back to leases of their own (after the 30 s
// since their demotion), and the rest stay remote; at 50 s the edge
// crashes and is back 5 s later.
func switchSim() remoteSim {
	p := trickleSim(200, sec*10/3)
	p.dur, p.from = 70*sec, 10*sec
	p.edgeCrashAt, p.edgeDownFor = 50*sec, 5*sec
	p.offerEveryAt = func(i int, now int64) int64 {
		if i%20 == 3 && now >= 20*sec {
			return sec / 20
		}
		return 0
	}
	return p
}

// TestRemoteSimSwitches: keys switch remote, then back local as their
// demand rises, and the edge's lease is lost and taken again; every
// admission, local or remote, stays within B + r·W.
func TestRemoteSimSwitches(t *testing.T) {
	res := switchSim().run(t)
	if res.broken != nil {
		t.Fatalf("bound broken: %v", res.broken)
	}
	t.Logf("200 replicas, 10 stepping up at 20 s, the edge down at 50 s for 5 s: %.1f%% of r; %d switched remote, %d back local, %d remote at the end",
		100*res.ofRate, res.toRemote, res.toLocal, res.remoteAtEnd)
	if res.toRemote < 190 || res.toLocal < 10 {
		t.Fatalf("%d switched remote, %d back local: want every replica remote, and the ten hot ones back", res.toRemote, res.toLocal)
	}
}

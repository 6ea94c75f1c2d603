package lease

// Lease-level simulations of utilization: one real Ledger, many replicas,
// each with the client's bucket arithmetic (a TokenBucket minting at
// ClientMintRate, renewals that change rate and cap but add no tokens) and
// the client's own demand estimate (DemandMeter). No latency, perfect
// clocks: what they measure is the division of the budget, not the
// network. Every admission is also checked against B + r·W.
//
// Reproduce the figures with
//
//	go test -count=1 -run 'TestShareSim' -v ./lease

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
)

type shareSim struct {
	rate, capacity int64 // r (milli/s), B (milli)
	ttl            int64 // D
	renewEvery     int64
	driftPPM       int64
	replicas       int
	active         func(i int) bool
	offerEvery     int64 // each active replica offers cost every offerEvery ns
	cost           int64 // milli
	tick           int64 // time step
	dur, from      int64 // run for dur; measure admissions in [from, dur)
	fault          Fault
}

type shareReplica struct {
	id                string
	leaseID           LeaseID
	bucket            *TokenBucket
	deadline, renewAt int64
	nextOffer         int64
	meter             DemandMeter
	offered, maxCost  int64
	seq               uint64
}

type shareResult struct {
	admitted  int64 // milli, in [from, dur)
	perSecond float64
	ofRate    float64 // admitted / (r·(dur-from))
	byReplica []int64
}

func (p shareSim) run(t *testing.T) shareResult {
	t.Helper()
	l, err := NewLedger(LedgerConfig{RateMilliPerSec: p.rate, CapacityMilli: p.capacity, StartFull: true, DriftPPM: p.driftPPM, MaxLeases: MaxLeasesLimit}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.injectFault(p.fault)
	rs := make([]*shareReplica, p.replicas)
	for i := range rs {
		// Replicas start, and so renew, spread over one renewal interval.
		rs[i] = &shareReplica{id: fmt.Sprintf("r%04d", i), renewAt: int64(i) * p.renewEvery / int64(p.replicas), nextOffer: int64(i) * p.offerEvery / int64(p.replicas)}
	}
	var hist []quotacheck.Admission
	res := shareResult{byReplica: make([]int64, p.replicas)}
	demand := func(r *shareReplica, now int64) Demand {
		d := r.meter.Report(now, r.offered, r.maxCost)
		r.offered, r.maxCost = 0, 0
		if !d.Known {
			d.RateMilliPerSec, d.BurstMilli = unknownDemand, unknownDemand
		}
		return d
	}
	for now := int64(0); now < p.dur; now += p.tick {
		if next, ok := l.NextExpiry(); ok && next <= now {
			if _, err := l.Expire(now); err != nil {
				t.Fatal(err)
			}
		}
		for i, r := range rs {
			if now >= r.renewAt {
				d := demand(r, now)
				if r.bucket == nil || now >= r.deadline {
					r.seq++
					g, err := l.Grant(now, GrantRequest{ClientID: r.id, Incarnation: 1, Seq: r.seq, DemandRateMilliPerSec: d.RateMilliPerSec,
						DemandBurstMilli: d.BurstMilli, DemandMaxCostMilli: d.MaxCostMilli, TTLNanos: p.ttl})
					if err != nil {
						t.Fatal(err)
					}
					r.leaseID = g.LeaseID
					r.bucket, err = NewTokenBucketWithLevel(BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: ClientMintRate(g.RateMilliPerSec, p.driftPPM)}, now, g.StartMilli)
					if err != nil {
						t.Fatal(err)
					}
					r.deadline = ClientDeadline(now, g.TTLNanos, p.driftPPM)
				} else {
					g, err := l.Renew(now, RenewRequest{ClientID: r.id, Incarnation: 1, LeaseID: r.leaseID, DemandRateMilliPerSec: d.RateMilliPerSec,
						DemandBurstMilli: d.BurstMilli, DemandMaxCostMilli: d.MaxCostMilli, TTLNanos: p.ttl})
					if err != nil {
						t.Fatal(err)
					}
					must2(t, r.bucket.SetRate(now, ClientMintRate(g.RateMilliPerSec, p.driftPPM)))
					must2(t, r.bucket.SetCapacity(now, g.CapMilli))
					r.deadline = max(r.deadline, ClientDeadline(now, g.TTLNanos, p.driftPPM))
				}
				r.renewAt = now + p.renewEvery
				if err := l.CheckInvariants(); err != nil && p.fault == FaultNone {
					t.Fatal(err)
				}
			}
			if !p.active(i) || now < r.nextOffer {
				continue
			}
			for ; r.nextOffer <= now; r.nextOffer += p.offerEvery {
				r.offered += p.cost
				r.maxCost = max(r.maxCost, p.cost)
				if now >= r.deadline {
					continue
				}
				d, err := r.bucket.Admit(now, p.cost)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					hist = append(hist, quotacheck.Admission{AtNanos: now, CostMilli: p.cost, Who: r.id})
					if now >= p.from {
						res.admitted += p.cost
						res.byReplica[i] += p.cost
					}
				}
			}
		}
	}
	if v := quotacheck.Check(hist, quotacheck.Bound{CapacityMilli: p.capacity, RateMilliPerSec: p.rate}); v != nil {
		t.Fatalf("bound broken: %v", v)
	}
	span := p.dur - p.from
	res.perSecond = float64(res.admitted) / MilliPerToken / (float64(span) / float64(NanosPerSecond))
	res.ofRate = float64(res.admitted) / (float64(p.rate) * float64(span) / float64(NanosPerSecond))
	return res
}

func must2(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func everyone(int) bool { return true }

// manyReplicas: 1000 replicas on r = 100/s, B = 100, every one offering
// 10 requests of cost 1 per second; D = 5 s, renewals every D/3.
func manyReplicas(fault Fault) shareSim {
	return shareSim{rate: 100_000, capacity: 100_000, ttl: 5 * sec, renewEvery: 5 * sec / 3, driftPPM: 1000, replicas: 1000,
		active: everyone, offerEvery: sec / 10, cost: 1000, tick: 10 * 1e6, dur: 40 * sec, from: 15 * sec, fault: fault}
}

// TestShareSimManyReplicas: B/n = 0.1 token, below every cost; the budget
// must go as whole-token caps to a subset, not in slivers.
func TestShareSimManyReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s simulation of 1000 replicas")
	}
	res := manyReplicas(FaultNone).run(t)
	holders := 0
	for _, a := range res.byReplica {
		if a > 0 {
			holders++
		}
	}
	t.Logf("1000 replicas, r=100/s, B=100, all offering: %.2f/s admitted from 15 s to 40 s = %.1f%% of r, by %d replicas", res.perSecond, 100*res.ofRate, holders)
	if res.ofRate < 0.90 {
		t.Fatalf("admitted %.1f%% of r, want >= 90%%", 100*res.ofRate)
	}
}

// TestShareSimFewActive: 100 replicas, 5 of them offering (4/s each, twice
// their share), 95 idle; r = 10/s, B = 10. The idle ones report zero
// demand, so the active 5 hold (nearly) all of r.
func TestShareSimFewActive(t *testing.T) {
	p := shareSim{rate: 10_000, capacity: 10_000, ttl: 5 * sec, renewEvery: 5 * sec / 3, driftPPM: 1000, replicas: 100,
		active: func(i int) bool { return i%20 == 7 }, offerEvery: sec / 4, cost: 1000, tick: 10 * 1e6, dur: 60 * sec, from: 20 * sec}
	res := p.run(t)
	t.Logf("100 replicas, 5 active, r=10/s, B=10: the 5 admitted %.2f/s from 20 s to 60 s = %.1f%% of r", res.perSecond, 100*res.ofRate)
	if res.ofRate < 0.90 {
		t.Fatalf("the active 5 admitted %.1f%% of r, want >= 90%%", 100*res.ofRate)
	}
}

// TestShareSimNegativeControls: with plain fair shares (no floors, no
// leftovers) the same simulations must fall short, or they prove nothing.
func TestShareSimNegativeControls(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s simulation of 1000 replicas")
	}
	res := manyReplicas(FaultSliverShares).run(t)
	t.Logf("sliver shares, 1000 replicas: %.1f%% of r", 100*res.ofRate)
	if res.ofRate >= 0.90 {
		t.Fatalf("the simulation did not catch sliver shares: %.1f%% of r", 100*res.ofRate)
	}
}

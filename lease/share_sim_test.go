package lease

// Lease-level simulations of utilization: one real Ledger, many replicas,
// each with the client's bucket arithmetic (a TokenBucket minting at
// clientMintRate, renewals that change rate and cap but add no tokens) and
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
	ratePeriod     int64 // the ledger's rate period (0: per second)
	// floorDrift mints as clients did before rate periods: each share
	// r_i/(1+ρ) per second, rounded down (a negative control).
	floorDrift bool
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
	rng               uint64 // xorshift state: offers come at jittered times
}

// nextGap returns the time to the replica's next offer: uniform in
// [every/2, 3·every/2), so offers are not all in phase with refills.
func (r *shareReplica) nextGap(every int64) int64 {
	r.rng ^= r.rng << 13
	r.rng ^= r.rng >> 7
	r.rng ^= r.rng << 17
	return every/2 + int64(r.rng%uint64(every))
}

type shareResult struct {
	admitted  int64 // milli, in [from, dur)
	perSecond float64
	ofRate    float64 // admitted / (r·(dur-from))
	byReplica []int64
}

func (p shareSim) run(t *testing.T) shareResult {
	t.Helper()
	l, err := newLedger(LedgerConfig{RateMilliPerSec: p.rate, CapacityMilli: p.capacity, StartFull: true, DriftPPM: p.driftPPM, MaxLeases: maxLeasesLimit, RatePeriodNanos: p.ratePeriod}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.injectFault(p.fault)
	rs := make([]*shareReplica, p.replicas)
	for i := range rs {
		// Replicas start, and so renew, spread over one renewal interval.
		rs[i] = &shareReplica{id: fmt.Sprintf("r%04d", i), renewAt: int64(i) * p.renewEvery / int64(p.replicas), nextOffer: int64(i) * p.offerEvery / int64(p.replicas), rng: uint64(i)*0x9E3779B97F4A7C15 + 1}
	}
	var hist []quotacheck.Admission
	res := shareResult{byReplica: make([]int64, p.replicas)}
	demand := func(r *shareReplica, now int64) Demand {
		d := r.meter.report(now, r.offered, r.maxCost)
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
					r.bucket, err = newTokenBucketWithLevel(p.bucketConfig(g), now, g.StartMilli)
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
					must2(t, r.bucket.SetRate(now, p.bucketConfig(g).RateMilliPerSec))
					must2(t, r.bucket.SetCapacity(now, g.CapMilli))
					r.deadline = max(r.deadline, ClientDeadline(now, g.TTLNanos, p.driftPPM))
				}
				r.renewAt = now + p.renewEvery
				if err := l.CheckInvariants(); err != nil && p.fault == faultNone {
					t.Fatal(err)
				}
			}
			if !p.active(i) || now < r.nextOffer {
				continue
			}
			for ; r.nextOffer <= now; r.nextOffer += r.nextGap(p.offerEvery) {
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
	// quotacheck takes a rate per second; a rate per period is checked
	// against its ceiling per second (exact for per-second rates).
	period := LedgerConfig{RatePeriodNanos: p.ratePeriod}.RatePeriod()
	if v := quotacheck.Check(hist, quotacheck.Bound{CapacityMilli: p.capacity, RateMilliPerSec: ceilMulDiv(p.rate, NanosPerSecond, period)}); v != nil {
		t.Fatalf("bound broken: %v", v)
	}
	span := p.dur - p.from
	res.perSecond = float64(res.admitted) / MilliPerToken / (float64(span) / float64(NanosPerSecond))
	res.ofRate = float64(res.admitted) / (float64(p.rate) * float64(span) / float64(period))
	return res
}

// bucketConfig is the client's bucket for a grant (client/loop.go
// install): the share over the rate period stretched by (1+ρ).
func (p shareSim) bucketConfig(g Grant) BucketConfig {
	if p.floorDrift {
		return BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: clientMintRate(g.RateMilliPerSec, p.driftPPM)}
	}
	return BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: g.RateMilliPerSec, PeriodNanos: ClientPeriodNanos(p.ratePeriod, p.driftPPM)}
}

func must2(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func everyone(int) bool { return true }

// manyReplicas: 1000 replicas on r = 100/s, B = 100, every one offering
// 10 requests of cost 1 per second (at jittered times); D = 5 s, renewals
// every D/3.
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
	res := manyReplicas(faultNone).run(t)
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

// smallRate: r = 0.016/s (16 milli-tokens a second), B = 20, cost 1, over
// n replicas each offering a request a second, for 20000 s.
func smallRate(n int, floorDrift bool) shareSim {
	return shareSim{rate: 16, capacity: 20_000, ttl: 5 * sec, renewEvery: 5 * sec / 3, driftPPM: 1000, replicas: n,
		active: everyone, offerEvery: sec, cost: 1000, tick: sec / 10, dur: 20000 * sec, from: 1000 * sec, floorDrift: floorDrift}
}

// TestShareSimSmallRates: a rate below one token a second is used in
// full however many replicas share it; rounding each share's r_i/(1+ρ)
// down per second (the negative control) used 94%, 81% and 0% of it.
func TestShareSimSmallRates(t *testing.T) {
	if testing.Short() {
		t.Skip("long simulations")
	}
	for _, n := range []int{1, 3, 20} {
		res := smallRate(n, false).run(t)
		old := smallRate(n, true).run(t)
		t.Logf("r=0.016/s, %2d replicas: %.1f%% of r used (rounding shares per second: %.1f%%)", n, 100*res.ofRate, 100*old.ofRate)
		if res.ofRate < 0.97 {
			t.Errorf("%d replicas used %.1f%% of r = 0.016/s, want >= 97%%", n, 100*res.ofRate)
		}
		if n > 1 && old.ofRate >= 0.97 {
			t.Errorf("the negative control (rounded shares) used %.1f%% with %d replicas: the simulation cannot tell", 100*old.ofRate, n)
		}
	}
}

// TestShareSimOnePerMinute: rate: 1/m (1000 milli-tokens per 60 s) across
// 3 replicas each offering a request a second, with B = 1 (one replica
// holds the budget: B/3 is below the cost) and B = 3 (a third each): one
// admission a minute in the long run, over 60 minutes of simulated time.
func TestShareSimOnePerMinute(t *testing.T) {
	for _, b := range []int64{1000, 3000} {
		p := shareSim{rate: 1000, ratePeriod: 60 * sec, capacity: b, ttl: 5 * sec, renewEvery: 5 * sec / 3, driftPPM: 1000, replicas: 3,
			active: everyone, offerEvery: sec, cost: 1000, tick: sec / 10, dur: 65 * 60 * sec, from: 5 * 60 * sec}
		res := p.run(t)
		n := res.admitted / MilliPerToken
		t.Logf("rate 1/m, B=%d, 3 replicas: %d admissions in the 60 minutes from minute 5 to 65 (%.3f of r); by replica %v", b/MilliPerToken, n, res.ofRate, res.byReplica)
		// B + r·W bounds it above; the drift factor costs 0.1%, and a
		// one-token cap sits full until the next offer (< 1 s a minute).
		if n < 58 || n > 60+b/MilliPerToken {
			t.Fatalf("B=%d: %d admissions in 60 minutes at one a minute", b/MilliPerToken, n)
		}
	}
}

// idleReturn plays examples/http-api's tenant at the lease level: one
// replica spends its burst of 10 in two costs of 5, goes idle for 30 s of
// renewals, and comes back with two more. It returns how many of those two
// its bucket admitted.
func idleReturn(t *testing.T, fault Fault) int {
	t.Helper()
	const ttl, renew = 5 * sec, 5 * sec / 3
	l, err := newLedger(LedgerConfig{RateMilliPerSec: 5000, CapacityMilli: 10_000, StartFull: true, DriftPPM: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.injectFault(fault)
	var m DemandMeter
	d := m.report(0, 0, 0)
	g, err := l.Grant(0, GrantRequest{ClientID: "a", Incarnation: 1, Seq: 1, DemandRateMilliPerSec: unknownDemand, DemandBurstMilli: unknownDemand, TTLNanos: ttl})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newTokenBucketWithLevel(BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: g.RateMilliPerSec, PeriodNanos: ClientPeriodNanos(0, 1000)}, 0, g.StartMilli)
	offered, maxCost := int64(0), int64(0)
	for _, at := range []int64{1, 2} {
		if dd, _ := b.Admit(at, 5000); !dd.Allowed {
			t.Fatalf("first reports: %+v", dd)
		}
		offered, maxCost = offered+5000, 5000
	}
	for now := renew; now <= 30*sec+renew; now += renew {
		d = m.report(now, offered, maxCost)
		offered, maxCost = 0, 0
		g, err = l.Renew(now, RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: g.LeaseID, DemandRateMilliPerSec: d.RateMilliPerSec,
			DemandBurstMilli: d.BurstMilli, DemandMaxCostMilli: d.MaxCostMilli, TTLNanos: ttl})
		if err != nil {
			t.Fatal(err)
		}
		must2(t, b.SetRate(now, g.RateMilliPerSec))
		must2(t, b.SetCapacity(now, g.CapMilli))
	}
	n := 0
	for _, at := range []int64{32 * sec, 32*sec + 1} {
		if dd, _ := b.Admit(at, 5000); dd.Allowed {
			n++
		}
	}
	return n
}

// TestIdleLeaseKeepsItsBurst: the idle replica reports zero demand, and
// the budget nobody else claims stays with it; plain fair shares of its
// (zero) demand would leave it nothing, the negative control.
func TestIdleLeaseKeepsItsBurst(t *testing.T) {
	if n := idleReturn(t, faultNone); n != 2 {
		t.Fatalf("back after 30 s idle: %d of two cost-5 requests admitted, want the whole burst", n)
	}
	if !faultsBuilt {
		return // the control needs -tags ration_faults (controls_test.go)
	}
	if n := idleReturn(t, faultSliverShares); n != 0 {
		t.Fatalf("negative control: plain fair shares admitted %d after the idle spell", n)
	}
}

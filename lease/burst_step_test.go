package lease

// The demand-step model (docs/design.md §3.2, "Leftover burst"): holders
// whose demands step up and down, one holder and many, through the
// versioned protocol with rule (i) (acknowledgements, returned clamps,
// top-ups) and the division of FeatureLeftoverBurst. Every operation is
// followed by CheckInvariants (rule a, exact), every admission by the
// holders' buckets is checked against B + r·W over every window, and once
// the shares settle after a step the utilization check asks that the
// burst no demand claims is held by the holders, each its weight's part:
// a holder that steps up spends it at once, without waiting for a
// renewal. The negative control (faultLeftoverBurstToPool: the division
// of before the switch, leftovers back to the pool) must be caught by the
// utilization check.

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
	"pgregory.net/rapid"
)

type stepHolder struct {
	id           string
	weight       int64
	leaseID      LeaseID
	version      uint64 // installed
	bucket       *TokenBucket
	clamped      int64 // lost at the last install, reported at the next renewal
	rate, burst  int64 // demand (milli/s, milli)
	lastCap      int64
	lastRate     int64
	lastSuperset bool
}

// burstStepModel runs one history; it returns a description of the first
// utilization failure ("" if none). Bound or invariant failures are fatal.
func burstStepModel(t *rapid.T, fault Fault, on bool) string {
	const ms = NanosPerSecond / 1000
	r := rapid.SampledFrom([]int64{1_000_000, 10_000_000, 1_000_000_000}).Draw(t, "r")
	b := rapid.SampledFrom([]int64{1_000_000, 10_000_000, 1_000_000_000}).Draw(t, "B")
	l, err := newLedger(LedgerConfig{RateMilliPerSec: r, CapacityMilli: b, StartFull: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.injectFault(fault)
	n := rapid.IntRange(1, 6).Draw(t, "holders")
	equal := rapid.Bool().Draw(t, "equalWeights")
	hs := make([]*stepHolder, n)
	levels := []int64{0, 100_000, 1_000_000, 5_000_000, 20_000_000} // milli/s offered
	now := int64(0)
	var hist []quotacheck.Admission
	check := func(what string) {
		if err := l.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	const ttl = 10 * NanosPerSecond
	install := func(h *stepHolder, g Grant) {
		if err := h.bucket.SetRate(now, g.RateMilliPerSec); err != nil {
			t.Fatal(err)
		}
		before, _ := h.bucket.LevelMilli(now)
		if err := h.bucket.SetCapacity(now, g.CapMilli); err != nil {
			t.Fatal(err)
		}
		after, _ := h.bucket.LevelMilli(now)
		h.clamped += before - after
		if add := min(g.TopUpMilli, g.CapMilli-after); add > 0 {
			if err := h.bucket.Refund(now, add); err != nil {
				t.Fatal(err)
			}
		}
		h.version, h.lastCap, h.lastRate = g.Version, g.CapMilli, g.RateMilliPerSec
	}
	for i := range hs {
		w := int64(1)
		if !equal {
			w = rapid.Int64Range(1, 3).Draw(t, "w")
		}
		h := &stepHolder{id: fmt.Sprintf("h%d", i), weight: w}
		g, err := l.Grant(now, GrantRequest{ClientID: h.id, Incarnation: 1, Seq: 1, Weight: w, DemandRateMilliPerSec: unknownDemand,
			DemandBurstMilli: unknownDemand, TTLNanos: ttl, LeftoverBurst: on})
		if err != nil {
			t.Fatal(err)
		}
		check("grant " + h.id)
		h.leaseID = g.LeaseID
		h.bucket, err = newTokenBucketWithLevel(BucketConfig{CapacityMilli: g.CapMilli, RateMilliPerSec: g.RateMilliPerSec}, now, g.StartMilli)
		if err != nil {
			t.Fatal(err)
		}
		h.version, h.lastCap, h.lastRate = g.Version, g.CapMilli, g.RateMilliPerSec
		hs[i] = h
		now += ms
	}
	// consume: every holder offers its demand rate for dt, in 1 ms steps
	// of whole tokens (what a client with that load asks of its bucket).
	consume := func(dt int64) {
		for end := now + dt; now < end; now += ms {
			for _, h := range hs {
				want := h.rate / 1000 / 1000 * 1000 // tokens per ms, whole
				if want == 0 && h.rate > 0 && (now/ms)%10 == 0 {
					want = h.rate / 100 / 1000 * 1000 // per 10 ms
				}
				if want == 0 {
					continue
				}
				d, err := h.bucket.Admit(now, want)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					hist = append(hist, quotacheck.Admission{AtNanos: now, CostMilli: want, Who: h.id})
				}
			}
		}
	}
	renew := func(h *stepHolder) bool {
		g, err := l.Renew(now, RenewRequest{ClientID: h.id, Incarnation: 1, LeaseID: h.leaseID, Weight: h.weight,
			DemandRateMilliPerSec: h.rate, DemandBurstMilli: h.burst, TTLNanos: ttl,
			AckedVersion: h.version, ClampedMilli: h.clamped, LeftoverBurst: on})
		if err != nil {
			t.Fatalf("renew %s: %v", h.id, err)
		}
		check("renew " + h.id)
		h.clamped = 0
		if debugStep {
			fmt.Printf("renew %s at %d: demand %d/%d -> rate %d cap %d ack %v soon %v\n", h.id, now, h.rate, h.burst, g.RateMilliPerSec, g.CapMilli, g.AckSoon, g.RenewSoon)
		}
		changed := g.RateMilliPerSec != h.lastRate || g.CapMilli != h.lastCap || g.AckSoon
		install(h, g)
		return changed
	}
	failure := ""
	for step := rapid.IntRange(1, 5).Draw(t, "steps"); step > 0; step-- {
		// A step: some holders' demands go up, others' down.
		for _, h := range hs {
			if n == 1 || rapid.Bool().Draw(t, "moves") {
				lv := rapid.SampledFrom(levels).Draw(t, "level")
				h.rate, h.burst = lv+lv/4, lv+lv/4 // DemandMeter: 25% headroom, one second of burst
				if lv > 0 {
					h.burst = max(h.burst, 2*MilliPerToken)
				}
			}
		}
		// Settle: renewal rounds (each acknowledging the terms installed
		// and reporting what the install clamped) until a round changes
		// nothing and frees nothing. A failure to converge within 8 rounds
		// is fatal.
		settled := false
		for round := 0; round < 8 && !settled; round++ {
			consume(50 * ms)
			hr, hc := l.heldTotal()
			settled = true
			for _, h := range hs {
				if renew(h) {
					settled = false
				}
				now += ms
			}
			if hr2, hc2 := l.heldTotal(); hr2 != hr || hc2 != hc || round == 0 {
				// (The first round's early renewals saw the old demands
				// of the holders after them.)
				settled = false // an acknowledgement freed a superseded share: others may take it
			}
		}
		if !settled {
			t.Fatalf("shares did not settle within 8 renewal rounds")
		}
		if failure != "" || !on {
			continue
		}
		// Utilization: the burst no demand claims is held by the holders,
		// each at least its weight's part (less a unit of rounding), but
		// for the pool's seat of weight 1; if some holders are idle, by
		// them alone, without the seat (as without the switch).
		var sumD, sumW, idleW int64
		for _, h := range hs {
			sumD += min(h.burst, b)
			sumW += h.weight
			if h.rate == 0 && h.burst == 0 {
				idleW += h.weight
			}
		}
		left := b - sumD
		if left <= int64(n) {
			continue // the demands claim all of B: nothing left over
		}
		for _, h := range hs {
			part := MulDiv(left, h.weight, sumW+1)
			if idleW > 0 {
				part = 0
				if h.rate == 0 && h.burst == 0 {
					part = MulDiv(left, h.weight, idleW)
				}
			}
			want := min(h.burst, b) + max(part-1, 0)
			if h.lastCap < want {
				failure = fmt.Sprintf("holder %s (demand %d, weight %d) holds cap %d < %d with %d of B = %d unclaimed",
					h.id, h.burst, h.weight, h.lastCap, want, left, b)
			}
		}
	}
	consume(100 * ms)
	if v := quotacheck.Check(hist, quotacheck.Bound{CapacityMilli: b, RateMilliPerSec: r}); v != nil {
		t.Fatalf("bound broken: %v", v)
	}
	return failure
}

// TestLeftoverBurstStepModel: with the switch's rule the model keeps the
// bound and the utilization check; with the switch off (an older
// server's division) the bound holds too.
func TestLeftoverBurstStepModel(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("leftover-burst=%v", on), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				if f := burstStepModel(t, faultNone, on); f != "" {
					t.Fatal(f)
				}
			})
		})
	}
}

var debugStep = false

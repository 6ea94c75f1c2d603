package lease

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
)

// TestFullBucketTakenUnderLaggingClockMintsNoEarlierTime: time a bucket
// spends full mints nothing, however its full spell began, even when the
// take that ends the spell passes a coarse reading that has not caught up
// with the precise reading the spell began at. Each case leaves the bucket
// full at real time P through one entry point (a client's new lease starting
// at its cap, a renewal's SetRate or SetCapacity, a LevelMilli, a refusal as
// exceeding the capacity, a refund), then takes everything lag later under a
// coarse reading of P, then mints at exact instants while a caller takes each
// token as it appears (reading the precise clock, as a client near its
// deadline does). Every window must stay within cap + rate·W in real time.
//
// Before the fix the take saw its reading was not after the credited time
// P, so it skipped the refill that would have voided [P, P+lag]; the next
// refill then minted that time, which the bucket had spent full: rate·lag
// above the bound (12 ms of lag at 20/s is 0.24 tokens). On a client this
// is the first call after a fresh grant (woken by the grant, it reads the
// coarse clock before its next tick).
func TestFullBucketTakenUnderLaggingClockMintsNoEarlierTime(t *testing.T) {
	const (
		capm = 100_000
		rate = 19_980 // 20/s under ρ = 1000 ppm
		P    = 10 * NanosPerSecond
		lag  = 12_000_000 // 12 ms
		W    = 600_000_000
	)
	cfg := BucketConfig{CapacityMilli: capm, RateMilliPerSec: rate}
	setups := map[string]func(b *AtomicBucket, real *int64){
		"created full": nil, // the client's install: starting tokens = cap
		"SetRate": func(b *AtomicBucket, real *int64) {
			b.SetRate(*real, rate+1)
			b.SetRate(*real, rate)
		},
		"SetCapacity":      func(b *AtomicBucket, real *int64) { b.SetCapacity(*real, capm) },
		"LevelMilli":       func(b *AtomicBucket, real *int64) { b.LevelMilli(*real) },
		"exceeds capacity": func(b *AtomicBucket, real *int64) { b.AllowN(*real, capm+1) },
		"refund": func(b *AtomicBucket, real *int64) {
			if !b.AllowN(*real, 1_000).Allowed {
				panic("full bucket refused")
			}
			b.Refund(1_000)
		},
	}
	for name, setup := range setups {
		for _, precise := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/precise=%v", name, precise), func(t *testing.T) {
				real := int64(P)
				var b *AtomicBucket
				var err error
				if setup == nil {
					b, err = NewAtomicBucketWithLevel(cfg, real, capm)
				} else {
					// Full since long before P; the setup's call at P is the
					// latest before the take.
					b, err = NewAtomicBucket(BucketConfig{CapacityMilli: capm, RateMilliPerSec: rate, StartFull: true}, 0)
				}
				if err != nil {
					t.Fatal(err)
				}
				if precise {
					b.SetPreciseClock(func() int64 { return real })
				}
				if setup != nil {
					b.LevelMilli(P / 2)
					setup(b, &real)
				}
				var h []quotacheck.Admission
				real += lag
				coarse := int64(P) // the coarse clock has not ticked since P
				if !b.AllowN(coarse, capm).Allowed {
					t.Fatal("full bucket refused its capacity")
				}
				h = append(h, quotacheck.Admission{AtNanos: real, CostMilli: capm})
				// Take every milli-token the instant it is minted.
				step := nanosToMint(rate, 1)
				for end := real + W; real < end; {
					real += step
					if lvl := b.LevelMilli(real); lvl > 0 && b.AllowN(real, lvl).Allowed {
						h = append(h, quotacheck.Admission{AtNanos: real, CostMilli: lvl})
					}
				}
				bound := quotacheck.Bound{CapacityMilli: capm, RateMilliPerSec: rate}
				v := quotacheck.Check(h, bound)
				if precise && v != nil {
					t.Fatalf("%v (%d admissions)", v, len(h))
				}
				if !precise && v == nil {
					// Without a precise clock the bucket trusts the readings
					// it is given: the lag is minted. This side shows that
					// the case still exercises the lag.
					t.Fatalf("no violation without a precise clock: the case no longer exercises the lag")
				}
			})
		}
	}
}

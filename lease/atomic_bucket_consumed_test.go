package lease

import "testing"

func TestAtomicBucketConsumed(t *testing.T) {
	b, err := NewAtomicBucketWithLevel(BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000}, 0, 4_000)
	if err != nil {
		t.Fatal(err)
	}
	var admitted int64
	for now := int64(0); now < 20*NanosPerSecond; now += NanosPerSecond / 10 {
		d := b.AllowN(now, 700)
		if d.Allowed {
			admitted += 700
		}
		if now == 5*NanosPerSecond {
			if d.Allowed {
				b.Refund(700) // a later layer refused: undone, not consumed
				admitted -= 700
			}
			b.SetCapacity(now, 1_000) // clamps: not consumption
		}
	}
	if got := b.ConsumedMilli(); got != admitted {
		t.Fatalf("ConsumedMilli = %d, admitted %d", got, admitted)
	}
	drained := b.Drain()
	if got := b.ConsumedMilli(); got != admitted {
		t.Fatalf("after draining %d: ConsumedMilli = %d, want %d", drained, got, admitted)
	}
}

// TestPreciseClockClosesCoarseLagGap: a refill that finds the bucket full
// under a lagging reading must not let the lag be minted again later.
func TestPreciseClockClosesCoarseLagGap(t *testing.T) {
	for _, anchored := range []bool{false, true} {
		real := int64(10 * NanosPerSecond)
		b, _ := NewAtomicBucket(BucketConfig{CapacityMilli: 1_000, RateMilliPerSec: 1_000, StartFull: true}, 0)
		if anchored {
			b.SetPreciseClock(func() int64 { return real })
		}
		coarse := real - NanosPerSecond // the coarse clock lags 1 s
		if !b.AllowN(coarse, 1_000).Allowed {
			t.Fatal("full bucket refused")
		}
		real += NanosPerSecond / 2 // half a second later the lag is gone
		lvl := b.LevelMilli(real)
		switch {
		case anchored && lvl > 500:
			t.Fatalf("anchored: %d milli-tokens after 0.5 s at 1/s", lvl)
		case !anchored && lvl <= 500:
			t.Fatalf("unanchored bucket did not show the gap (%d): the test no longer exercises it", lvl)
		}
	}
}

// TestRefundedMilliCountsWholeCharges: RefundedMilli counts every charge
// given back, even the part the capacity cuts off, and leaves
// ConsumedMilli alone (the audit subtracts one from the other).
func TestRefundedMilliCountsWholeCharges(t *testing.T) {
	b, _ := NewAtomicBucket(BucketConfig{CapacityMilli: 5_000, RateMilliPerSec: 0, StartFull: true}, 0)
	if _, ok := b.TakeN(0, 3_000); !ok {
		t.Fatal("take refused")
	}
	b.Refund(4_000) // 2000 fit under the cap
	if got := b.RefundedMilli(); got != 4_000 {
		t.Fatalf("RefundedMilli = %d, want 4000", got)
	}
	if got := b.ConsumedMilli(); got != 3_000 {
		t.Fatalf("ConsumedMilli = %d, want 3000", got)
	}
}

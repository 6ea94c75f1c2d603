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

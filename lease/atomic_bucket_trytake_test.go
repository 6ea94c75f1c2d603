package lease

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestAtomicBucketTryTakeN: TryTakeN charges only what TakeN would charge
// without a refill, and otherwise charges nothing and leaves the refill to
// TakeN.
func TestAtomicBucketTryTakeN(t *testing.T) {
	const t0 = int64(1_000)
	b := mustAtomic(t, BucketConfig{CapacityMilli: 5_000, RateMilliPerSec: 1_000}, t0)
	if _, ok := b.TryTakeN(t0, 1); ok {
		t.Fatal("empty bucket: TryTakeN admitted")
	}
	b.Refund(3_000)
	for _, cost := range []int64{0, -1} {
		if _, ok := b.TryTakeN(t0, cost); ok {
			t.Fatalf("cost %d admitted", cost)
		}
	}
	if rem, ok := b.TryTakeN(t0, 2_000); !ok || rem != 1_000 {
		t.Fatalf("TryTakeN(t0, 2000) = %d, %v; want 1000, true", rem, ok)
	}
	if rem, ok := b.TryTakeN(t0-1, 1_000); !ok || rem != 0 {
		t.Fatalf("a lagging time mints nothing and still takes: %d, %v", rem, ok)
	}
	// One second later a refill is due: TryTakeN refuses without minting,
	// TakeN mints the second's 1000 and takes it.
	t1 := t0 + NanosPerSecond
	if _, ok := b.TryTakeN(t1, 1_000); ok {
		t.Fatal("TryTakeN admitted against an unminted refill")
	}
	if lvl := b.level.Load(); lvl != 0 {
		t.Fatalf("TryTakeN changed the level to %d", lvl)
	}
	if rem, ok := b.TakeN(t1, 1_000); !ok || rem != 0 {
		t.Fatalf("TakeN(t1, 1000) = %d, %v; want 0, true", rem, ok)
	}
	if got := b.ConsumedMilli(); got != 4_000 {
		t.Fatalf("ConsumedMilli = %d, want 4000", got)
	}
}

// TestAtomicBucketTryTakeNConcurrent: goroutines mixing TryTakeN and TakeN
// on an advancing clock together take exactly what was put in and minted,
// never more, and ConsumedMilli counts exactly what they took.
func TestAtomicBucketTryTakeNConcurrent(t *testing.T) {
	const G = 16
	cfg := BucketConfig{CapacityMilli: 50_000, RateMilliPerSec: 10_000_000, StartFull: true}
	b := mustAtomic(t, cfg, 0)
	var clock atomic.Int64 // nanoseconds; goroutines advance it
	var taken atomic.Int64
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			rng := newScript(uint64(g), 11)
			var mine int64
			for range 20_000 {
				now := clock.Load()
				if rng.IntN(8) == 0 {
					now = clock.Add(1 + rng.Int64N(200))
				}
				cost := 1 + rng.Int64N(3_000)
				if _, ok := b.TryTakeN(now, cost); ok {
					mine += cost
				} else if _, ok := b.TakeN(now, cost); ok {
					mine += cost
				}
			}
			taken.Add(mine)
		})
	}
	wg.Wait()
	end := clock.Load()
	final := b.LevelMilli(end)
	// Everything ever available: the start level plus at most rate*end.
	avail := cfg.CapacityMilli + MulDiv(cfg.RateMilliPerSec, end, NanosPerSecond)
	if got := taken.Load(); got+final > avail {
		t.Fatalf("taken %d + level %d > start + minted %d", got, final, avail)
	}
	if got, want := b.ConsumedMilli(), taken.Load(); got != want {
		t.Fatalf("ConsumedMilli = %d, the goroutines took %d", got, want)
	}
	if got := b.credited.Load(); got != taken.Load()+final {
		t.Fatalf("credited %d != taken %d + level %d", got, taken.Load(), final)
	}
}

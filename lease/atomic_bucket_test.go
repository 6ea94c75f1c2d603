package lease

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"pgregory.net/rapid"
)

func mustAtomic(t interface {
	Helper()
	Fatal(...any)
}, cfg BucketConfig, start int64) *AtomicBucket {
	t.Helper()
	b, err := NewAtomicBucket(cfg, start)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAtomicBucketLayout(t *testing.T) {
	if got := unsafe.Sizeof(AtomicBucket{}); got != 2*cacheLine {
		t.Fatalf("sizeof(AtomicBucket) = %d, want %d", got, 2*cacheLine)
	}
	if off := unsafe.Offsetof(AtomicBucket{}.minDelta); off != cacheLine {
		t.Fatalf("minDelta at offset %d, want %d", off, cacheLine)
	}
}

func TestAtomicBucketInvalidConfig(t *testing.T) {
	for _, cfg := range []BucketConfig{
		{CapacityMilli: -1},
		{CapacityMilli: MaxCapacityMilli + 1},
		{RateMilliPerSec: -1},
		{RateMilliPerSec: MaxRateMilliPerSec + 1},
	} {
		if _, err := NewAtomicBucket(cfg, 0); err == nil {
			t.Errorf("NewAtomicBucket(%+v) succeeded", cfg)
		}
	}
	for _, start := range []int64{-1, MaxTimeNanos + 1} {
		if _, err := NewAtomicBucket(BucketConfig{}, start); err == nil {
			t.Errorf("NewAtomicBucket at %d succeeded", start)
		}
	}
}

// TestAtomicBucketMatchesTokenBucket drives an AtomicBucket and a TokenBucket
// from one goroutine with the same random calls and requires identical
// decisions and identical internal state after every call. Times may go
// backwards for the hot-path calls: TokenBucket would reject them, while
// AtomicBucket mints nothing, which is what TokenBucket does at the latest
// time it has seen, so TokenBucket is called at that time instead. The
// setters are called with non-decreasing times.
func TestAtomicBucketMatchesTokenBucket(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		capGen := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(1, 20*MilliPerToken),
			rapid.Int64Range(1, MaxCapacityMilli),
			rapid.Just(MaxCapacityMilli),
		)
		rateGen := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(1, 5000),
			rapid.Int64Range(1, 10_000_000),
			rapid.Int64Range(1, MaxRateMilliPerSec),
			rapid.Just(MaxRateMilliPerSec),
		)
		cfg := BucketConfig{
			CapacityMilli:   capGen.Draw(rt, "cap"),
			RateMilliPerSec: rateGen.Draw(rt, "rate"),
			StartFull:       rapid.Bool().Draw(rt, "full"),
			// Rates per period: one second, a drift-stretched second, a
			// minute, a day, the longest.
			PeriodNanos: rapid.SampledFrom([]int64{0, NanosPerSecond, ClientPeriodNanos(0, 1000), 60 * NanosPerSecond, ClientPeriodNanos(86400*NanosPerSecond, MaxDriftPPM), maxPeriodNanos}).Draw(rt, "period"),
		}
		start := rapid.Int64Range(0, 2e12).Draw(rt, "start")
		tb, err := NewTokenBucket(cfg, start)
		if err != nil {
			rt.Fatal(err)
		}
		ab := mustAtomic(rt, cfg, start)

		dtGen := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Int64Range(1, 1000),
			rapid.Int64Range(1, 2_000_000),
			rapid.Int64Range(1, 10_000_000_000),
			rapid.Int64Range(-2_000_000, -1),
		)
		now := start
		n := rapid.IntRange(1, 300).Draw(rt, "n")
		for i := range n {
			now += dtGen.Draw(rt, "dt")
			// TokenBucket's time: the latest it has seen if now is earlier.
			tbNow := max(now, tb.seenNanos)
			forward := now >= tb.seenNanos
			capm := tb.cfg.CapacityMilli
			costGen := rapid.OneOf(
				rapid.Int64Range(1, capm+capm/4+2),
				rapid.Just(int64(MilliPerToken)),
				rapid.Int64Range(1, 100),
			)
			switch op := rapid.IntRange(0, 12).Draw(rt, "op"); {
			case op <= 5:
				cost := costGen.Draw(rt, "cost")
				want, err := tb.Admit(tbNow, cost)
				if err != nil {
					rt.Fatal(err)
				}
				got := ab.AllowN(now, cost)
				if got.Allowed != want.Allowed || got.RemainingMilli != want.RemainingMilli || got.Reason != want.Reason {
					rt.Fatalf("step %d: AllowN(%d, %d) = %+v, TokenBucket %+v", i, now, cost, got, want)
				}
				if forward && got.RetryAfter != want.RetryAfter {
					rt.Fatalf("step %d: RetryAfter %v, TokenBucket %v", i, got.RetryAfter, want.RetryAfter)
				}
			case op <= 7:
				want, err := tb.Admit(tbNow, MilliPerToken)
				if err != nil {
					rt.Fatal(err)
				}
				if got := ab.Allow(now); got != want.Allowed {
					rt.Fatalf("step %d: Allow(%d) = %v, TokenBucket %+v", i, now, got, want)
				}
			case op == 8:
				want, err := tb.LevelMilli(tbNow)
				if err != nil {
					rt.Fatal(err)
				}
				if got := ab.LevelMilli(now); got != want {
					rt.Fatalf("step %d: LevelMilli(%d) = %d, TokenBucket %d", i, now, got, want)
				}
			case op == 9: // invalid cost: rejected, changes nothing (TokenBucket errors)
				cost := -rapid.Int64Range(0, 5).Draw(rt, "badcost")
				got := ab.AllowN(now, cost)
				if got != (Decision{Reason: ReasonExceedsCapacity, RetryAfter: RetryNever}) {
					rt.Fatalf("step %d: AllowN(%d, %d) = %+v", i, now, cost, got)
				}
				if _, err := tb.Admit(tbNow, cost); err == nil {
					rt.Fatalf("TokenBucket accepted cost %d", cost)
				}
			case op == 10:
				now = tbNow
				rate := rapid.OneOf(rateGen, rapid.Just(tb.cfg.RateMilliPerSec)).Draw(rt, "newrate")
				if err := tb.SetRate(now, rate); err != nil {
					rt.Fatal(err)
				}
				ab.SetRate(now, rate)
			case op == 11:
				now = tbNow
				c := capGen.Draw(rt, "newcap")
				if err := tb.SetCapacity(now, c); err != nil {
					rt.Fatal(err)
				}
				ab.SetCapacity(now, c)
			default: // Drain(now) is LevelMilli(now) then Drain()
				want, err := tb.Drain(tbNow)
				if err != nil {
					rt.Fatal(err)
				}
				ab.LevelMilli(now)
				if got := ab.Drain(); got != want {
					rt.Fatalf("step %d: Drain = %d, TokenBucket %d", i, got, want)
				}
			}
			lvl, last := ab.level.Load(), ab.last.Load()
			if lvl != tb.levelMilli || ab.rate.Load() != tb.cfg.RateMilliPerSec || ab.capacity.Load() != tb.cfg.CapacityMilli {
				rt.Fatalf("step %d: level %d rate %d cap %d, TokenBucket level %d %+v",
					i, lvl, ab.rate.Load(), ab.capacity.Load(), tb.levelMilli, tb.cfg)
			}
			// When full, last is void (the next call moves it to its now).
			if lvl < tb.cfg.CapacityMilli && last != tb.lastNanos {
				rt.Fatalf("step %d: last %d, TokenBucket %d (level %d)", i, last, tb.lastNanos, lvl)
			}
			if md := ab.minDelta.Load(); md != nanosToMintPer(tb.cfg.RateMilliPerSec, tb.cfg.period(), 1) {
				rt.Fatalf("step %d: minDelta %d for rate %d", i, md, tb.cfg.RateMilliPerSec)
			}
		}
	})
}

// TestAtomicBucketConcurrentAdvancingClock hammers one bucket from G
// goroutines that share a scripted clock (an atomic counter they advance
// themselves; some calls use a stale reading). Whatever the interleaving, the
// bucket may not admit more than its start level plus what the rate mints
// over the elapsed time. With a precise clock (the latest reading) too:
// full spells then end at precise readings, and must not stall refills.
func TestAtomicBucketConcurrentAdvancingClock(t *testing.T) {
	for _, precise := range []bool{false, true} {
		t.Run(fmt.Sprintf("precise=%v", precise), func(t *testing.T) { concurrentAdvancingClock(t, precise) })
	}
}

func concurrentAdvancingClock(t *testing.T, precise bool) {
	const (
		G     = 8
		iters = 20_000
		start = int64(1_000_000)
	)
	cfg := BucketConfig{CapacityMilli: 20_000, RateMilliPerSec: 777_777_777, StartFull: true}
	b := mustAtomic(t, cfg, start)
	var clock atomic.Int64
	clock.Store(start)
	if precise {
		b.SetPreciseClock(clock.Load)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range G {
		wg.Go(func() {
			rng := newScript(uint64(g), 42)
			var mine int64
			stale := start
			for range iters {
				now := clock.Add(rng.Int64N(2000))
				if rng.IntN(8) == 0 {
					now, stale = stale, now // a reading taken earlier
				} else {
					stale = now
				}
				cost := 1 + rng.Int64N(3000)
				var d Decision
				if cost > 2000 {
					ok := b.Allow(now)
					d.Allowed, cost = ok, MilliPerToken
				} else {
					d = b.AllowN(now, cost)
					if d.RemainingMilli < 0 || d.RemainingMilli > cfg.CapacityMilli {
						t.Errorf("remaining %d outside [0, %d]", d.RemainingMilli, cfg.CapacityMilli)
						return
					}
				}
				if d.Allowed {
					mine += cost
				}
			}
			admitted.Add(mine)
		})
	}
	wg.Wait()
	end := clock.Load()
	final := b.LevelMilli(end)
	minted := MulDiv(cfg.RateMilliPerSec, end-start, NanosPerSecond)
	bound := cfg.CapacityMilli + minted
	got := admitted.Load()
	t.Logf("elapsed %d ns: admitted %d + final level %d, bound %d (%.2f%%)",
		end-start, got, final, bound, 100*float64(got+final)/float64(bound))
	if got+final > bound {
		t.Fatalf("admitted %d + final level %d > start %d + minted %d", got, final, cfg.CapacityMilli, minted)
	}
	if final < 0 || final > cfg.CapacityMilli {
		t.Fatalf("final level %d outside [0, %d]", final, cfg.CapacityMilli)
	}
	// Races may under-admit, but only by a little: demand exceeds supply, so
	// the bucket is rarely full and little time is discarded.
	if got+final < bound*3/4 {
		t.Fatalf("admitted %d + final %d is far below the bound %d", got, final, bound)
	}
}

// TestAtomicBucketConcurrentFrozenClock: with the clock frozen nothing is
// minted, so the milli-tokens admitted plus drained plus left are exactly the
// start level: none lost, none duplicated.
func TestAtomicBucketConcurrentFrozenClock(t *testing.T) {
	for _, withDrain := range []bool{false, true} {
		const G = 8
		const t0 = int64(5_000)
		cfg := BucketConfig{CapacityMilli: 3_000_017, RateMilliPerSec: MaxRateMilliPerSec, StartFull: true}
		b := mustAtomic(t, cfg, t0)
		var admitted, drained atomic.Int64
		var wg sync.WaitGroup
		for g := range G {
			wg.Go(func() {
				rng := newScript(uint64(g), 7)
				var mine int64
				for {
					cost := 1 + rng.Int64N(2500)
					if withDrain && g == 0 && rng.IntN(64) == 0 {
						drained.Add(b.Drain())
						continue
					}
					if d := b.AllowN(t0, cost); d.Allowed {
						mine += cost
						continue
					}
					// Rejected: sweep up with cost 1 until truly empty.
					if b.AllowN(t0, 1).Allowed {
						mine++
						continue
					}
					break
				}
				admitted.Add(mine)
			})
		}
		wg.Wait()
		final := b.LevelMilli(t0)
		if sum := admitted.Load() + drained.Load() + final; sum != cfg.CapacityMilli || final != 0 {
			t.Fatalf("drain=%v: admitted %d + drained %d + final %d = %d, want %d with final 0",
				withDrain, admitted.Load(), drained.Load(), final, sum, cfg.CapacityMilli)
		}
	}
}

// TestAtomicBucketConcurrentSetters runs the control path against the hot
// path (for the race detector and the capacity invariant).
func TestAtomicBucketConcurrentSetters(t *testing.T) {
	cfg := BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 5_000_000, StartFull: true}
	b := mustAtomic(t, cfg, 0)
	var clock atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := newScript(uint64(g), 1)
			for !stop.Load() {
				b.AllowN(clock.Add(rng.Int64N(500)), 1+rng.Int64N(1500))
			}
		})
	}
	rng := newScript(99, 1)
	for range 2000 {
		now := clock.Add(100)
		switch rng.IntN(3) {
		case 0:
			b.SetRate(now, rng.Int64N(10_000_000))
		case 1:
			b.SetCapacity(now, rng.Int64N(20_000))
		default:
			if d := b.Drain(); d < 0 {
				t.Errorf("Drain returned %d", d)
			}
		}
	}
	b.SetCapacity(clock.Load(), 3_000)
	stop.Store(true)
	wg.Wait()
	if lvl := b.LevelMilli(clock.Load()); lvl < 0 || lvl > 3_000 {
		t.Fatalf("level %d outside [0, 3000] after SetCapacity(3000)", lvl)
	}
}

func TestAtomicBucketSetRate(t *testing.T) {
	const s = NanosPerSecond
	t.Run("credits old rate then switches", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 100_000, RateMilliPerSec: 1_000}, 0)
		b.SetRate(s, 3_000)
		if got := b.LevelMilli(s); got != 1_000 {
			t.Fatalf("level at 1s = %d, want 1000 (old rate)", got)
		}
		if got := b.LevelMilli(2 * s); got != 4_000 {
			t.Fatalf("level at 2s = %d, want 4000", got)
		}
	})
	t.Run("drops the old fraction", func(t *testing.T) {
		// 1 milli/s: at 0.5s half a milli-token is pending; it must not be
		// minted at the new rate.
		b := mustAtomic(t, BucketConfig{CapacityMilli: 100_000, RateMilliPerSec: 1}, 0)
		b.SetRate(s/2, 1_000)
		if got := b.LevelMilli(s/2 + s); got != 1_000 {
			t.Fatalf("level = %d, want 1000", got)
		}
	})
	t.Run("zero rate is not credited retroactively", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 100_000, RateMilliPerSec: 0}, 0)
		if got := b.LevelMilli(10 * s); got != 0 {
			t.Fatalf("level at rate 0 = %d", got)
		}
		b.SetRate(20*s, 1_000)
		if got := b.LevelMilli(20 * s); got != 0 {
			t.Fatalf("level right after SetRate = %d, want 0", got)
		}
		if got := b.LevelMilli(21 * s); got != 1_000 {
			t.Fatalf("level 1s after SetRate = %d, want 1000", got)
		}
		b.SetRate(22*s, 0)
		if got := b.LevelMilli(99 * s); got != 2_000 {
			t.Fatalf("level after SetRate(0) = %d, want 2000", got)
		}
	})
	t.Run("backwards time applies from last", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 100_000, RateMilliPerSec: 1_000}, 0)
		b.LevelMilli(2 * s)
		b.SetRate(s, 2_000) // earlier than credited time: nothing to credit
		if got := b.LevelMilli(3 * s); got != 4_000 {
			t.Fatalf("level = %d, want 2000+2000", got)
		}
	})
	t.Run("clamps", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 100_000, RateMilliPerSec: 1_000}, 0)
		b.SetRate(0, -5)
		if r, md := b.rate.Load(), b.minDelta.Load(); r != 0 || md != int64(RetryNever) {
			t.Fatalf("rate %d minDelta %d after SetRate(-5)", r, md)
		}
		b.SetRate(0, MaxRateMilliPerSec+1)
		if r, md := b.rate.Load(), b.minDelta.Load(); r != MaxRateMilliPerSec || md != 1 {
			t.Fatalf("rate %d minDelta %d after SetRate(max+1)", r, md)
		}
	})
}

func TestAtomicBucketSetCapacity(t *testing.T) {
	const s = NanosPerSecond
	t.Run("lowering clamps", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000, StartFull: true}, 0)
		b.SetCapacity(0, 4_000)
		if got := b.LevelMilli(0); got != 4_000 {
			t.Fatalf("level = %d, want 4000", got)
		}
		if d := b.AllowN(0, 5_000); d.Reason != ReasonExceedsCapacity || d.RetryAfter != RetryNever {
			t.Fatalf("cost above new capacity: %+v", d)
		}
	})
	t.Run("raising adds nothing and discards time spent full", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000, StartFull: true}, 0)
		b.SetCapacity(5*s, 20_000)
		if got := b.LevelMilli(5 * s); got != 10_000 {
			t.Fatalf("level = %d, want 10000", got)
		}
		if got := b.LevelMilli(6 * s); got != 11_000 {
			t.Fatalf("level 1s later = %d, want 11000", got)
		}
		if got := b.LevelMilli(60 * s); got != 20_000 {
			t.Fatalf("level much later = %d, want 20000", got)
		}
	})
	t.Run("keeps the pending fraction when not full", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 2}, 0)
		b.SetCapacity(s/4, 20_000) // a quarter second: half a milli-token pending
		if got := b.LevelMilli(s / 2); got != 1 {
			t.Fatalf("level = %d, want 1", got)
		}
	})
	t.Run("clamps", func(t *testing.T) {
		b := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000, StartFull: true}, 0)
		b.SetCapacity(0, -1)
		if got := b.LevelMilli(s); got != 0 || b.capacity.Load() != 0 {
			t.Fatalf("level %d cap %d after SetCapacity(-1)", got, b.capacity.Load())
		}
		b.SetCapacity(s, MaxCapacityMilli+1)
		if c := b.capacity.Load(); c != MaxCapacityMilli {
			t.Fatalf("cap %d", c)
		}
	})
}

func TestAtomicBucketDrain(t *testing.T) {
	const s = NanosPerSecond
	b := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000, StartFull: true}, 0)
	if d := b.AllowN(0, 2_500); !d.Allowed {
		t.Fatal(d)
	}
	if got := b.Drain(); got != 7_500 {
		t.Fatalf("Drain = %d, want 7500", got)
	}
	if got := b.Drain(); got != 0 {
		t.Fatalf("second Drain = %d, want 0", got)
	}
	if d := b.AllowN(0, 1); d.Allowed || d.Reason != ReasonLimit || d.RetryAfter != 1_000_000 {
		t.Fatalf("after Drain: %+v", d)
	}
	// Refill continues from the credited time.
	if got := b.LevelMilli(s); got != 1_000 {
		t.Fatalf("level 1s after Drain = %d, want 1000", got)
	}
}

func TestAtomicBucketBackwardsTimeMintsNothing(t *testing.T) {
	b := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1_000}, 1_000_000)
	if got := b.LevelMilli(0); got != 0 {
		t.Fatalf("level before start = %d", got)
	}
	if d := b.AllowN(-5, 1); d.Allowed || d.Reason != ReasonLimit || d.RetryAfter != 1_000_000 {
		t.Fatalf("AllowN before start: %+v", d)
	}
	if got := b.LevelMilli(1_000_000 + NanosPerSecond); got != 1_000 {
		t.Fatalf("level 1s after start = %d, want 1000", got)
	}
}

func TestAtomicBucketAllocs(t *testing.T) {
	b := mustAtomic(t, BucketConfig{CapacityMilli: MaxCapacityMilli, RateMilliPerSec: 123_456_789, StartFull: true}, 0)
	now := int64(0)
	var sink Decision
	for name, f := range map[string]func(){
		"AllowN":         func() { sink = b.AllowN(now, 1_500) },
		"AllowN-refill":  func() { now += 12_345; sink = b.AllowN(now, 1_500) },
		"AllowN-reject":  func() { sink = b.AllowN(now, MaxCapacityMilli+1) },
		"Allow":          func() { now += 7; b.Allow(now) },
		"LevelMilli":     func() { now += 999; b.LevelMilli(now) },
		"AllowN-invalid": func() { sink = b.AllowN(now, 0) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs/op, want 0", name, n)
		}
	}
	e := mustAtomic(t, BucketConfig{CapacityMilli: 10_000, RateMilliPerSec: 1}, 0)
	if n := testing.AllocsPerRun(1000, func() { now += 1_000_000; sink = e.AllowN(now, 5_000) }); n != 0 {
		t.Errorf("AllowN rejecting: %v allocs/op, want 0", n)
	}
	_ = sink
}

// script is a seeded, deterministic sequence of numbers for the concurrency
// tests (splitmix64): each goroutine replays the same choices every run.
type script struct{ state uint64 }

func newScript(seed, stream uint64) *script { return &script{state: seed*0x9E3779B97F4A7C15 + stream} }

func (s *script) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Int64N returns a number in [0, n).
func (s *script) Int64N(n int64) int64 { return int64(s.next() % uint64(n)) }

// IntN returns a number in [0, n).
func (s *script) IntN(n int) int { return int(s.next() % uint64(n)) }

// SetCapacity reports what its clamp took off (rule i: the client returns
// it to the pool with its next acknowledgement), and nothing when the
// level fits or the capacity rises.
func TestSetCapacityReportsTheClamp(t *testing.T) {
	b, err := NewAtomicBucketWithLevel(BucketConfig{CapacityMilli: 100_000, RateMilliPerSec: 1_000}, 0, 90_000)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.SetCapacity(0, 25_000); got != 65_000 {
		t.Fatalf("cut from a level of 90000 to 25000 clamped %d", got)
	}
	if got := b.SetCapacity(NanosPerSecond, 50_000); got != 0 {
		t.Fatalf("a raise clamped %d", got)
	}
	// (Full at 25000 for that second, it minted nothing.)
	if !b.AllowN(NanosPerSecond, 25_000).Allowed || b.AllowN(NanosPerSecond, 1).Allowed {
		t.Fatal("the level after the clamp is not 25000")
	}
	if got := b.SetCapacity(NanosPerSecond, 0); got != 0 {
		t.Fatalf("cutting an empty bucket clamped %d", got)
	}
}

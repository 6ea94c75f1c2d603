package coarseclock

import (
	"math/big"
	"runtime"
	"sync"
	"testing"
	"time"
)

// waitFor polls cond (yielding between polls) until it holds or the
// deadline passes. No sleeps are used for synchronisation.
func waitFor(t *testing.T, d time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		runtime.Gosched()
	}
	return cond()
}

func TestNowMonotonicLagsAndAdvances(t *testing.T) {
	const res = 200 * time.Microsecond
	c := New(res)
	defer c.Stop()
	if c.Resolution() != res {
		t.Fatalf("Resolution = %v", c.Resolution())
	}
	var prev int64
	distinct := 0
	ok := waitFor(t, 10*time.Second, func() bool {
		v := c.Now()
		// Read the true elapsed time after Now: Now must not be ahead.
		if real := int64(time.Since(c.start)); v > real {
			t.Fatalf("Now %d is ahead of the elapsed time %d", v, real)
		}
		if v < prev {
			t.Fatalf("Now went backwards: %d after %d", v, prev)
		}
		if v > prev {
			distinct++
		}
		prev = v
		return distinct >= 5 && v >= int64(20*res)
	})
	if !ok {
		t.Fatalf("Now did not advance: %d after %d changes", prev, distinct)
	}
}

func TestNowLagIsBounded(t *testing.T) {
	c := New(time.Millisecond)
	defer c.Stop()
	// On a loaded machine the refresh goroutine can be late; require only
	// that some reading is close to the truth within the deadline.
	var best time.Duration = 1 << 62
	ok := waitFor(t, 10*time.Second, func() bool {
		v := c.Now()
		if v == 0 {
			return false
		}
		best = min(best, time.Since(c.start)-time.Duration(v))
		return best < 50*time.Millisecond
	})
	if !ok {
		t.Fatalf("smallest observed lag %v", best)
	}
}

func TestStopIsIdempotentAndFreezes(t *testing.T) {
	c := New(100 * time.Microsecond)
	if !waitFor(t, 10*time.Second, func() bool { return c.Now() > 0 }) {
		t.Fatal("clock never ticked")
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(c.Stop)
	}
	wg.Wait()
	c.Stop()
	frozen := c.Now()
	// Stop waited for the goroutine to exit, so nothing can store any more.
	waitFor(t, 20*time.Millisecond, func() bool { return c.Now() != frozen })
	if v := c.Now(); v != frozen {
		t.Fatalf("Now changed after Stop: %d -> %d", frozen, v)
	}
}

func TestNonPositiveResolution(t *testing.T) {
	for _, r := range []time.Duration{0, -time.Second} {
		c := New(r)
		if c.Resolution() != DefaultResolution {
			t.Errorf("New(%v).Resolution() = %v", r, c.Resolution())
		}
		c.Stop()
	}
}

func TestDefault(t *testing.T) {
	d := Default()
	if d != Default() {
		t.Fatal("Default returned two clocks")
	}
	if d.Resolution() != DefaultResolution {
		t.Fatalf("Default resolution %v", d.Resolution())
	}
	d.Stop() // a no-op on the Default clock
	v := d.Now()
	if !waitFor(t, 10*time.Second, func() bool { return d.Now() > v }) {
		t.Fatal("Default clock stopped")
	}
}

var sinkInt64 int64

// BenchmarkClock compares the cost of reading the system clock with a
// coarse Clock read.
func BenchmarkClock(b *testing.B) {
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sinkInt64 = time.Now().UnixNano()
		}
	})
	start := time.Now()
	b.Run("time.Since", func(b *testing.B) { // the monotonic reading alone
		for b.Loop() {
			sinkInt64 = int64(time.Since(start))
		}
	})
	c := New(DefaultResolution)
	defer c.Stop()
	b.Run("coarseclock.Now", func(b *testing.B) {
		for b.Loop() {
			sinkInt64 = c.Now()
		}
	})
}

func TestSetRateScalesElapsedTime(t *testing.T) {
	c := New(time.Millisecond)
	defer c.Stop()
	// A clock 50% fast: over a real interval of at least 20ms (measured
	// on the real monotonic clock around the readings), it must advance
	// by about 1.5 times as much, and never less than real time.
	c.SetRate(500_000)
	// The real time between the two readings lies between the inner and
	// the outer brackets, however the test is scheduled.
	t0 := time.Now()
	a := c.Precise()
	t1 := time.Now()
	for time.Since(t1) < 20*time.Millisecond {
		runtime.Gosched()
	}
	t2 := time.Now()
	b := c.Precise()
	t3 := time.Now()
	d := time.Duration(b - a)
	lo, hi := t2.Sub(t1)*3/2-time.Microsecond, t3.Sub(t0)*3/2+time.Microsecond
	if d < lo || d > hi {
		t.Fatalf("50%% fast clock advanced %v, want within [%v, %v]", d, lo, hi)
	}
	// Back to the real rate: no jump, still non-decreasing.
	c.SetRate(0)
	if p := c.Precise(); p < b {
		t.Fatalf("reading went back from %d to %d after SetRate(0)", b, p)
	}
	if c.Now() > c.Precise() {
		t.Fatal("Now ahead of Precise")
	}
}

func TestScaleMatchesExactArithmetic(t *testing.T) {
	for _, d := range []int64{0, 1, 999_999, 1_000_000, 1_234_567_891, 3_600_000_000_000_000} {
		for _, ppm := range []int64{-999_999, -1000, 0, 1000, 1_000_000} {
			want := new(big.Int).Div(new(big.Int).Mul(big.NewInt(d), big.NewInt(1_000_000+ppm)), big.NewInt(1_000_000))
			if got := scale(d, ppm); got != want.Int64() {
				t.Errorf("scale(%d, %d) = %d, want %s", d, ppm, got, want)
			}
		}
	}
}

package lease

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/coarseclock"
	"golang.org/x/time/rate"
)

// The benchmarks compare one admission on AtomicBucket, clock read included
// (coarseclock.Now, one atomic load), with one golang.org/x/time/rate
// Limiter.Allow (which reads time.Now and takes a mutex), in the same run.
//
// "Allow" benchmarks use a bucket that always admits: 10^9 tokens/s and a
// burst of 10^9 tokens, started full, far more than a benchmark consumes,
// so the admission fast path is measured. "AllowEmpty" benchmarks use a
// bucket that is (nearly) always empty, so the rejection path is measured.
//
// "ration-since" is ration with a precise clock read per call
// (time.Since of a fixed start, the monotonic reading alone) instead of the
// coarse clock: it shows what the coarse clock buys, and, because the time
// then advances on every call, it also exercises a refill on every call.

const (
	benchRateTokens  = 1e9 // tokens per second
	benchBurstTokens = 1e9 // tokens
)

func newBenchBucket(b *testing.B, startNanos int64, empty bool) *AtomicBucket {
	cfg := BucketConfig{
		CapacityMilli:   benchBurstTokens * MilliPerToken,
		RateMilliPerSec: benchRateTokens * MilliPerToken,
		StartFull:       true,
	}
	if empty {
		// 0.001 tokens/s: one token every 1000 s.
		cfg = BucketConfig{CapacityMilli: MilliPerToken, RateMilliPerSec: 1}
	}
	ab, err := NewAtomicBucket(cfg, startNanos)
	if err != nil {
		b.Fatal(err)
	}
	return ab
}

func newBenchLimiter(empty bool) *rate.Limiter {
	if empty {
		l := rate.NewLimiter(rate.Every(1000*time.Second), 1)
		l.Allow() // take the initial burst token
		return l
	}
	return rate.NewLimiter(rate.Limit(benchRateTokens), benchBurstTokens)
}

func benchSerial(b *testing.B, empty bool) {
	clk := coarseclock.New(coarseclock.DefaultResolution)
	defer clk.Stop()
	b.Run("ration", func(b *testing.B) {
		ab := newBenchBucket(b, clk.Now(), empty)
		b.ReportAllocs()
		admitted := 0
		for b.Loop() {
			if ab.Allow(clk.Now()) {
				admitted++
			}
		}
		checkAdmitted(b, empty, admitted, b.N)
	})
	b.Run("ration-since", func(b *testing.B) {
		// A precise monotonic read per call (coarseclock's Precise is
		// time.Since the clock's start), to show what the coarse clock saves.
		precise := coarseclock.Default()
		ab := newBenchBucket(b, 0, empty)
		b.ReportAllocs()
		admitted := 0
		for b.Loop() {
			if ab.Allow(precise.Precise()) {
				admitted++
			}
		}
		checkAdmitted(b, empty, admitted, b.N)
	})
	b.Run("xrate", func(b *testing.B) {
		l := newBenchLimiter(empty)
		b.ReportAllocs()
		admitted := 0
		for b.Loop() {
			if l.Allow() {
				admitted++
			}
		}
		checkAdmitted(b, empty, admitted, b.N)
	})
}

func benchParallel(b *testing.B, empty bool) {
	clk := coarseclock.New(coarseclock.DefaultResolution)
	defer clk.Stop()
	b.Run("ration", func(b *testing.B) {
		ab := newBenchBucket(b, clk.Now(), empty)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ab.Allow(clk.Now())
			}
		})
	})
	b.Run("ration-since", func(b *testing.B) {
		precise := coarseclock.Default()
		ab := newBenchBucket(b, 0, empty)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				ab.Allow(precise.Precise())
			}
		})
	})
	b.Run("xrate", func(b *testing.B) {
		l := newBenchLimiter(empty)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				l.Allow()
			}
		})
	})
}

// checkAdmitted makes sure the intended path was measured.
func checkAdmitted(b *testing.B, empty bool, admitted, n int) {
	if empty && admitted > 1 {
		b.Fatalf("empty bucket admitted %d of %d", admitted, n)
	}
	if !empty && admitted != n {
		b.Fatalf("full bucket admitted only %d of %d", admitted, n)
	}
}

func BenchmarkAllow(b *testing.B)              { benchSerial(b, false) }
func BenchmarkAllowParallel(b *testing.B)      { benchParallel(b, false) }
func BenchmarkAllowEmpty(b *testing.B)         { benchSerial(b, true) }
func BenchmarkAllowEmptyParallel(b *testing.B) { benchParallel(b, true) }

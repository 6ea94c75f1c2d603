package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
	"golang.org/x/time/rate"
)

// The benchmarks measure the client's hot path: Limiter.AllowN(1) on a key
// whose lease is held, against golang.org/x/time/rate's Limiter.Allow, in
// the same run. The ration side is the real thing: a three-node in-process
// cluster (real Raft, gRPC and gossip on loopback), a client.Client that
// acquired the lease over gRPC, and the Limiter it hands out; the clock is
// the client's default coarse clock.
//
// The policy's rate and burst are far above what a benchmark consumes, so
// every call must be admitted from the lease (Reason Allowed); any other
// decision fails the benchmark, so the fast path, and only it, is measured.
// x/time/rate gets the same rate and burst. The "rationAllow" sub-benchmarks
// measure Limiter.Allow, the bool API (every call must be admitted), which
// builds no Decision; see BENCHMARKS.md for how the two compare.
//
// Each top-level benchmark starts its own cluster and client once, outside
// the timed region, and runs the ration and xrate sub-benchmarks against
// them with b.Run, so the harness's b.N probing never starts a cluster.
// With -count, go test repeats each sub-benchmark within that one run, so a
// run lasts longer than the lease's renew_after (duration/3 = 20s) and
// renewals happen while timing; each ration sub-benchmark therefore has its
// own key, acquired when it starts (see benchLimiter), so its renewals
// report its own demand. The cluster idles in the background (Raft
// heartbeats, gossip) during every sub-benchmark alike.

// The rate is the largest a policy may have (lease.MaxRateMilliPerSec): at
// 10^8 tokens/s a path of a few ns/op, such as Allow's, spends tokens faster
// than they are minted, the more so under RunParallel, where the coarse
// clock ticks late. The fast path's cost does not depend on the rate.
const (
	benchRateTokens  = 1_000_000_000 // tokens per second
	benchBurstTokens = 1_000_000_000 // tokens
)

var benchPolicy = fmt.Sprintf(`
policies:
  - name: bench
    algorithm: token-bucket
    rate: %d
    burst: %d
    key: [tenant]
    lease: {duration: 60s, drift_ppm: 1000}
`, benchRateTokens, benchBurstTokens)

// startBenchClient starts a cluster and a client. Cleanups (client first,
// then the cluster) run when b's benchmark, sub-benchmarks included, ends.
func startBenchClient(b *testing.B) *client.Client {
	b.Helper()
	return startBenchClientWith(b, benchPolicy, "bench")
}

// startBenchClientWith starts a 3-node cluster with policies and a client
// of it with the given ID, both stopped when b ends.
func startBenchClientWith(b *testing.B, policies, clientID string) *client.Client {
	b.Helper()
	c := testcluster.New(b, 3, testcluster.WithPolicies(policies), testcluster.WithLogLevel(slog.LevelError))
	c.WaitForLeader(b)
	var addrs []string
	for i := 0; i < c.Len(); i++ {
		addrs = append(addrs, c.Server(i).GRPCAddr())
	}
	cl, err := client.New(context.Background(), client.Config{Servers: addrs, ClientID: clientID})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cl.Close() })
	return cl
}

// benchLimiter returns the limiter of tenant's key once it admits from its
// lease (the first call for a tenant acquires it). Each ration
// sub-benchmark takes its own key when it starts: with -count, go test
// repeats a sub-benchmark within one run of its parent, past the lease's
// first renewal, and a key that sat idle while another sub-benchmark ran
// would then report no demand and be renewed with a trickle of the rate.
// The caller resets its timer afterwards (b.Loop does).
func benchLimiter(b *testing.B, cl *client.Client, tenant string) *client.Limiter {
	b.Helper()
	lim := cl.Limiter("bench", client.Key{"tenant": tenant})
	testcluster.WaitFor(b, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(1); d.Reason != client.Allowed {
			return fmt.Errorf("not admitting from a lease yet: %+v (err %v)", d, lim.Err())
		}
		return nil
	})
	return lim
}

func newBenchXRate() *rate.Limiter {
	return rate.NewLimiter(rate.Limit(benchRateTokens), benchBurstTokens)
}

func failIfDenied(b *testing.B, denied int64) {
	b.Helper()
	if denied != 0 {
		b.Fatalf("%d of %d calls were not admitted", denied, b.N)
	}
}

// BenchmarkLimiterAllowN: one goroutine.
func BenchmarkLimiterAllowN(b *testing.B) {
	cl := startBenchClient(b)
	b.Run("ration", func(b *testing.B) {
		lim := benchLimiter(b, cl, "allown")
		b.ReportAllocs()
		var denied int64
		for b.Loop() {
			if lim.AllowN(1).Reason != client.Allowed {
				denied++
			}
		}
		failIfDenied(b, denied)
	})
	// Allow, the bool API: the same decision without a Decision to copy
	// (x/time/rate's side is its Allow, a bool, too).
	b.Run("rationAllow", func(b *testing.B) {
		lim := benchLimiter(b, cl, "allow")
		b.ReportAllocs()
		var denied int64
		for b.Loop() {
			if !lim.Allow() {
				denied++
			}
		}
		failIfDenied(b, denied)
	})
	b.Run("xrate", func(b *testing.B) {
		xl := newBenchXRate()
		b.ReportAllocs()
		var denied int64
		for b.Loop() {
			if !xl.Allow() {
				denied++
			}
		}
		failIfDenied(b, denied)
	})
}

// BenchmarkLimiterAllowNParallel: b.RunParallel, GOMAXPROCS goroutines on
// the one key (one limiter).
func BenchmarkLimiterAllowNParallel(b *testing.B) {
	cl := startBenchClient(b)
	b.Run("ration", func(b *testing.B) {
		lim := benchLimiter(b, cl, "allown-parallel")
		b.ResetTimer()
		b.ReportAllocs()
		var denied atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				if lim.AllowN(1).Reason != client.Allowed {
					n++
				}
			}
			denied.Add(n)
		})
		failIfDenied(b, denied.Load())
	})
	b.Run("rationAllow", func(b *testing.B) {
		lim := benchLimiter(b, cl, "allow-parallel")
		b.ResetTimer()
		b.ReportAllocs()
		var denied atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				if !lim.Allow() {
					n++
				}
			}
			denied.Add(n)
		})
		failIfDenied(b, denied.Load())
	})
	b.Run("xrate", func(b *testing.B) {
		xl := newBenchXRate()
		b.ReportAllocs()
		var denied atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			var n int64
			for pb.Next() {
				if !xl.Allow() {
					n++
				}
			}
			denied.Add(n)
		})
		failIfDenied(b, denied.Load())
	})
}

// BenchmarkLimiterAllowNThroughput: admitted decisions per second for one
// process. GOMAXPROCS goroutines, released together, share a fixed b.N
// calls on one key (no pb.Next bookkeeping); the wall time from release to
// the last goroutine's end gives decisions/s (every decision must be an
// admission). ns/op is wall time per decision, i.e. 1e9 / decisions/s.
func BenchmarkLimiterAllowNThroughput(b *testing.B) {
	cl := startBenchClient(b)
	b.Run("ration", func(b *testing.B) {
		lim := benchLimiter(b, cl, "throughput")
		hammer(b, func() bool { return lim.AllowN(1).Reason == client.Allowed })
	})
	b.Run("xrate", func(b *testing.B) {
		xl := newBenchXRate()
		hammer(b, xl.Allow)
	})
}

func hammer(b *testing.B, allow func() bool) {
	b.ReportAllocs()
	g := runtime.GOMAXPROCS(0)
	var denied atomic.Int64
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := range g {
		n := b.N / g
		if i < b.N%g {
			n++
		}
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			var d int64
			for range n {
				if !allow() {
					d++
				}
			}
			denied.Add(d)
		}()
	}
	ready.Wait()
	b.ResetTimer()
	t0 := time.Now()
	close(start)
	done.Wait()
	wall := time.Since(t0)
	b.StopTimer()
	failIfDenied(b, denied.Load())
	b.ReportMetric(float64(b.N)/wall.Seconds(), "decisions/s")
}

package client

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/lease"
)

// TestAllowMatchesAllowN: Allow's bool fast path decides, counts and
// accounts exactly as AllowN(1) does, with and without a collector, down to
// the near-limit counter and the bucket's level.
func TestAllowMatchesAllowN(t *testing.T) {
	for _, collect := range []bool{false, true} {
		c := offlineClient(t)
		if collect {
			NewCollector(c)
		}
		a := c.Limiter("writes", Key{"tenant": "a"})
		n := c.Limiter("writes", Key{"tenant": "n"})
		// 1 token/s: the 25 calls below drain the 20-token bucket; the
		// last two tokens, and only those, are below 10% of the cap.
		grant(a, 1, 1, 20, false, "a")
		grant(n, 2, 1, 20, false, "n")
		for i := range 25 {
			got, want := a.Allow(), n.AllowN(1).Allowed
			if got != want {
				t.Fatalf("collect=%v call %d: Allow %v, AllowN(1).Allowed %v", collect, i, got, want)
			}
		}
		for r := range numReasons {
			if ga, gn := a.decisions[r].Load(), n.decisions[r].Load(); ga != gn {
				t.Errorf("collect=%v: %v counted %d by Allow, %d by AllowN", collect, Reason(r), ga, gn)
			}
		}
		if ga, gn := a.nearLimit.Load(), n.nearLimit.Load(); ga != gn || ga == 0 {
			t.Errorf("collect=%v: near-limit %d by Allow, %d by AllowN (want equal, > 0)", collect, ga, gn)
		}
		if ga, gn := a.cur.Load().bucket.ConsumedMilli(), n.cur.Load().bucket.ConsumedMilli(); ga != gn {
			t.Errorf("collect=%v: consumed %d by Allow, %d by AllowN", collect, ga, gn)
		}
		if ga, gn := a.unmet.Load(), n.unmet.Load(); ga != gn || ga == 0 {
			t.Errorf("collect=%v: unmet %d by Allow, %d by AllowN (want equal, > 0)", collect, ga, gn)
		}
	}
}

// TestAllowDoesNotAllocate: like AllowN, Allow stays off the allocator.
func TestAllowDoesNotAllocate(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("writes", Key{"tenant": "acme"})
	grant(l, 1, 1_000_000_000, 1_000_000_000, false, "acme")
	if n := testing.AllocsPerRun(1000, func() { l.Allow() }); n != 0 {
		t.Fatalf("Allow allocates %v times per call", n)
	}
}

// TestFastPathExactUnderConcurrency: 64 goroutines mixing Allow and AllowN
// of various costs on one lease never admit more than the bucket's start
// level plus what it can have minted, and the bucket's consumption (what
// the loop reports as admitted demand) and the allowed-decision counter
// match the admissions exactly.
func TestFastPathExactUnderConcurrency(t *testing.T) {
	c := offlineClient(t)
	NewCollector(c)
	l := c.Limiter("writes", Key{"tenant": "acme"})
	const capTokens, rateTokens = 200_000, 1_000
	start := c.clock.Precise()
	grant(l, 1, rateTokens, capTokens, false, "acme")
	var admittedMilli, admissions atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			var milli, n int64
			for i := 0; ; i++ {
				cost := int64(1 + (g+i)%5)
				var ok bool
				if cost == 1 && g%2 == 0 {
					ok = l.Allow()
				} else {
					ok = l.AllowN(cost).Allowed
				}
				if ok {
					milli += cost * lease.MilliPerToken
					n++
				} else if i > 2_000 {
					break
				}
			}
			admittedMilli.Add(milli)
			admissions.Add(n)
		})
	}
	wg.Wait()
	elapsed := c.clock.Precise() - start
	mintable := lease.MulDiv(rateTokens*lease.MilliPerToken, elapsed, int64(time.Second))
	if got, limit := admittedMilli.Load(), int64(capTokens)*lease.MilliPerToken+mintable; got > limit {
		t.Fatalf("admitted %d milli-tokens, more than start %d + mintable %d", got, capTokens*lease.MilliPerToken, mintable)
	}
	if got, want := l.cur.Load().bucket.ConsumedMilli(), admittedMilli.Load(); got != want {
		t.Fatalf("bucket consumed %d, admitted %d", got, want)
	}
	if got, want := l.decisions[Allowed].Load(), admissions.Load(); got != want {
		t.Fatalf("counted %d allowed decisions, made %d", got, want)
	}
}

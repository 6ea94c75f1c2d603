package client_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// TestLLMReservationsKeepSettledBound: LLM-like requests (an estimate of
// 5 tokens reserved, an actual cost lognormal with mean 8 settled when
// the work ends, 20 to 100 ms later) from replicas of a real cluster
// offering about three times the quota. Every settled cost is recorded
// when its Settle returns, and every window of them must stay within
// B + r·W + D, with D = max_debt + the most estimates ever in flight at
// once + the excess the charges reported (docs/design.md §4.1). Short in
// make test (2 replicas, 3 s); with RATION_MEASURE=1, 4 replicas for 30 s,
// logging the utilization by settled tokens (BENCHMARKS.md, "Debt"):
//
//	RATION_MEASURE=1 go test -count=1 -v -run TestLLMReservationsKeepSettledBound ./client
func TestLLMReservationsKeepSettledBound(t *testing.T) {
	replicas, run := 2, 3*time.Second
	if os.Getenv("RATION_MEASURE") != "" {
		replicas, run = 4, 30*time.Second
	}
	const (
		rate, burst, maxDebt = 100, 50, 100 // tokens/s, tokens, tokens
		estimate             = 5
		meanActual           = 8.0
		sigma                = 0.5
	)
	policies := fmt.Sprintf(`
policies:
  - name: tpm
    algorithm: token-bucket
    key: [tenant]
    rate: %d
    burst: %d
    start: full
    max_debt: %d
    lease: {duration: 2s, renew_after: 250ms}
`, rate, burst, maxDebt)
	c := startCluster(t, policies)
	h := newHistory()
	var (
		inFlight, maxIn, excess atomic.Int64
		offered, settledN       atomic.Int64
		wg                      sync.WaitGroup
	)
	// Offered: 3·r tokens/s of actual cost across the replicas.
	period := time.Duration(float64(time.Second) * meanActual * float64(replicas) / (3 * rate))
	mu := math.Log(meanActual) - sigma*sigma/2
	for i := range replicas {
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("llm-%d", i)})
		lim := cl.Limiter("tpm", map[string]string{"tenant": "acme"})
		waitLease(t, nil, lim)
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			type job struct {
				r    *client.Reservation
				done time.Time
				cost int64
			}
			var jobs []job
			tick := time.NewTicker(period)
			defer tick.Stop()
			end := time.Now().Add(run)
			for now := range tick.C {
				kept := jobs[:0]
				for _, j := range jobs {
					if now.Before(j.done) && now.Before(end) {
						kept = append(kept, j)
						continue
					}
					res, err := j.r.Settle(j.cost)
					at := h.since().Nanoseconds()
					if err != nil {
						t.Errorf("settle: %v", err)
						continue
					}
					inFlight.Add(-estimate * 1000)
					excess.Add(res.ExcessMilli)
					settledN.Add(1)
					h.mu.Lock()
					h.h = append(h.h, quotacheck.Admission{AtNanos: at, CostMilli: j.cost * 1000, Who: fmt.Sprint(i)})
					h.mu.Unlock()
				}
				jobs = kept
				if !now.Before(end) {
					if len(jobs) == 0 {
						return
					}
					continue
				}
				offered.Add(1)
				r, d := lim.Reserve(estimate)
				if !d.Allowed {
					continue
				}
				n := inFlight.Add(estimate * 1000)
				for m := maxIn.Load(); n > m && !maxIn.CompareAndSwap(m, n); m = maxIn.Load() {
				}
				actual := max(1, int64(math.Round(math.Exp(mu+sigma*rng.NormFloat64()))))
				work := time.Duration(20+rng.IntN(80)) * time.Millisecond
				jobs = append(jobs, job{r: r, done: now.Add(work), cost: actual})
			}
		}(i)
	}
	wg.Wait()
	settled := h.snapshot()
	var total int64
	for _, a := range settled {
		total += a.CostMilli
	}
	// A few milli-tokens of slack for the stamps, taken after Settle
	// returns (docs/design.md §5, ε_res: r·1 ms per replica).
	d := int64(maxDebt*1000) + maxIn.Load() + excess.Load() + int64(replicas)*rate
	b := quotacheck.Bound{CapacityMilli: burst * 1000, RateMilliPerSec: rate * 1000, SlackMilli: d}
	checkBound(t, "settled tokens", settled, b)
	span := float64(settled[len(settled)-1].AtNanos) / 1e9
	t.Logf("%d replicas, %v: %d reservations offered, %d settled, %.0f tokens settled; D = max_debt %d + in flight %d + excess %d milli-tokens; utilization %.1f%% of B + r·T + D (%.1f%% of r·T)",
		replicas, run, offered.Load(), settledN.Load(), float64(total)/1000, maxDebt*1000, maxIn.Load(), excess.Load(),
		100*float64(total)/(float64(burst*1000+d)+rate*1000*span), 100*float64(total)/(rate*1000*span))
}

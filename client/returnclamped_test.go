package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Rule (i) through the public client (docs/design.md §3.2): a replica that
// got the whole burst and is cut to a share by newcomers loses the rest of
// its bucket when it installs the cut; its acknowledging renewal returns
// that to the pool and the newcomers' raised caps are topped up from it.
// Before, the burst was destroyed (make demo ended at 89.8% of B + r·T).
// r = 1/s makes minting negligible: what the newcomers admit in their
// first seconds is the returned burst, or nothing.
const clampPolicy = `
policies:
  - name: slow
    algorithm: token-bucket
    rate: 1
    burst: 100
    key: [tenant]
    lease: {duration: 10s, renew_after: 1s, drift_ppm: 1000}
`

func TestCutBurstReturnsToNewcomers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster for a few seconds")
	}
	for _, tc := range []struct {
		name string
		on   bool
	}{{"return-clamped on", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := testcluster.New(t, 3, testcluster.WithPolicies(clampPolicy))
			c.WaitForLeader(t)
			h := newHistory()
			// The first replica takes the whole burst, 100 tokens, and
			// keeps it: after its first call it offers nothing (its demand
			// goes to zero, so the others' arrival cuts its cap to what
			// they leave).
			first := newClient(t, client.Config{Servers: servers(c), ClientID: "first"})
			fl := first.Limiter("slow", client.Key{"tenant": "acme"})
			if d := waitLease(t, h, fl); !d.Allowed {
				t.Fatalf("first replica's first call: %+v", d)
			}
			var logs []*grantLog
			var lims []*client.Limiter
			for i := range 3 {
				log := &grantLog{start: time.Now()}
				cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("newcomer-%d", i), OnGrant: log.on})
				logs, lims = append(logs, log), append(lims, cl.Limiter("slow", client.Key{"tenant": "acme"}))
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			defer func() {
				select {
				case <-stop:
				default:
					close(stop)
				}
				wg.Wait()
			}()
			for i, lim := range lims {
				wg.Add(1)
				go func() {
					defer wg.Done()
					load(h, fmt.Sprintf("newcomer-%d", i), lim, 20*time.Millisecond, time.Hour, stop) // 50/s: far above r
				}()
			}
			// Until every newcomer holds a cap: its share of the burst.
			testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
				for i, log := range logs {
					got := false
					for _, g := range log.all() {
						got = got || g.CapMilli >= 10_000
					}
					if !got {
						return fmt.Errorf("newcomer-%d: grants %+v", i, log.all())
					}
				}
				return nil
			})
			// Their buckets hold what they were given; spend it.
			close(stop)
			wg.Wait()
			var newcomers, topUps int64
			for i, lim := range lims {
				for h.decide(fmt.Sprintf("newcomer-%d", i), 1, lim.AllowN).Allowed {
				}
				for _, g := range logs[i].all() {
					topUps += g.TopUpMilli
				}
			}
			for _, a := range h.snapshot() {
				if a.Who != "first" {
					newcomers += a.CostMilli
				}
			}
			checkBound(t, "all replicas", h.snapshot(), quotacheck.Bound{CapacityMilli: 100_000, RateMilliPerSec: 1_000})
			elapsed := h.since()
			t.Logf("newcomers admitted %d tokens in %v (r = 1/s), %d of them topped up from the pool", newcomers/1000, elapsed.Round(time.Millisecond), topUps/1000)
			if minted := elapsed.Milliseconds() + 5_000; tc.on && newcomers < 60_000+minted/2 {
				t.Fatalf("newcomers admitted %d milli-tokens: the first replica's cut burst (about 75 tokens) did not reach them", newcomers)
			}
		})
	}
}

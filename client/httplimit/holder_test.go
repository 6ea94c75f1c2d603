package httplimit_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestKeysOfOneBudgetThroughMiddleware checks one holder per budget
// (docs/design.md §3.4 item 7) as an API reaches it: a per-route layer
// (ByCallerAndRoute) on a policy keyed on the tenant alone, and an Identity
// that returns an attribute the policy ignores, make keys that differ only
// in it. They are one budget: every request of the tenant must fit its B +
// r·W, over every window.
func TestKeysOfOneBudgetThroughMiddleware(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(`
policies:
  - name: tenant-busy
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant]
    lease: {duration: 2s, renew_after: 200ms}
`))
	c.WaitForLeader(t)
	for _, tc := range []struct {
		name     string
		layer    httplimit.Layer
		identity httplimit.KeyFunc
	}{
		{"per-route layer", httplimit.Layer{Policy: "tenant-busy", Key: httplimit.ByCallerAndRoute("route")}, nil},
		{"identity with an extra attribute", httplimit.Layer{Policy: "tenant-busy"}, func(r *http.Request) (client.Key, error) {
			return client.Key{"tenant": "acme", "session": r.Header.Get("Session")}, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newClusterClient(t, c, "mw-"+tc.name)
			var mu sync.Mutex
			start := time.Now()
			var adm []quotacheck.Admission
			mw := mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{tc.layer}, Identity: tc.identity,
				Route: func(r *http.Request) string { return r.URL.Path }})
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				adm = append(adm, quotacheck.Admission{AtNanos: time.Since(start).Nanoseconds(), CostMilli: 1000})
				mu.Unlock()
			}))
			const run = 6 * time.Second
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Go(func() {
					path, session := []string{"/x", "/y"}[i%2], []string{"s1", "s2", "s3", "s4"}[i]
					// Paced by a ticker: a request every 2ms, 4x r from the four.
					tick := time.NewTicker(2 * time.Millisecond)
					defer tick.Stop()
					for time.Since(start) < run {
						do(h, "GET", path, asPrincipal("acme"), withHeader("Session", session))
						<-tick.C
					}
				})
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			// Stamps are taken in the handler, just after the decision: a
			// late stamp can only squeeze a window by the lag, worth r·lag
			// tokens; two tokens of slack cover 200 ms of it. The break
			// admitted many times more.
			b := quotacheck.Bound{CapacityMilli: 10_000, RateMilliPerSec: 10_000, SlackMilli: 2_000}
			if v := quotacheck.Check(adm, b); v != nil {
				t.Fatalf("%d requests admitted in %v: %v", len(adm), run, v)
			}
			t.Logf("%d requests admitted in %v, within B + r·W", len(adm), run)
		})
	}
}

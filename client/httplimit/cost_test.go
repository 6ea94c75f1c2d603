package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestCostsOutOfRange (costs out of range, docs/design.md §2): a cost
// function's negative price is refused (500, ProblemCostInvalid; it used to
// be admitted free), and a price beyond every burst, such as one derived
// from a huge Content-Length, is a 429 without Retry-After (it used to wrap
// into an admission). Neither reaches the handler or spends a token.
func TestCostsOutOfRange(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(`
policies:
  - name: costs
    algorithm: token-bucket
    rate: 0.001
    burst: 10
    key: [tenant]
    lease: {duration: 1h}
`))
	c.WaitForLeader(t)
	cl := newClusterClient(t, c, "httplimit-costs")
	prices := map[string]int64{"/negative": -1, "/huge": 18446744073709552, "/max": client.MaxCost + 1, "/free": 0, "/one": 1}
	mw := mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "costs", Rate: 0.001, Burst: 10}},
		Route: func(r *http.Request) string { return r.URL.Path },
		Cost:  func(_ *http.Request, route string) int64 { return prices[route] }})
	served := 0
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	if rec := do(h, "GET", "/one", asPrincipal("acme")); rec.Code != http.StatusOK {
		t.Fatalf("cost 1: %d", rec.Code)
	}
	problemBody(t, do(h, "GET", "/negative", asPrincipal("acme")), http.StatusInternalServerError, httplimit.ProblemCostInvalid)
	for _, p := range []string{"/huge", "/max"} {
		rec := do(h, "GET", p, asPrincipal("acme"))
		problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
		if ra := rec.Header().Get("Retry-After"); ra != "" {
			t.Errorf("%s: Retry-After %q for a cost no wait admits", p, ra)
		}
	}
	if rec := do(h, "GET", "/free", asPrincipal("acme")); rec.Code != http.StatusOK {
		t.Fatalf("cost 0: %d", rec.Code)
	}
	if served != 2 {
		t.Fatalf("the handler served %d requests, want 2 (costs 1 and 0)", served)
	}
	// The 9 tokens left are intact.
	if d := cl.Limiter("costs", client.Key{"tenant": "acme"}).AllowN(9); !d.Allowed || d.RemainingMilli != 0 {
		t.Fatalf("after the refused prices: %+v", d)
	}
}

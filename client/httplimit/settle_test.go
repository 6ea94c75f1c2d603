package httplimit_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestSettleAfterWork: with SettleAfter, a request is admitted by its
// estimate and the handler settles the measured cost (an LLM proxy
// passing usage.total_tokens): what the estimate missed is charged, never
// refused, leaving a debt that refuses the next request. Bad and repeated
// settlements are errors, and a context the middleware did not admit has
// no settlement.
func TestSettleAfterWork(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(`
policies:
  - name: llm
    algorithm: token-bucket
    rate: 0.001
    burst: 10
    max_debt: 40
    key: [tenant]
    lease: {duration: 1h}
`))
	c.WaitForLeader(t)
	c.WaitForFeatures(t)
	cl := newClusterClient(t, c, "httplimit-settle")
	mw := mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "llm", Rate: 0.001, Burst: 10}},
		Cost: httplimit.Cost(5), SettleAfter: true})
	var errs []error
	h := mw.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		errs = append(errs, httplimit.Settle(r.Context(), -1), httplimit.Settle(r.Context(), 17), httplimit.Settle(r.Context(), 1))
	}))
	if rec := do(h, "GET", "/chat", asPrincipal("acme")); rec.Code != http.StatusOK {
		t.Fatalf("first request: %d", rec.Code)
	}
	if !errors.Is(errs[0], client.ErrInvalidCost) || errs[1] != nil || !errors.Is(errs[2], client.ErrAlreadySettled) {
		t.Fatalf("settlements: %v", errs)
	}
	// 10 - 5 - 12: a debt of 7 tokens. The next request is refused.
	if rec := do(h, "GET", "/chat", asPrincipal("acme")); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a request while in debt: %d", rec.Code)
	}
	if err := httplimit.Settle(t.Context(), 3); !errors.Is(err, httplimit.ErrNoSettlement) {
		t.Fatalf("settle without a settlement: %v", err)
	}
}

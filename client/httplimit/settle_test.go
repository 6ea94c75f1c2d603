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
	mw := settleMiddleware(t, "httplimit-settle")
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

// TestSettleAfterRefundsAndAddCost: with SettleAfter a lower measured
// cost refunds the estimate's difference, and a streaming handler's
// AddCost calls are summed and settled when it returns.
func TestSettleAfterRefundsAndAddCost(t *testing.T) {
	mw := settleMiddleware(t, "httplimit-addcost")
	var addErrs []error
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/settle1":
			_ = httplimit.Settle(r.Context(), 1)
		case "/stream":
			for range 4 { // 4 chunks of 3 tokens: 12 against an estimate of 5
				_, _ = w.Write([]byte("chunk\n"))
				w.(http.Flusher).Flush()
				addErrs = append(addErrs, httplimit.AddCost(r.Context(), 3))
			}
			addErrs = append(addErrs, httplimit.AddCost(r.Context(), -1))
		case "/stream-short":
			addErrs = append(addErrs, httplimit.AddCost(r.Context(), 0), httplimit.AddCost(r.Context(), 1))
		}
	}))
	// Estimate 5, actual 1, five times: only the refunds let all pass.
	for i := range 5 {
		if rec := do(h, "GET", "/settle1", asPrincipal("refund")); rec.Code != http.StatusOK {
			t.Fatalf("request %d settled at 1 of an estimate of 5: %d (refunds missing)", i, rec.Code)
		}
	}
	// A stream of 12 against an estimate of 5 leaves 10-12: a debt of 2
	// refuses the next.
	if rec := do(h, "GET", "/stream", asPrincipal("stream")); rec.Code != http.StatusOK {
		t.Fatalf("stream: %d", rec.Code)
	}
	for i, err := range addErrs {
		if i < 4 && err != nil || i == 4 && !errors.Is(err, client.ErrInvalidCost) {
			t.Fatalf("AddCost %d: %v", i, err)
		}
	}
	if rec := do(h, "GET", "/stream-short", asPrincipal("stream")); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("a request after a stream that went 7 over: %d, want 429", rec.Code)
	}
	// A short stream (1 of 5) refunds 4: twice 5 + 4 more requests fit.
	addErrs = nil
	for i := range 6 {
		if rec := do(h, "GET", "/stream-short", asPrincipal("short")); rec.Code != http.StatusOK {
			t.Fatalf("short stream %d: %d", i, rec.Code)
		}
	}
	for _, err := range addErrs {
		if err != nil {
			t.Fatalf("AddCost: %v", err)
		}
	}
	if err := httplimit.AddCost(t.Context(), 1); !errors.Is(err, httplimit.ErrNoSettlement) {
		t.Fatalf("AddCost without a settlement: %v", err)
	}
}

// settleMiddleware is a SettleAfter middleware with an estimate of 5 on
// policy llm (burst 10, max_debt 40, no refill to speak of) of a
// one-server cluster.
func settleMiddleware(t *testing.T, clientID string) *httplimit.Middleware {
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
	cl := newClusterClient(t, c, clientID)
	return mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "llm", Rate: 0.001, Burst: 10}},
		Cost: httplimit.Cost(5), SettleAfter: true})
}

package httplimit_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestWindowHeaders: a fixed-window layer answers with the window's own
// RateLimit-Policy (q the limit, w the window in seconds), RateLimit (r
// what is left, t the seconds to the reset) and, once the window is spent,
// a 429 whose Retry-After is at the reset; a cost above the limit gets no
// Retry-After.
func TestWindowHeaders(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies("policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n"))
	c.WaitForLeader(t)
	c.ApplyPolicies(t, `
policies:
  - name: hourly
    algorithm: fixed-window
    limit: 3
    window: 1h
    key: [tenant]
`)
	cl := newClusterClient(t, c, "window-headers")
	h := mustNew(t, httplimit.Config{Client: cl, SuccessHeaders: true, Layers: []httplimit.Layer{{Policy: "hourly"}}}).Wrap(okHandler)
	lastR := int64(4)
	for i := range 3 {
		rec := do(h, "GET", "/x", asPrincipal("acme"))
		if rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
		pol := oneItem(t, rec, "RateLimit-Policy")
		if q, w := intParam(t, pol, "RateLimit-Policy", "q"), intParam(t, pol, "RateLimit-Policy", "w"); q != 3 || w != 3600 {
			t.Fatalf("RateLimit-Policy q=%d w=%d, want q=3 w=3600", q, w)
		}
		rl := oneItem(t, rec, "RateLimit")
		r, tt := intParam(t, rl, "RateLimit", "r"), intParam(t, rl, "RateLimit", "t")
		if r >= lastR || r < 0 || tt <= 0 || tt > 3600 {
			t.Fatalf("request %d: RateLimit r=%d (before %d) t=%d", i, r, lastR, tt)
		}
		lastR = r
	}
	rec := do(h, "GET", "/x", asPrincipal("acme"))
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	rl := oneItem(t, rec, "RateLimit")
	r, reset := intParam(t, rl, "RateLimit", "r"), intParam(t, rl, "RateLimit", "t")
	ra, err := strconv.ParseInt(rec.Header().Get("Retry-After"), 10, 64)
	if err != nil || r != 0 || reset <= 0 || ra < reset || ra > reset+1 {
		t.Fatalf("spent window: r=%d t=%d Retry-After %q; want r=0 and Retry-After at the reset t (plus at most 1 s of jitter)", r, reset, rec.Header().Get("Retry-After"))
	}
	// A cost above the whole window's limit can never pass: no Retry-After.
	big := mustNew(t, httplimit.Config{Client: cl, Cost: httplimit.Cost(4), Layers: []httplimit.Layer{{Policy: "hourly"}}}).Wrap(okHandler)
	rec = do(big, "GET", "/x", asPrincipal("initech"))
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	if ra := rec.Header().Get("Retry-After"); ra != "" {
		t.Fatalf("a cost of 4 on a limit of 3 got Retry-After %q", ra)
	}
	if p := oneItem(t, rec, "RateLimit-Policy"); intParam(t, p, "RateLimit-Policy", "q") != 3 {
		t.Fatal("no window policy field on the hopeless refusal")
	}
}

package httplimit_test

import (
	"github.com/ration-dev/ration/internal/sfv"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Policies of the tests that need a cluster. Rates are tiny, so nothing
// refills noticeably while a test runs however slow the machine, and
// leases last an hour, so no renewal (which could resize a bucket to the
// measured demand) happens during a test either: every count is exact.
const testPolicies = `
policies:
  - name: quota
    algorithm: token-bucket
    rate: 0.01
    burst: 2
    key: [tenant]
    lease: {duration: 1h}
  - name: refund-a
    algorithm: token-bucket
    rate: 0.001
    burst: 5
    key: [tenant]
    lease: {duration: 1h}
  - name: refund-b
    algorithm: token-bucket
    rate: 0.001
    burst: 2
    key: [tenant]
    lease: {duration: 1h}
  - name: shadowed
    algorithm: token-bucket
    rate: 0.001
    burst: 1
    key: [tenant]
    lease: {duration: 1h}
    shadow: true
  - name: per-ip
    algorithm: token-bucket
    rate: 0.001
    burst: 1
    key: [ip]
    lease: {duration: 1h}
  - name: per-tenant
    algorithm: token-bucket
    rate: 0.001
    burst: 1
    key: [tenant]
    lease: {duration: 1h}
  - name: weighted
    algorithm: token-bucket
    rate: 0.001
    burst: 10
    charge: cost
    key: [tenant, route]
    lease: {duration: 1h}
  - name: headers
    algorithm: token-bucket
    rate: 2
    burst: 10
    key: [tenant]
    lease: {duration: 1h}
`

// TestWithCluster runs the tests that need real leases against one
// in-process cluster; each uses its own policies or keys.
func TestWithCluster(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(testPolicies))
	c.WaitForLeader(t)
	cl := newClusterClient(t, c, "httplimit-test")
	t.Run("QuotaExceeded429", func(t *testing.T) { testQuotaExceeded(t, cl) })
	t.Run("LaterLayerRefundsEarlier", func(t *testing.T) { testRefund(t, cl) })
	t.Run("ShadowPolicyNeverRejects", func(t *testing.T) { testShadowPolicy(t, cl) })
	t.Run("MiddleLayerRefusesAfterShadowLayer", func(t *testing.T) { testShadowThenRefusal(t, cl) })
	t.Run("ForgedHeadersDoNotChangeKey", func(t *testing.T) { testForgedHeaders(t, cl) })
	t.Run("WeightedRoutes", func(t *testing.T) { testWeightedRoutes(t, cl) })
	t.Run("SuccessHeaders", func(t *testing.T) { testSuccessHeaders(t, cl) })
	t.Run("UnknownPolicyLayerIs503AndRefunds", func(t *testing.T) { testUnknownPolicyLayer(t, cl) })
	t.Run("AllowListBypassesSpentBudget", func(t *testing.T) { testAllowListWithCluster(t, cl) })
}

// testQuotaExceeded: the third request on a burst of 2 is a 429 whose
// headers parse as Structured Fields, whose Retry-After is at least t and
// at least the limiter's own RetryAfter, and whose body is problem+json
// naming the policy and nothing of any other tenant.
func testQuotaExceeded(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg,
		Layers: []httplimit.Layer{{Policy: "quota", Rate: 0.01, Burst: 2}}})
	h := mw.Wrap(okHandler)
	// Another tenant's traffic, which must not show in acme's answer.
	if rec := do(h, "GET", "/x", asPrincipal("globex-secret")); rec.Code != 200 {
		t.Fatalf("globex: %d %s", rec.Code, rec.Body)
	}
	for i := range 2 {
		rec := do(h, "GET", "/x", asPrincipal("acme"))
		if rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
		noLimitingHeaders(t, rec) // success headers are off by default
	}
	rec := do(h, "GET", "/x", asPrincipal("acme"))
	body := problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	if d := body["detail"].(string); !strings.Contains(d, `"quota"`) || containsAny(rec.Body.String(), "globex", "acme") {
		t.Errorf("detail %q: want the policy named and no tenant named", d)
	}
	if body["policy"] != "quota" {
		t.Errorf("policy member %v", body["policy"])
	}

	pol := oneItem(t, rec, "RateLimit-Policy")
	if pol.Item.Kind != sfv.String || pol.Item.Str != "quota" {
		t.Errorf("RateLimit-Policy names %#v, want the String \"quota\"", pol.Item)
	}
	if q, w := intParam(t, pol, "RateLimit-Policy", "q"), intParam(t, pol, "RateLimit-Policy", "w"); q != 2 || w != 200 {
		t.Errorf("RateLimit-Policy q=%d w=%d, want q=2 w=200 (burst 2 at 0.01/s)", q, w)
	}
	rl := oneItem(t, rec, "RateLimit")
	if rl.Item.Kind != sfv.String || rl.Item.Str != "quota" {
		t.Errorf("RateLimit names %#v", rl.Item)
	}
	r, tt := intParam(t, rl, "RateLimit", "r"), intParam(t, rl, "RateLimit", "t")
	if r != 0 {
		t.Errorf("r=%d, want 0", r)
	}
	ra := retryAfterSeconds(t, rec)
	if ra < tt || ra > tt+1 {
		t.Errorf("Retry-After %d, want t=%d plus 0 or 1 s of jitter", ra, tt)
	}
	// The limiter's own wait, asked after the response: it can only have
	// shrunk since, so t (and Retry-After) must cover it.
	d := cl.Limiter("quota", client.Key{"tenant": "acme"}).AllowN(1)
	if d.Allowed || d.Reason != client.Limited {
		t.Fatalf("limiter: %+v, want Limited", d)
	}
	if float64(tt) < d.RetryAfter.Seconds() || float64(ra) < d.RetryAfter.Seconds() {
		t.Errorf("t=%d, Retry-After %d: earlier than the limiter's RetryAfter %v", tt, ra, d.RetryAfter)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "quota", "route": "", "outcome": "limited"}); n != 1 {
		t.Errorf("limited count %v, want 1", n)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "quota", "route": "", "outcome": "allowed"}); n != 3 {
		t.Errorf("allowed count %v, want 3", n)
	}
}

// testRefund: layers refund-a (burst 5) then refund-b (burst 2). Two
// requests spend both; the third is refused by refund-b, and refund-a
// gets its token back: it still holds exactly 3. A request costing more
// than refund-a's burst is refused by refund-a, for good (no Retry-After).
func testRefund(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	cost := int64(1)
	var mu sync.Mutex
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg,
		Cost: func(*http.Request, string) int64 { mu.Lock(); defer mu.Unlock(); return cost },
		Layers: []httplimit.Layer{
			{Policy: "refund-a", Rate: 0.001, Burst: 5},
			{Policy: "refund-b", Rate: 0.001, Burst: 2},
		}})
	h := mw.Wrap(okHandler)
	for i := range 2 {
		if rec := do(h, "GET", "/", asPrincipal("acme")); rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	for range 3 {
		rec := do(h, "GET", "/", asPrincipal("acme"))
		body := problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
		if body["policy"] != "refund-b" || oneItem(t, rec, "RateLimit").Item.Str != "refund-b" {
			t.Fatalf("refused by %v / %v, want refund-b", body["policy"], rec.Header().Get("RateLimit"))
		}
	}
	a := cl.Limiter("refund-a", client.Key{"tenant": "acme"})
	if d := a.AllowN(3); !d.Allowed || d.RemainingMilli != 0 {
		t.Fatalf("refund-a after 2 admissions and 3 refusals by refund-b: AllowN(3) = %+v, want allowed leaving 0 (refunded)", d)
	}

	// Cost 6 > refund-a's burst 5: the first layer refuses, permanently.
	mu.Lock()
	cost = 6
	mu.Unlock()
	rec := do(h, "GET", "/", asPrincipal("initech"))
	body := problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	if body["policy"] != "refund-a" {
		t.Fatalf("refused by %v, want refund-a", body["policy"])
	}
	if v := rec.Header().Get("Retry-After"); v != "" {
		t.Errorf("Retry-After %q for a cost no wait admits", v)
	}
	// And it charged nothing: refund-b still has both tokens.
	if d := cl.Limiter("refund-b", client.Key{"tenant": "initech"}).AllowN(2); !d.Allowed {
		t.Errorf("refund-b after a refusal by refund-a: %+v", d)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "refund-b", "route": "", "outcome": "limited"}); n != 3 {
		t.Errorf("limited{refund-b} = %v, want 3", n)
	}
}

// testShadowPolicy: a shadow policy that would refuse lets the request
// through with no limiting headers (even with SuccessHeaders), and the
// would-be refusal is counted.
func testShadowPolicy(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg, SuccessHeaders: true,
		Layers: []httplimit.Layer{{Policy: "shadowed", Rate: 0.001, Burst: 1}}})
	h := mw.Wrap(okHandler)
	for i := range 5 {
		rec := do(h, "GET", "/", asPrincipal("acme"))
		if rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
		if i > 0 {
			noLimitingHeaders(t, rec)
		}
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "shadowed", "route": "", "outcome": "shadow_limited"}); n != 4 {
		t.Errorf("shadow_limited = %v, want 4", n)
	}
}

// testShadowThenRefusal: layers shadowed (burst 1, shadow), refund-b
// (burst 2), refund-a (burst 5). The first layer's would-be refusals are
// counted although it is not the last layer, and the third request is
// refused by the middle layer, which the 429 and the metric name.
func testShadowThenRefusal(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg,
		Layers: []httplimit.Layer{
			{Policy: "shadowed", Rate: 0.001, Burst: 1},
			{Policy: "refund-b", Rate: 0.001, Burst: 2},
			{Policy: "refund-a", Rate: 0.001, Burst: 5},
		}})
	h := mw.Wrap(okHandler)
	for i := range 2 {
		if rec := do(h, "GET", "/", asPrincipal("umbrella")); rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := do(h, "GET", "/", asPrincipal("umbrella"))
	body := problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	if body["policy"] != "refund-b" || oneItem(t, rec, "RateLimit").Item.Str != "refund-b" {
		t.Fatalf("refused by %v / %v, want refund-b", body["policy"], rec.Header().Get("RateLimit"))
	}
	for _, c := range []struct {
		policy, outcome string
		want            float64
	}{
		{"shadowed", "allowed", 1},
		{"shadowed", "shadow_limited", 2}, // the second request, and the refused third
		{"refund-b", "allowed", 2},
		{"refund-b", "limited", 1},
		{"refund-a", "allowed", 2},
		{"refund-a", "limited", 0},
	} {
		if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": c.policy, "route": "", "outcome": c.outcome}); n != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.outcome, c.policy, n, c.want)
		}
	}
	// refund-a was refunded: it still holds 3 of its 5 tokens.
	if d := cl.Limiter("refund-a", client.Key{"tenant": "umbrella"}).AllowN(3); !d.Allowed || d.RemainingMilli != 0 {
		t.Errorf("refund-a after 2 admissions and a refusal by refund-b: AllowN(3) = %+v, want allowed leaving 0", d)
	}
}

// testForgedHeaders: neither a forged X-Forwarded-For (nor Forwarded,
// X-Real-IP or a tenant header) changes the key, whether the key is the
// principal or the client IP behind trusted proxies.
func testForgedHeaders(t *testing.T, cl *client.Client) {
	var mu sync.Mutex
	var seen []client.Key
	record := func(r *http.Request, id httplimit.Identity) (client.Key, error) {
		k, err := httplimit.ByCaller()(r, id)
		mu.Lock()
		seen = append(seen, k)
		mu.Unlock()
		return k, err
	}
	forge := []reqOpt{withHeader("X-Forwarded-For", "198.51.100.66"), withHeader("Forwarded", "for=198.51.100.67"),
		withHeader("X-Real-IP", "198.51.100.68"), withHeader("X-Tenant", "victim"), withHeader("X-Forwarded-For", "10.9.9.9")}

	// By IP, behind trusted proxies 10.0.0.0/8.
	ipMW := mustNew(t, httplimit.Config{Client: cl, Identity: httplimit.ClientIP("ip", netip.MustParsePrefix("10.0.0.0/8")),
		Layers: []httplimit.Layer{{Policy: "per-ip", Key: record}}})
	h := ipMW.Wrap(okHandler)
	// The client 203.0.113.9 through the proxy 10.0.0.1.
	if rec := do(h, "GET", "/", fromAddr("10.0.0.1:4000"), withHeader("X-Forwarded-For", "203.0.113.9")); rec.Code != 200 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	// The same client through another proxy, forging headers: its own
	// X-Forwarded-For lines (with a hop inside the trusted range) come
	// before the line the proxy appends.
	forged := append([]reqOpt{fromAddr("10.0.0.2:4000"), withHeader("X-Forwarded-For", "198.51.100.1, 10.1.1.1")}, forge...)
	forged = append(forged, withHeader("X-Forwarded-For", "203.0.113.9"))
	if rec := do(h, "GET", "/", forged...); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("forged X-Forwarded-For through the proxy: %d, want 429 (the same key)", rec.Code)
	}
	// The same client connecting directly: its headers are ignored.
	direct := append([]reqOpt{fromAddr("203.0.113.9:5555")}, forge...)
	if rec := do(h, "GET", "/", direct...); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("direct with forged headers: %d, want 429", rec.Code)
	}
	for _, k := range seen {
		if len(k) != 1 || k["ip"] != "203.0.113.9" {
			t.Errorf("key %v, want ip=203.0.113.9", k)
		}
	}

	// By principal: headers play no part.
	seen = nil
	pMW := mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "per-tenant", Key: record}}})
	h = pMW.Wrap(okHandler)
	if rec := do(h, "GET", "/", asPrincipal("acme")); rec.Code != 200 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	if rec := do(h, "GET", "/", append([]reqOpt{asPrincipal("acme")}, forge...)...); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("forged headers: %d, want 429 (the same key)", rec.Code)
	}
	for _, k := range seen {
		if len(k) != 1 || k["tenant"] != "acme" {
			t.Errorf("key %v, want tenant=acme", k)
		}
	}
}

// testWeightedRoutes: behind a mux, a route weighted 5 spends a burst of
// 10 in two requests, per tenant and route; the cheap route has its own
// budget; metric labels are route patterns, never paths; near-limit counts
// admissions leaving under 20% of the burst.
func testWeightedRoutes(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	mux := http.NewServeMux()
	mux.Handle("POST /v1/reports/{id}", okHandler)
	mux.Handle("GET /v1/items", okHandler)
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg, Route: httplimit.MuxRoute(mux),
		Cost:   httplimit.CostByRoute(map[string]int64{"POST /v1/reports/{id}": 5}, 1),
		Layers: []httplimit.Layer{{Policy: "weighted", Key: httplimit.ByCallerAndRoute("route"), Rate: 0.001, Burst: 10}}})
	h := mw.Wrap(mux)
	for i := range 2 {
		if rec := do(h, "POST", "/v1/reports/"+string(rune('a'+i)), asPrincipal("acme")); rec.Code != 200 {
			t.Fatalf("report %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	rec := do(h, "POST", "/v1/reports/zz", asPrincipal("acme"))
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemQuotaExceeded)
	for i := range 3 {
		if rec := do(h, "GET", "/v1/items", asPrincipal("acme")); rec.Code != 200 {
			t.Fatalf("items %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	if n := metric(t, reg, "ration_http_near_limit_total", map[string]string{"policy": "weighted", "route": "POST /v1/reports/{id}"}); n != 1 {
		t.Errorf("near-limit = %v, want 1 (the second report left 0 of 10)", n)
	}
	for _, r := range labelValues(t, reg, "ration_http_requests_total", "route") {
		if r != "POST /v1/reports/{id}" && r != "GET /v1/items" {
			t.Errorf("route label %q is not a pattern", r)
		}
	}
}

// testSuccessHeaders: with SuccessHeaders, admitted responses describe
// the (last) layer.
func testSuccessHeaders(t *testing.T, cl *client.Client) {
	mw := mustNew(t, httplimit.Config{Client: cl, SuccessHeaders: true, Layers: []httplimit.Layer{{Policy: "headers", Rate: 2, Burst: 10}}})
	rec := do(mw.Wrap(okHandler), "GET", "/", asPrincipal("acme"))
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	pol := oneItem(t, rec, "RateLimit-Policy")
	if pol.Item.Str != "headers" || intParam(t, pol, "RateLimit-Policy", "q") != 10 || intParam(t, pol, "RateLimit-Policy", "w") != 5 {
		t.Errorf("RateLimit-Policy %q", rec.Header().Get("RateLimit-Policy"))
	}
	rl := oneItem(t, rec, "RateLimit")
	if r := intParam(t, rl, "RateLimit", "r"); r > 9 || r < 8 {
		t.Errorf("r=%d, want 9 (or 8 if the bucket had not refilled the fraction)", r)
	}
	if v := rec.Header().Get("Retry-After"); v != "" {
		t.Errorf("Retry-After %q on a success", v)
	}
}

// testUnknownPolicyLayer: a second layer the cluster refuses to lease
// (an unknown policy) leaves the request without a lease: 503, not 429,
// and the first layer is refunded.
func testUnknownPolicyLayer(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg,
		Layers: []httplimit.Layer{{Policy: "refund-a"}, {Policy: "no-such-policy"}}})
	h := mw.Wrap(okHandler)
	for range 3 {
		rec := do(h, "GET", "/", asPrincipal("hooli"))
		problemBody(t, rec, http.StatusServiceUnavailable, httplimit.ProblemCapacityReduced)
		retryAfterSeconds(t, rec)
		for _, f := range []string{"RateLimit", "RateLimit-Policy"} {
			if v := rec.Header().Get(f); v != "" {
				t.Errorf("%s %q on a 503", f, v)
			}
		}
	}
	if d := cl.Limiter("refund-a", client.Key{"tenant": "hooli"}).AllowN(5); !d.Allowed {
		t.Errorf("refund-a after three 503s: AllowN(5) = %+v, want the whole burst (refunded)", d)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "no-such-policy", "route": "", "outcome": "unavailable"}); n != 3 {
		t.Errorf("unavailable{no-such-policy} = %v, want 3", n)
	}
}

// testAllowListWithCluster: allow-listed requests pass even when the
// caller's budget is spent, and charge nothing.
func testAllowListWithCluster(t *testing.T, cl *client.Client) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg, AllowList: []func(*http.Request) bool{httplimit.PathIs("/healthz")},
		Layers: []httplimit.Layer{{Policy: "per-tenant"}}})
	h := mw.Wrap(okHandler)
	if rec := do(h, "GET", "/work", asPrincipal("umbrella")); rec.Code != 200 {
		t.Fatalf("%d", rec.Code)
	}
	if rec := do(h, "GET", "/work", asPrincipal("umbrella")); rec.Code != 429 {
		t.Fatalf("%d, want 429", rec.Code)
	}
	for range 5 {
		rec := do(h, "GET", "/healthz", asPrincipal("umbrella"))
		if rec.Code != 200 {
			t.Fatalf("healthz: %d", rec.Code)
		}
		noLimitingHeaders(t, rec)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "per-tenant", "route": "", "outcome": "allowed"}); n != 1 {
		t.Errorf("allowed = %v, want 1 (allow-listed requests are not counted)", n)
	}
}

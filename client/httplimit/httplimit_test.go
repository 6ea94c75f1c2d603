package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/client/inflight"
)

// TestFailClosedIs503: a client that cannot reach the cluster has no
// lease (NoLease): the answer is 503 with Retry-After and the
// capacity-reduced problem type, never 429, and no RateLimit fields.
func TestFailClosedIs503(t *testing.T) {
	reg := prometheus.NewRegistry()
	cl := unavailableClient(t)
	mw := mustNew(t, httplimit.Config{Client: cl, Registerer: reg,
		Layers: []httplimit.Layer{{Policy: "per-tenant", Rate: 1, Burst: 5}, {Policy: "global", Key: httplimit.Global(), Rate: 100, Burst: 100}}})
	h := mw.Wrap(okHandler)
	for range 3 {
		rec := do(h, "GET", "/", asPrincipal("acme"))
		body := problemBody(t, rec, http.StatusServiceUnavailable, httplimit.ProblemCapacityReduced)
		if ra := retryAfterSeconds(t, rec); ra > 2 {
			t.Errorf("Retry-After %d, want 1 or 2", ra)
		}
		if _, ok := body["policy"]; ok {
			t.Errorf("503 body names a policy: %v", body)
		}
		for _, f := range []string{"RateLimit", "RateLimit-Policy"} {
			if v := rec.Header().Get(f); v != "" {
				t.Errorf("%s %q on a 503", f, v)
			}
		}
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "per-tenant", "route": "", "outcome": "unavailable"}); n != 3 {
		t.Errorf("unavailable{per-tenant} = %v, want 3 (the first layer has no lease)", n)
	}
}

// TestShadowModeNeverRejects: Config.Shadow lets everything through with
// no limiting fields, and counts what it would have refused.
func TestShadowModeNeverRejects(t *testing.T) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: unavailableClient(t), Registerer: reg, Shadow: true, SuccessHeaders: true,
		InFlight: inflight.New(inflight.Config{Limit: 1}),
		Layers:   []httplimit.Layer{{Policy: "per-tenant", Rate: 1, Burst: 5}}})
	release := make(chan struct{})
	entered := make(chan struct{})
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	}))
	for range 4 {
		rec := do(h, "GET", "/", asPrincipal("acme"))
		if rec.Code != 200 {
			t.Fatalf("shadow mode answered %d", rec.Code)
		}
		noLimitingHeaders(t, rec)
	}
	// A second concurrent request is over the in-flight limit: let through.
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(h, "GET", "/slow", asPrincipal("acme")) }()
	<-entered
	rec := do(h, "GET", "/", asPrincipal("acme"))
	close(release)
	<-done
	if rec.Code != 200 {
		t.Fatalf("over the in-flight limit in shadow mode: %d", rec.Code)
	}
	noLimitingHeaders(t, rec)
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "per-tenant", "route": "", "outcome": "shadow_unavailable"}); n != 6 {
		t.Errorf("shadow_unavailable = %v, want 6 (every request: the client has no lease)", n)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "inflight", "route": "", "outcome": "shadow_concurrency_limited"}); n != 1 {
		t.Errorf("shadow_concurrency_limited = %v, want 1", n)
	}
}

// TestAllowList: allow-listed requests never reach the limiter: they pass
// even when every limited request would be refused, need no principal,
// and are not counted. PeerIn looks at the connection, not at headers.
func TestAllowList(t *testing.T) {
	reg := prometheus.NewRegistry()
	mw := mustNew(t, httplimit.Config{Client: unavailableClient(t), Registerer: reg,
		AllowList: []func(*http.Request) bool{httplimit.PathIs("/healthz"), httplimit.PeerIn(netip.MustParsePrefix("10.20.0.0/16"))},
		Layers:    []httplimit.Layer{{Policy: "per-tenant"}}})
	h := mw.Wrap(okHandler)
	if rec := do(h, "GET", "/work", asPrincipal("acme")); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("limited route: %d, want 503", rec.Code)
	}
	for range 3 {
		rec := do(h, "GET", "/healthz")
		if rec.Code != 200 {
			t.Fatalf("health check: %d", rec.Code)
		}
		noLimitingHeaders(t, rec)
		if rec := do(h, "GET", "/work", fromAddr("10.20.3.4:999")); rec.Code != 200 {
			t.Fatalf("internal caller: %d", rec.Code)
		}
	}
	// A forged header does not make an outside caller internal.
	if rec := do(h, "GET", "/work", asPrincipal("acme"), fromAddr("203.0.113.5:1"), withHeader("X-Forwarded-For", "10.20.3.4")); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("outside caller claiming an internal address: %d, want 503 (limited)", rec.Code)
	}
	if vs := labelValues(t, reg, "ration_http_requests_total", "outcome"); len(vs) != 1 || vs[0] != "unavailable" {
		t.Errorf("outcomes counted %v, want only the two limited requests' unavailable", vs)
	}
}

// TestNoPrincipal: without an authenticated principal the default
// identity fails and the request is answered 500 (a configuration error:
// authentication must run first), without disclosing the error.
func TestNoPrincipal(t *testing.T) {
	mw := mustNew(t, httplimit.Config{Client: unavailableClient(t), Layers: []httplimit.Layer{{Policy: "p"}}})
	rec := do(mw.Wrap(okHandler), "GET", "/", withHeader("X-Tenant", "acme"))
	problemBody(t, rec, http.StatusInternalServerError, httplimit.ProblemKeyUnavailable)

	var got error
	mw = mustNew(t, httplimit.Config{Client: unavailableClient(t), Layers: []httplimit.Layer{{Policy: "p"}},
		OnError: func(w http.ResponseWriter, r *http.Request, err error) { got = err; w.WriteHeader(401) }})
	if rec := do(mw.Wrap(okHandler), "GET", "/"); rec.Code != 401 || !errors.Is(got, httplimit.ErrNoPrincipal) {
		t.Fatalf("OnError: %d %v", rec.Code, got)
	}
}

// TestInFlightLayer: the in-flight limit refuses a caller's request over
// its limit with 429 (concurrency-exceeded), other callers are not
// affected, and a panicking handler releases its slot.
func TestInFlightLayer(t *testing.T) {
	reg := prometheus.NewRegistry()
	lim := inflight.New(inflight.Config{Limit: 1})
	mw := mustNew(t, httplimit.Config{Client: unavailableClient(t), Registerer: reg, InFlight: lim})
	release := make(chan struct{})
	entered := make(chan struct{})
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			entered <- struct{}{}
			<-release
		case "/panic":
			panic("handler bug")
		}
	}))
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do(h, "GET", "/slow", asPrincipal("acme")) }()
	<-entered
	rec := do(h, "GET", "/", asPrincipal("acme"))
	problemBody(t, rec, http.StatusTooManyRequests, httplimit.ProblemConcurrencyExceeded)
	retryAfterSeconds(t, rec)
	if rec := do(h, "GET", "/", asPrincipal("globex")); rec.Code != 200 {
		t.Fatalf("another caller: %d", rec.Code)
	}
	close(release)
	if rec := <-done; rec.Code != 200 {
		t.Fatalf("slow request: %d", rec.Code)
	}
	for range 3 {
		func() {
			defer func() {
				if p := recover(); p != "handler bug" {
					t.Fatalf("recovered %v, want the handler's panic", p)
				}
			}()
			do(h, "GET", "/panic", asPrincipal("acme"))
		}()
		if n := lim.Keys(); n != 0 {
			t.Fatalf("%d keys hold slots after a panic", n)
		}
	}
	if rec := do(h, "GET", "/", asPrincipal("acme")); rec.Code != 200 {
		t.Fatalf("after panics: %d", rec.Code)
	}
	if n := metric(t, reg, "ration_http_requests_total", map[string]string{"policy": "inflight", "route": "", "outcome": "concurrency_limited"}); n != 1 {
		t.Errorf("concurrency_limited = %v, want 1", n)
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	kf := httplimit.ClientIP("ip", trusted...)
	for _, tc := range []struct {
		name, remote string
		xff          []string
		want         string
	}{
		{"direct", "203.0.113.9:1", nil, "203.0.113.9"},
		{"direct ignores the header", "203.0.113.9:1", []string{"10.0.0.7, 1.2.3.4"}, "203.0.113.9"},
		{"one trusted proxy", "10.0.0.1:1", []string{"203.0.113.9"}, "203.0.113.9"},
		{"forged left hops", "10.0.0.1:1", []string{"1.2.3.4, 10.5.5.5, 203.0.113.9"}, "203.0.113.9"},
		{"two trusted proxies", "10.0.0.1:1", []string{"1.2.3.4, 203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"split header lines", "10.0.0.1:1", []string{"1.2.3.4", "203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"all trusted", "10.0.0.1:1", []string{"10.3.3.3, 10.0.0.2"}, "10.3.3.3"},
		{"no header from a proxy", "10.0.0.1:1", nil, "10.0.0.1"},
		{"garbage stops the walk", "10.0.0.1:1", []string{"203.0.113.9, bogus"}, "10.0.0.1"},
		{"hop with port", "10.0.0.1:1", []string{"203.0.113.9:4711"}, "203.0.113.9"},
		{"mapped IPv4", "[::ffff:203.0.113.9]:1", nil, "203.0.113.9"},
		{"IPv6 by /64", "[2001:db8:1:2:aaaa::1]:1", nil, "2001:db8:1:2::/64"},
		{"IPv6 through a v6 proxy", "[fd00::1]:1", []string{"[2001:db8:1:2::99]:80"}, "2001:db8:1:2::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.remote
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			r.Header.Set("X-Real-IP", "198.51.100.1")
			r.Header.Set("Forwarded", "for=198.51.100.2")
			k, err := kf(r)
			if err != nil || k["ip"] != tc.want || len(k) != 1 {
				t.Fatalf("key %v, %v; want ip=%s", k, err, tc.want)
			}
		})
	}
}

func TestPrincipalContext(t *testing.T) {
	ctx := httplimit.WithPrincipal(context.Background(), "acme")
	if p, ok := httplimit.PrincipalFromContext(ctx); !ok || p != "acme" {
		t.Fatalf("%q %v", p, ok)
	}
	if _, ok := httplimit.PrincipalFromContext(httplimit.WithPrincipal(context.Background(), "")); ok {
		t.Fatal("an empty principal counts as present")
	}
	k, err := httplimit.Principal("account")(httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if err != nil || len(k) != 1 || k["account"] != "acme" {
		t.Fatalf("%v %v", k, err)
	}
}

func TestNewValidates(t *testing.T) {
	cl := unavailableClient(t)
	for name, cfg := range map[string]httplimit.Config{
		"no client":   {Layers: []httplimit.Layer{{Policy: "p"}}},
		"no layers":   {Client: cl},
		"no policy":   {Client: cl, Layers: []httplimit.Layer{{}}},
		"negative":    {Client: cl, Layers: []httplimit.Layer{{Policy: "p", Burst: -1}}},
		"bad metrics": {Client: cl, Layers: []httplimit.Layer{{Policy: "p"}}, Registerer: conflicting(t)},
	} {
		if _, err := httplimit.New(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Two middlewares may share a registry.
	reg := prometheus.NewRegistry()
	for range 2 {
		mustNew(t, httplimit.Config{Client: cl, Layers: []httplimit.Layer{{Policy: "p"}}, Registerer: reg})
	}
}

// conflicting returns a registry where ration_http_requests_total is
// already taken by a different metric.
func conflicting(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "ration_http_requests_total", Help: "x"}))
	return reg
}

func TestCostBelowOneIsFree(t *testing.T) {
	mw := mustNew(t, httplimit.Config{Client: unavailableClient(t), Cost: httplimit.CostByRoute(map[string]int64{"": 0}, 1),
		Layers: []httplimit.Layer{{Policy: "p"}}})
	if rec := do(mw.Wrap(okHandler), "GET", "/", asPrincipal("a")); rec.Code != 200 {
		t.Fatalf("%d", rec.Code)
	}
}

package client

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/version"
)

// offlineClient is a Client without a background loop or servers: the
// tests install grants by hand.
func offlineClient(t *testing.T) *Client {
	t.Helper()
	cfg := Config{Servers: []string{"127.0.0.1:1"}, ClientID: "metrics-test", NoFirstLeaseWait: true}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	return &Client{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, limiters: map[string]*Limiter{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// grant installs a lease of rate tokens/s and cap tokens, full, for 10s.
func grant(l *Limiter, id uint64, rate, capTokens int64, shadow bool, key string) {
	l.install(l.c.clock.Precise(), &api.Grant{LeaseId: id, RateMilliPerSec: rate * 1000, CapMilli: capTokens * 1000,
		StartMilli: capTokens * 1000, TtlNanos: int64(10 * time.Second), RenewAfterNanos: int64(3 * time.Second),
		Shadow: shadow, CanonicalKey: key})
}

func TestCollectorCounts(t *testing.T) {
	c := offlineClient(t)
	// Attach first: allowed decisions are counted only once a collector is.
	col := NewCollector(c)
	acme := c.Limiter("writes", Key{"tenant": "acme"})
	if d := acme.AllowN(1); d.Reason != NoLease {
		t.Fatalf("before the grant: %+v", d)
	}
	grant(acme, 1, 1, 10, false, "acme")
	// Ten admissions empty the bucket (it mints 1 token/s): the last one
	// leaves less than 10% of the cap; the next is limited.
	for i := range 10 {
		if d := acme.AllowN(1); !d.Allowed {
			t.Fatalf("admission %d: %+v", i, d)
		}
	}
	if d := acme.AllowN(1); d.Reason != Limited {
		t.Fatalf("empty bucket: %+v", d)
	}
	if d := acme.AllowN(100); d.Reason != ExceedsCapacity {
		t.Fatalf("cost above the cap: %+v", d)
	}
	globex := c.Limiter("writes", Key{"tenant": "globex"})
	grant(globex, 2, 2, 20, false, "globex")
	reads := c.Limiter("reads", Key{"tenant": "acme"})
	grant(reads, 3, 1, 1, true, "acme")
	reads.AllowN(1)
	if d := reads.AllowN(1); d.Reason != ShadowDenied || !d.Allowed || !d.Shadow {
		t.Fatalf("shadow: %+v", d)
	}
	c.rpcStats.observe(opRenew, int64(3*time.Millisecond))
	c.rpcStats.observe(opRenew, int64(40*time.Millisecond))
	c.rpcStats.observe(opAcquire, int64(20*time.Second))
	c.rpcStats.fail(opRenew, status.Error(codes.Unavailable, "down"))
	c.rpcStats.fail(opAcquire, status.Error(codes.NotFound, "no policy"))
	c.rpcStats.fail(opAcquire, nil)

	want := `
# HELP ration_client_decisions_total Admission decisions, by policy and reason.
# TYPE ration_client_decisions_total counter
ration_client_decisions_total{policy="reads",reason="allowed"} 1
ration_client_decisions_total{policy="reads",reason="exceeds-capacity"} 0
ration_client_decisions_total{policy="reads",reason="fallback-allowed"} 0
ration_client_decisions_total{policy="reads",reason="invalid-cost"} 0
ration_client_decisions_total{policy="reads",reason="limited"} 0
ration_client_decisions_total{policy="reads",reason="no-lease"} 0
ration_client_decisions_total{policy="reads",reason="shadow-denied"} 1
ration_client_decisions_total{policy="reads",reason="unavailable"} 0
ration_client_decisions_total{policy="writes",reason="allowed"} 10
ration_client_decisions_total{policy="writes",reason="exceeds-capacity"} 1
ration_client_decisions_total{policy="writes",reason="fallback-allowed"} 0
ration_client_decisions_total{policy="writes",reason="invalid-cost"} 0
ration_client_decisions_total{policy="writes",reason="limited"} 1
ration_client_decisions_total{policy="writes",reason="no-lease"} 1
ration_client_decisions_total{policy="writes",reason="shadow-denied"} 0
ration_client_decisions_total{policy="writes",reason="unavailable"} 0
# HELP ration_client_shadow_denials_total Decisions a shadow policy would have denied (they were allowed).
# TYPE ration_client_shadow_denials_total counter
ration_client_shadow_denials_total{policy="reads"} 1
ration_client_shadow_denials_total{policy="writes"} 0
# HELP ration_client_near_limit_decisions_total Admissions that left the local bucket below 10% of its cap.
# TYPE ration_client_near_limit_decisions_total counter
ration_client_near_limit_decisions_total{policy="reads"} 1
ration_client_near_limit_decisions_total{policy="writes"} 1
# HELP ration_client_leases Keys holding a usable lease.
# TYPE ration_client_leases gauge
ration_client_leases{policy="reads"} 1
ration_client_leases{policy="writes"} 2
# HELP ration_client_lease_rate_tokens_per_second Rate share of the usable leases, summed.
# TYPE ration_client_lease_rate_tokens_per_second gauge
ration_client_lease_rate_tokens_per_second{policy="reads"} 1
ration_client_lease_rate_tokens_per_second{policy="writes"} 3
# HELP ration_client_lease_cap_tokens Local cap of the usable leases, summed.
# TYPE ration_client_lease_cap_tokens gauge
ration_client_lease_cap_tokens{policy="reads"} 1
ration_client_lease_cap_tokens{policy="writes"} 30
# HELP ration_client_renewal_duration_seconds Duration of the background loop's acquire and renew RPCs, retries included.
# TYPE ration_client_renewal_duration_seconds histogram
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.001"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.0025"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.005"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.01"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.025"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.05"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.1"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.25"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="0.5"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="1"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="2.5"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="5"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="10"} 0
ration_client_renewal_duration_seconds_bucket{op="acquire",le="+Inf"} 1
ration_client_renewal_duration_seconds_sum{op="acquire"} 20
ration_client_renewal_duration_seconds_count{op="acquire"} 1
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.001"} 0
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.0025"} 0
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.005"} 1
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.01"} 1
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.025"} 1
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.05"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.1"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.25"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="0.5"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="1"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="2.5"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="5"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="10"} 2
ration_client_renewal_duration_seconds_bucket{op="renew",le="+Inf"} 2
ration_client_renewal_duration_seconds_sum{op="renew"} 0.043
ration_client_renewal_duration_seconds_count{op="renew"} 2
# HELP ration_client_renewal_errors_total Failed acquire and renew RPCs and per-key refusals, by gRPC code.
# TYPE ration_client_renewal_errors_total counter
ration_client_renewal_errors_total{code="Internal",op="acquire"} 1
ration_client_renewal_errors_total{code="NotFound",op="acquire"} 1
ration_client_renewal_errors_total{code="Unavailable",op="renew"} 1
`
	names := []string{"ration_client_decisions_total", "ration_client_shadow_denials_total", "ration_client_near_limit_decisions_total",
		"ration_client_leases", "ration_client_lease_rate_tokens_per_second", "ration_client_lease_cap_tokens",
		"ration_client_renewal_duration_seconds", "ration_client_renewal_errors_total"}
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	// The time to expiry is the soonest deadline: at most the 10s TTL.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, mf := range mfs {
		if mf.GetName() != "ration_client_lease_time_to_expiry_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := m.GetGauge().GetValue(); v <= 0 || v > 10 {
				t.Errorf("time to expiry %v, want in (0, 10]", v)
			}
			found++
		}
	}
	if found != 2 {
		t.Errorf("%d time-to-expiry series, want one per policy (2)", found)
	}
	if problems, err := testutil.CollectAndLint(col); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestCollectorKeyLabel(t *testing.T) {
	c := offlineClient(t)
	grant(c.Limiter("writes", Key{"tenant": "acme"}), 1, 1, 10, false, "acme")
	grant(c.Limiter("writes", Key{"tenant": "globex"}), 2, 2, 20, false, "globex")
	col := NewCollector(c, WithKeyLabel(), WithConstLabels(prometheus.Labels{"replica": "r1"}))
	want := `
# HELP ration_client_lease_rate_tokens_per_second Rate share of the usable leases, summed.
# TYPE ration_client_lease_rate_tokens_per_second gauge
ration_client_lease_rate_tokens_per_second{key="acme",policy="writes",replica="r1"} 1
ration_client_lease_rate_tokens_per_second{key="globex",policy="writes",replica="r1"} 2
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), "ration_client_lease_rate_tokens_per_second"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(col, "ration_client_leases"); n != 2 {
		t.Errorf("%d lease series with WithKeyLabel, want 2", n)
	}
	// The build's gauge, with the collector's const labels (several
	// clients in one registry stay apart).
	in := version.Get()
	want = `
# HELP ration_build_info A metric with a constant '1' value labeled by the version, VCS revision and Go version ration was built from.
# TYPE ration_build_info gauge
ration_build_info{goversion="` + in.GoVersion + `",replica="r1",revision="` + in.Revision + `",version="` + in.Version + `"} 1
`
	if err := testutil.CollectAndCompare(col, strings.NewReader(want), version.BuildInfoName); err != nil {
		t.Fatal(err)
	}
}

// TestCountingDoesNotAllocate: the counting stays off the allocator.
func TestCountingDoesNotAllocate(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("writes", Key{"tenant": "acme"})
	grant(l, 1, 1_000_000_000, 1_000_000_000, false, "acme")
	if n := testing.AllocsPerRun(1000, func() { l.AllowN(1) }); n != 0 {
		t.Fatalf("AllowN allocates %v times per call", n)
	}
	if got := l.decisions[Allowed].Load(); got != 0 {
		t.Fatalf("counted %d admissions with no collector attached; the fast path should not count", got)
	}
	NewCollector(c) // attaching a collector turns counting on
	if n := testing.AllocsPerRun(1000, func() { l.AllowN(1) }); n != 0 {
		t.Fatalf("AllowN allocates %v times per call while counting", n)
	}
	if got := l.decisions[Allowed].Load(); got < 1000 {
		t.Fatalf("counted %d admissions, want >= 1000", got)
	}
}

// value gathers col and returns the value of the one series of name with
// label = v; it fails the test if there is none.
func value(t *testing.T, col prometheus.Collector, name, label, v string) float64 {
	t.Helper()
	x, ok := lookupMetric(t, col, name, label, v)
	if !ok {
		t.Fatalf("no series %s{%s=%q}", name, label, v)
	}
	return x
}

// lookupMetric gathers col and returns the value of the series of name
// with label = v (a counter's or a gauge's), and whether there is one.
func lookupMetric(t *testing.T, col prometheus.Collector, name, label, v string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == v {
					if cnt := m.GetCounter(); cnt != nil {
						return cnt.GetValue(), true
					}
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

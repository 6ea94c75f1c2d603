package edge

import (
	"context"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestBoundAcrossEdgesAndClient: two edges (each called by Envoy's RLS
// client over a real socket) and one embedded client share one key of a
// 20/s, burst 20 rule, together offering three times the quota. Every
// window of the admissions holds at most B + r·W. Each admission is the
// span between a stamp before the call and one after its answer, and the
// check flags only a window that must hold more than the bound whatever
// the decision instants inside those spans were
// (quotacheck.CertainViolation).
func TestBoundAcrossEdgesAndClient(t *testing.T) {
	conf := loadEnvoy(t, `
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 20}
`)
	c := startCluster(t, conf.PolicyYAML())
	rule := conf.Match("api", []string{"tenant"}, []string{"acme"})
	e1 := startEdge(t, servers(c), conf, "edge-a")
	e2 := startEdge(t, servers(c), conf, "edge-b")
	cl := newClusterClient(t, c, "embedded")
	lim := cl.Limiter(rule.Policy, rule.Key([]string{"acme"}))

	// First leases, without spending (hits_addend 0).
	probe := withHits(desc("tenant=acme"), 0)
	e1.waitOK(t, "api", probe)
	e2.waitOK(t, "api", probe)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(0); !d.Allowed {
			return errString("embedded: " + d.Reason.String())
		}
		return nil
	})

	const (
		period   = 50 * time.Millisecond // 20/s per caller: 3 × the quota
		duration = 4 * time.Second
	)
	start := time.Now()
	var mu sync.Mutex
	var spans []quotacheck.Span
	offered := map[string]int{}
	record := func(who string, from, to time.Duration, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		offered[who]++
		if ok {
			spans = append(spans, quotacheck.Span{FromNanos: from.Nanoseconds(), ToNanos: to.Nanoseconds(), CostMilli: 1000})
		}
	}
	var wg sync.WaitGroup
	run := func(who string, decide func() bool) {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for time.Since(start) < duration {
			<-tick.C
			from := time.Since(start)
			ok := decide()
			record(who, from, time.Since(start), ok)
		}
	}
	for _, x := range []struct {
		who string
		h   *harness
	}{{"edge-a", e1}, {"edge-b", e2}} {
		wg.Add(1)
		go run(x.who, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
			defer cancel()
			r, err := x.h.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant=acme")}})
			if err != nil {
				t.Errorf("%s: %v", x.who, err)
				return false
			}
			return r.GetOverallCode() == rlspb.RateLimitResponse_OK
		})
	}
	wg.Add(1)
	go run("embedded", func() bool { return lim.AllowN(1).Allowed })
	wg.Wait()

	bound := quotacheck.Bound{CapacityMilli: 20_000, RateMilliPerSec: 20_000}
	elapsed := time.Since(start)
	t.Logf("offered %v over %v; admitted %d (B + r·T = %.0f)", offered, elapsed, len(spans),
		20+20*elapsed.Seconds())
	if v, broken := quotacheck.CertainViolation(spans, bound); broken {
		t.Fatalf("bound broken across two edges and a client: %v", v)
	}
	// The load was real: half the quota is certainly exceeded, so a
	// doubled budget (each edge holding the whole of it, say) would show.
	if _, broken := quotacheck.CertainViolation(spans, quotacheck.Bound{CapacityMilli: 10_000, RateMilliPerSec: 10_000}); !broken {
		t.Errorf("admissions within half the quota: the test did not load the key (control)")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

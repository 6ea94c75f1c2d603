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

// Policies for the failure-mode tests: a 1s lease so a cut client's lease
// runs out quickly.
const failPolicies = `
policies:
  - name: closed
    algorithm: token-bucket
    rate: 100
    burst: 50
    key: [tenant]
    lease: {duration: 1s, renew_after: 300ms, drift_ppm: 1000}
  - name: open
    algorithm: token-bucket
    rate: 100
    burst: 50
    key: [tenant]
    lease: {duration: 1s, renew_after: 300ms, drift_ppm: 1000}
    failure: fail-open
    fallback_rate: 20
  - name: shadowed
    algorithm: token-bucket
    rate: 10
    burst: 5
    key: [tenant]
    lease: {duration: 1s, renew_after: 300ms, drift_ppm: 1000}
    shadow: true
`

const failLease = time.Second

type decided struct {
	at time.Duration
	d  client.Decision
}

// cutResult is one client's run in TestFailureModes.
type cutResult struct {
	h     *history
	ds    []decided
	cutAt time.Duration
}

// cutRuns runs one client per policy, each behind its own proxies, at 150
// requests/s: for warm after all hold leases, then cuts every proxy and
// goes on for after. The clients run concurrently on one cluster.
func cutRuns(t *testing.T, warm, after time.Duration, policies ...string) map[string]*cutResult {
	t.Helper()
	c := startCluster(t, failPolicies)
	var all []*proxy
	lims := map[string]*client.Limiter{}
	out := map[string]*cutResult{}
	for _, p := range policies {
		ps, addrs := proxies(t, c)
		all = append(all, ps...)
		cl := newClient(t, client.Config{Servers: addrs, ClientID: "cut-" + p, RequestTimeout: 300 * time.Millisecond,
			Logger: testLogger(t, "cut-"+p)})
		lims[p] = cl.Limiter(p, client.Key{"tenant": "acme"})
		out[p] = &cutResult{h: newHistory()}
	}
	for _, p := range policies {
		waitLease(t, out[p].h, lims[p])
	}
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range policies {
		r, lim := out[p], lims[p]
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / 150)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				d := r.h.decide("c", 1, lim.AllowN)
				r.ds = append(r.ds, decided{at: r.h.since(), d: d})
			}
		}()
	}
	waitUntilT(t, start, warm)
	cutAll(all)
	for _, r := range out {
		r.cutAt = r.h.since()
	}
	waitUntilT(t, start, time.Since(start)+after)
	close(stop)
	wg.Wait()
	return out
}

// waitUntilT waits (polling, with a deadline) until d has passed since start.
func waitUntilT(t *testing.T, start time.Time, d time.Duration) {
	t.Helper()
	testcluster.WaitFor(t, d+testcluster.DefaultWait, func() error {
		if el := time.Since(start); el < d {
			return fmt.Errorf("at %v, waiting for %v", el, d)
		}
		return nil
	})
}

// TestFailureModes: three clients, on a fail-closed, a fail-open and a
// shadow policy, each lose the cluster at once (their proxies are cut).
func TestFailureModes(t *testing.T) {
	t.Parallel()
	res := cutRuns(t, time.Second, failLease+1500*time.Millisecond, "closed", "open", "shadowed")
	t.Run("closed", func(t *testing.T) { checkFailClosed(t, res["closed"]) })
	t.Run("open", func(t *testing.T) { checkFailOpen(t, res["open"]) })
	t.Run("shadow", func(t *testing.T) { checkShadow(t, res["shadowed"]) })
}

// checkFailClosed: once the cluster is unreachable and the lease's
// deadline has passed (at most one lease duration after the cut: the last
// renewal was sent before it), every AllowN answers Unavailable, never
// Allowed and never Limited. Before that the client still admits from its
// lease, within the bound.
func checkFailClosed(t *testing.T, r *cutResult) {
	h, ds, cutAt := r.h, r.ds, r.cutAt
	// One client holds all of B and r and offers more: it admits right at
	// its bucket's mint instants, so the bound has no headroom but the
	// drift factor's (0.1% of r·W), which a stamp taken half a millisecond
	// after its decision erases: checked with decision spans.
	checkBoundSpans(t, "fail-closed client", h.spanSnapshot(), quotacheck.Bound{CapacityMilli: 50_000, RateMilliPerSec: 100_000})
	var firstUnavail time.Duration
	counts := map[client.Reason]int{}
	for _, x := range ds {
		if x.d.Reason == client.Unavailable && firstUnavail == 0 {
			firstUnavail = x.at
		}
		if x.at < cutAt+failLease {
			continue
		}
		counts[x.d.Reason]++
		if x.d.Allowed || x.d.Reason != client.Unavailable || x.d.Shadow {
			t.Errorf("at %v (%v after the cut, past the deadline): %+v, want Unavailable and not allowed", x.at, x.at-cutAt, x.d)
			break
		}
	}
	if firstUnavail == 0 {
		t.Fatalf("never Unavailable")
	}
	t.Logf("cut at %v; first Unavailable %v after the cut; after cut+D: %v", cutAt, firstUnavail-cutAt, counts)
	if counts[client.Unavailable] < 50 {
		t.Errorf("only %d decisions after the deadline", counts[client.Unavailable])
	}
}

// checkFailOpen: with failure: fail-open and fallback_rate f = 20/s, once
// the lease's deadline has passed the client goes on admitting from its
// local fallback bucket (burst g = one second of f), with Reason
// FallbackAllowed, and refusing with Limited, never Unavailable. Those
// admissions keep g + f·W over every window, exactly; everything together
// keeps the relaxed bound B + g + (r + f)·W (design.md §5, ε_open).
func checkFailOpen(t *testing.T, r *cutResult) {
	h, ds, cutAt := r.h, r.ds, r.cutAt
	all := h.snapshot()
	checkBound(t, "lease and fallback", all, quotacheck.Bound{CapacityMilli: 50_000 + 20_000, RateMilliPerSec: 100_000 + 20_000})
	var fallback []quotacheck.Admission
	var firstFallback time.Duration
	counts := map[client.Reason]int{}
	for _, x := range ds {
		if x.d.Reason == client.FallbackAllowed {
			if firstFallback == 0 {
				firstFallback = x.at
			}
			if !x.d.Allowed {
				t.Errorf("FallbackAllowed but not allowed: %+v", x.d)
			}
		}
		if x.at < cutAt+failLease {
			continue
		}
		counts[x.d.Reason]++
		switch {
		case x.d.Allowed && x.d.Reason != client.FallbackAllowed:
			t.Errorf("at %v after the cut, past the deadline: admitted with %v, want FallbackAllowed", x.at-cutAt, x.d.Reason)
		case !x.d.Allowed && x.d.Reason != client.Limited:
			t.Errorf("at %v after the cut, past the deadline: refused with %v, want Limited", x.at-cutAt, x.d.Reason)
		}
	}
	if firstFallback == 0 {
		t.Fatal("never admitted from the fallback")
	}
	// The admissions from the first fallback admission on are all the
	// fallback's (the lease is past its deadline by then). The fallback
	// bucket is admitted from right at its mint instants, so this bound
	// has no headroom at all: checked with decision spans.
	from := firstFallback.Nanoseconds() - int64(time.Millisecond)
	fallback = filter(all, func(a quotacheck.Admission) bool { return a.AtNanos >= from })
	var fbSpans []span
	for _, sp := range h.spanSnapshot() {
		if sp.to >= from {
			fbSpans = append(fbSpans, sp)
		}
	}
	fb := quotacheck.Bound{CapacityMilli: 20_000, RateMilliPerSec: 20_000}
	checkBoundSpans(t, "fallback alone", fbSpans, fb)
	reportWindows(t, fallback, fb, 100*time.Millisecond, time.Second)
	span := ds[len(ds)-1].at - firstFallback
	got := float64(admittedIn(fallback, 0, time.Hour)) / 1000
	t.Logf("cut at %v; first fallback admission %v after the cut; after cut+D: %v; fallback admitted %.0f tokens in %v",
		cutAt, firstFallback-cutAt, counts, got, span)
	// It must really admit at about f: the burst and most of f·span.
	if want := 20 + 20*span.Seconds()*0.8; got < want {
		t.Errorf("fallback admitted %.0f tokens over %v, want >= %.0f", got, span, want)
	}
}

// checkShadow: a shadow policy never refuses: every decision is
// Allowed; the ones the policy would have refused carry Shadow and
// Reason ShadowDenied; the ones it would have admitted keep the policy's
// bound. After the cluster is cut and the lease has run out, decisions are
// still Allowed, with Shadow set and Reason Unavailable.
func checkShadow(t *testing.T, r *cutResult) {
	h, ds, cutAt := r.h, r.ds, r.cutAt
	var wouldAdmit []quotacheck.Admission
	counts := map[client.Reason]int{}
	for _, x := range ds {
		if !x.d.Allowed {
			t.Fatalf("a shadow policy refused at %v: %+v", x.at, x.d)
		}
		if x.d.Shadow != (x.d.Reason == client.ShadowDenied || x.d.Reason == client.Unavailable) {
			t.Errorf("Shadow %v with Reason %v at %v", x.d.Shadow, x.d.Reason, x.at)
		}
		if x.d.Reason == client.Allowed {
			wouldAdmit = append(wouldAdmit, quotacheck.Admission{AtNanos: x.at.Nanoseconds(), CostMilli: 1000})
		}
		if x.at >= cutAt+failLease && x.d.Reason != client.Unavailable {
			t.Errorf("at %v after the cut, past the deadline: %v, want Unavailable (with Shadow)", x.at-cutAt, x.d.Reason)
		}
		counts[x.d.Reason]++
	}
	t.Logf("decisions: %v (all admitted: %d)", counts, len(h.snapshot()))
	if counts[client.ShadowDenied] == 0 || counts[client.Allowed] == 0 {
		t.Errorf("want both would-admit and would-deny decisions: %v", counts)
	}
	checkBound(t, "what the shadow policy would have admitted", wouldAdmit, quotacheck.Bound{CapacityMilli: 5_000, RateMilliPerSec: 10_000})
}

package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Window and concurrency policies at the edge (window.go).

// applyPolicies applies a policy file once the cluster has turned its
// feature switches on (window and concurrency policies are refused
// before; the helper's initial policies are token buckets only).
func applyPolicies(t *testing.T, c *testcluster.Cluster, yaml string) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		l := c.Leader()
		if l == nil {
			return errors.New("no leader")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := c.Admin(c.Index(l)).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: yaml})
		return err
	})
}

// waitKnows waits until the edge has read pol from the cluster with the
// given algorithm.
func (h *harness) waitKnows(t *testing.T, pol string, alg policy.Algorithm) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if p, ok := h.e.policyInfo(pol); !ok || p.spec.Algorithm != alg {
			return fmt.Errorf("the edge does not know %s as a %s policy yet (%v)", pol, alg, p.spec.Algorithm)
		}
		return nil
	})
}

// clearOfHourEnd waits, on a timer, for the next hour when this one ends
// within 10 s: the tests with window: 1h assume one window throughout.
func clearOfHourEnd(t *testing.T) {
	now := time.Now()
	if left := now.Truncate(time.Hour).Add(time.Hour).Sub(now); left < 10*time.Second {
		t.Logf("waiting %v for the next hour's window", left)
		<-time.NewTimer(left + 100*time.Millisecond).C
	}
}

const bucketOnly = "policies:\n  - {name: other, algorithm: token-bucket, rate: 1/h, burst: 1}\n"

// TestCheckWindowAcrossBoundary: a window of 2 s and limit 5 through
// Check: every result describes the window (limit, length, reset within
// it); remaining falls by one per admission; the admission that spends
// the window is followed by a refusal whose retry_after is the time to
// the reset; after the reset the window starts again at L−1 (its end
// and its count are only checked when no leader change came in between:
// see below).
func TestCheckWindowAcrossBoundary(t *testing.T) {
	const L, W = 5, 2 * time.Second
	c := startCluster(t, bucketOnly)
	// Leader changes from here on, and re-syncs of window time (which
	// follow one, maybe one before the watch began).
	elections, resyncs := c.Watch("became leader"), c.Watch("window time re-synced")
	applyPolicies(t, c, fmt.Sprintf("policies:\n  - {name: win, algorithm: fixed-window, limit: %d, window: 2s, key: [tenant]}\n", L))
	h := startEdge(t, servers(c), nil, "edge-win")
	h.waitKnows(t, "win", policy.FixedWindow)

	// checkWin returns the result and the times just before and after
	// the call (the decision lies between).
	checkWin := func() (r *api.CheckResult, before, after time.Time) {
		t.Helper()
		before = time.Now()
		r = h.check(t, false, item("win", "acme", 1)).GetResults()[0]
		after = time.Now()
		if r.GetReason() == "allowed" || r.GetReason() == "limited" {
			if r.GetWindowLimit() != L || r.GetWindowLength().AsDuration() != W {
				t.Fatalf("window fields: limit %d length %v, want %d and %v: %v", r.GetWindowLimit(), r.GetWindowLength().AsDuration(), L, W, r)
			}
			if rs := r.GetWindowReset().AsDuration(); rs < 0 || rs > W {
				t.Fatalf("window_reset %v outside [0, %v]", rs, W)
			}
			if r.GetWindowRemaining() < 0 || r.GetWindowRemaining() > L {
				t.Fatalf("window_remaining %d outside [0, %d]", r.GetWindowRemaining(), L)
			}
			if r.GetRate() != 0 || r.GetBurst() != 0 {
				t.Errorf("a window result with bucket figures: rate %v burst %d", r.GetRate(), r.GetBurst())
			}
			if got, want := r.GetRatelimitPolicy(), `"win";q=5;w=2`; got != want {
				t.Errorf("ratelimit_policy %q, want %q", got, want)
			}
			m := oneMember(t, r.GetRatelimit())
			if intParam(t, m, "r") != r.GetWindowRemaining() || intParam(t, m, "t") != r.GetWindowResetSeconds() {
				t.Errorf("ratelimit %q does not match window_remaining %d, window_reset_seconds %d", r.GetRatelimit(), r.GetWindowRemaining(), r.GetWindowResetSeconds())
			}
		}
		return r, before, after
	}

	// Spend a window: remaining falls by one per admission, down to a
	// refusal at the reset. A window that ends midway (the first
	// admission may come late in one) starts the count again.
	var last *api.CheckResult
	var refusal *api.CheckResult
	var refusedAt time.Time
	testcluster.WaitFor(t, 4*W, func() error {
		r, _, at := checkWin()
		switch {
		case r.GetAllowed():
			if last != nil && last.GetAllowed() && r.GetWindowRemaining() >= last.GetWindowRemaining() &&
				r.GetWindowReset().AsDuration() <= last.GetWindowReset().AsDuration() {
				t.Errorf("window_remaining did not fall within a window: %d then %d", last.GetWindowRemaining(), r.GetWindowRemaining())
			}
			last = r
			return errors.New("still admitting")
		case r.GetReason() == "limited" && r.GetWindowRemaining() == 0 && (last == nil || last.GetWindowRemaining() > 0):
			// The window's tail: the chunk's deadline (the window's end,
			// less the drift allowance) has passed with units unspent;
			// refused until the reset. Spend the next window.
			if rs := r.GetWindowReset().AsDuration(); last != nil && rs > 200*time.Millisecond {
				t.Errorf("refused with %d left in the window and %v to its reset: %v", last.GetWindowRemaining(), rs, r)
			}
			last = nil
			return errors.New("at a window's end")
		case r.GetReason() == "limited" && r.GetWindowRemaining() == 0:
			refusal, refusedAt = r, at
			return nil
		}
		return fmt.Errorf("result %v", r)
	})
	if last == nil || last.GetWindowRemaining() != 0 {
		t.Fatalf("the refusal did not follow the admission that spent the window: %v then %v", last, refusal)
	}
	ra, reset := refusal.GetRetryAfter().AsDuration(), refusal.GetWindowReset().AsDuration()
	if refusal.GetRetryNever() || ra < reset || ra > reset+250*time.Millisecond {
		t.Errorf("refusal of a spent window: retry_after %v, want the time to the reset %v (+ one renewal round trip)", ra, reset)
	}
	if want := int64(max((ra+time.Second-1)/time.Second, 1)); refusal.GetRetryAfterSeconds() != want {
		t.Errorf("retry_after_seconds %d for retry_after %v, want %d", refusal.GetRetryAfterSeconds(), ra, want)
	}

	// After the reset: admitted again. (Not within a fixed time: an
	// election freezes cluster time, and with it the window's end, for as
	// long as it takes, seconds on a loaded machine.)
	var next *api.CheckResult
	var nextAt time.Time
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		r, _, at := checkWin()
		if !r.GetAllowed() {
			return fmt.Errorf("refused: %v", r)
		}
		next, nextAt = r, at
		return nil
	})
	if next.GetWindowRemaining() < 0 || next.GetWindowRemaining() > L-1 {
		t.Errorf("first admission of a new window: window_remaining %d, want at most %d", next.GetWindowRemaining(), L-1)
	}
	// The rest compares window time with this machine's wall clock: it
	// is the leader's wall clock (the feature switch set it so) until a
	// leader change. An election freezes cluster time, so window time
	// lags, up to seconds here, until the new leader's re-sync steps it
	// forward, ending the window early; and a chunk still live then
	// counts in the next window (design.md §8.1, §8.2). An election
	// during startCluster shows here as its re-sync.
	changes, steps := 0, 0
	for i := range c.Len() {
		changes += elections.Count(c.ID(i))
		steps += resyncs.Count(c.ID(i))
	}
	if changes > 0 || steps > 0 {
		t.Logf("%d leader changes, %d re-syncs: window time was not the wall clock; the window's end and its count not checked", changes, steps)
		return
	}
	if next.GetWindowRemaining() != L-1 {
		t.Errorf("first admission of a new window: window_remaining %d, want %d", next.GetWindowRemaining(), L-1)
	}
	// The refused window's end: windows are multiples of W from the
	// Unix epoch in window time. The refusal's reset is not that end
	// less the refusal's time: it errs late, never early
	// (client.windowOf), since the edge counts it from when the chunk's
	// answer arrived, not from the commit that stamped the window time.
	// It is late by that answer's latency: 14 and 89 ms, in 2 of 30 runs
	// on a loaded 2-core machine, past the 5 ms this test allowed when it
	// checked admissions against the reset; an admission may come before
	// the stated reset, never before the end. So the end is the last
	// multiple of W at or before the refusal's latest time (refusedAt:
	// just after the call) plus its reset (less than W late).
	end := time.Unix(0, refusedAt.Add(reset).UnixNano()/int64(W)*int64(W))
	t.Logf("the refusal's reset was %v after the window's end", refusedAt.Add(reset).Sub(end))
	// The new window began at the commit of its chunk's grant, when
	// window time had reached end: at or after end on the wall clock
	// (5 ms of skew), before the answer arrived (nextAt: just after it).
	if early := end.Sub(nextAt); early > 5*time.Millisecond {
		t.Errorf("admitted %v before the end %v of the window the refusal named (reset %v)", early, end.Format(time.RFC3339Nano), reset)
	}
	// It began at end: it ends W after it (skew, and the time the calls
	// took; its reset errs late too).
	begun := nextAt.Sub(end)
	if got := next.GetWindowReset().AsDuration(); got < W-begun-250*time.Millisecond || got > W {
		t.Errorf("a window that began %v ago ends in %v; want about %v", begun, got, W-begun)
	}
}

// TestCheckWindowTwoEdges: two edges share a window. The second's
// window_remaining counts what the first holds (its chunk counts as
// spent until it returns), not only its own chunk, and never more than
// the window has left. Negative controls: the same predicates applied to
// the chunk's figure (remaining) and to L minus this edge's own
// admissions both fail.
func TestCheckWindowTwoEdges(t *testing.T) {
	clearOfHourEnd(t)
	const L = 100
	c := startCluster(t, bucketOnly)
	applyPolicies(t, c, fmt.Sprintf("policies:\n  - {name: shared, algorithm: fixed-window, limit: %d, window: 1h}\n", L))
	a := startEdge(t, servers(c), nil, "edge-win-a")
	b := startEdge(t, servers(c), nil, "edge-win-b")
	a.waitKnows(t, "shared", policy.FixedWindow)
	b.waitKnows(t, "shared", policy.FixedWindow)

	const byB, byA = 5, 3
	for range byB {
		if r := b.check(t, false, item("shared", "", 1)); !r.GetAllowed() {
			t.Fatalf("edge b: %v", r)
		}
	}
	var ra *api.CheckResult
	for range byA {
		r := a.check(t, false, item("shared", "", 1))
		if !r.GetAllowed() {
			t.Fatalf("edge a: %v", r)
		}
		ra = r.GetResults()[0]
	}
	// b's chunk, granted before a asked, is counted in what a heard.
	bws, ok := b.e.limiter("shared", nil).Window()
	if !ok {
		t.Fatal("edge b holds no window chunk")
	}
	bHeld := bws.LocalMilli / 1000 // b's unspent units: spent, as far as a knows
	admitted := int64(byA + byB)
	valid := func(rem int64) error {
		switch {
		case rem > L-admitted:
			return fmt.Errorf("%d is more than the window has left (%d admitted of %d)", rem, admitted, L)
		case rem < L-admitted-bHeld-L/10:
			return fmt.Errorf("%d is far below what the window has left (%d admitted, %d held by the other edge)", rem, admitted, bHeld)
		}
		return nil
	}
	t.Logf("edge a: window_remaining %d, remaining (its chunk) %d; edge b holds %d", ra.GetWindowRemaining(), ra.GetRemaining(), bHeld)
	if err := valid(ra.GetWindowRemaining()); err != nil {
		t.Errorf("window_remaining: %v", err)
	}
	if ra.GetWindowLimit() != L || ra.GetWindowLength().AsDuration() != time.Hour {
		t.Errorf("window fields: %v", ra)
	}
	// The negative controls: what a broken edge would report.
	for what, rem := range map[string]int64{"the chunk's units": ra.GetRemaining(), "L minus this edge's admissions": L - byA} {
		if valid(rem) == nil {
			t.Errorf("negative control not caught: %s (%d) passes the window_remaining check", what, rem)
		}
	}
}

// TestCheckWindowCarelessCallers: a cost above the limit is
// exceeds-capacity with retry_never (and no t); a zero cost costs one; an
// unknown policy is no-lease without window fields.
func TestCheckWindowCarelessCallers(t *testing.T) {
	clearOfHourEnd(t)
	c := startCluster(t, bucketOnly)
	applyPolicies(t, c, "policies:\n  - {name: win, algorithm: fixed-window, limit: 4, window: 1h}\n")
	h := startEdge(t, servers(c), nil, "edge-win-careless")
	h.waitKnows(t, "win", policy.FixedWindow)

	r := h.check(t, false, item("win", "", 0)).GetResults()[0]
	if !r.GetAllowed() || r.GetWindowRemaining() != 3 || r.GetWindowLimit() != 4 {
		t.Errorf("cost 0 (one unit): %v", r)
	}
	r = h.check(t, false, item("win", "", 5)).GetResults()[0]
	if r.GetAllowed() || r.GetReason() != "exceeds-capacity" || !r.GetRetryNever() || r.GetRetryAfter() != nil || r.GetWindowLimit() != 4 {
		t.Errorf("cost above the limit: %v", r)
	}
	if _, has := oneMember(t, r.GetRatelimit()).Param("t"); has {
		t.Errorf("cost above the limit: ratelimit %q names a reset that would not admit it", r.GetRatelimit())
	}
	r = h.check(t, false, item("win", "", 1<<62)).GetResults()[0]
	if r.GetAllowed() || r.GetReason() != "exceeds-capacity" || !r.GetRetryNever() {
		t.Errorf("cost 2^62: %v", r)
	}
	r = h.check(t, false, item("no-such-window", "", 1)).GetResults()[0]
	if r.GetAllowed() || r.GetWindowLimit() != 0 || r.GetWindowLength() != nil || r.GetRatelimit() != "" {
		t.Errorf("unknown policy: %v", r)
	}
	// Nothing was charged by the refusals: 3 left, as after the first.
	r = h.check(t, false, item("win", "", 3)).GetResults()[0]
	if !r.GetAllowed() || r.GetWindowRemaining() != 0 {
		t.Errorf("the window's last 3: %v", r)
	}
	r = h.check(t, false, item("win", "", 1)).GetResults()[0]
	if r.GetAllowed() || r.GetReason() != "limited" || r.GetRetryAfter().AsDuration() < r.GetWindowReset().AsDuration() {
		t.Errorf("spent window: %v", r)
	}
	// all_or_none: the spent window refuses the batch, and the bucket
	// layer charged before it is refunded.
	resp := h.check(t, true, item("other", "", 1), item("win", "", 1))
	if resp.GetAllowed() || !resp.GetResults()[0].GetAllowed() || resp.GetResults()[1].GetReason() != "limited" {
		t.Errorf("all_or_none over a spent window: %v", resp)
	}
	if r := h.check(t, false, item("other", "", 1)); !r.GetAllowed() {
		t.Errorf("the bucket layer was not refunded: %v", r)
	}
}

func TestWindowUnitTable(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		period string
		window time.Duration
		unit   rlspb.RateLimitResponse_RateLimit_Unit
		mult   uint32
	}{
		{"", time.Second, rlspb.RateLimitResponse_RateLimit_SECOND, 1},
		{"", 2 * time.Second, rlspb.RateLimitResponse_RateLimit_SECOND, 2},
		{"", 90 * time.Second, rlspb.RateLimitResponse_RateLimit_SECOND, 90},
		{"", time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE, 1},
		{"", 10 * time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE, 10},
		{"", time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR, 1},
		{"", 90 * time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE, 90},
		{"", day, rlspb.RateLimitResponse_RateLimit_DAY, 1},
		{"", 7 * day, rlspb.RateLimitResponse_RateLimit_WEEK, 1},
		{"", 14 * day, rlspb.RateLimitResponse_RateLimit_WEEK, 2},
		{"", 30 * day, rlspb.RateLimitResponse_RateLimit_MONTH, 1},
		{"", 365 * day, rlspb.RateLimitResponse_RateLimit_YEAR, 1},
		{"", 366 * day, rlspb.RateLimitResponse_RateLimit_DAY, 366},
		{"", 1500 * time.Millisecond, rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1},
		{"", time.Millisecond, rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1},
		{"", 0, rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1},
		{"day", 0, rlspb.RateLimitResponse_RateLimit_DAY, 1},
		{"day", 23 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY, 1}, // a DST day is still a day
		{"week", 0, rlspb.RateLimitResponse_RateLimit_WEEK, 1},
		{"month", 0, rlspb.RateLimitResponse_RateLimit_MONTH, 1},
		{"month", 28 * day, rlspb.RateLimitResponse_RateLimit_MONTH, 1},
	} {
		u, m := windowUnit(c.period, c.window)
		if u != c.unit || m != c.mult {
			t.Errorf("period %q window %v: %v x%d, want %v x%d", c.period, c.window, u, m, c.unit, c.mult)
		}
	}
	// go-control-plane v1.40.0's numbering, which envoyconf.Unit copies.
	for u, want := range map[rlspb.RateLimitResponse_RateLimit_Unit]int32{
		rlspb.RateLimitResponse_RateLimit_UNKNOWN: 0, rlspb.RateLimitResponse_RateLimit_SECOND: 1, rlspb.RateLimitResponse_RateLimit_MINUTE: 2,
		rlspb.RateLimitResponse_RateLimit_HOUR: 3, rlspb.RateLimitResponse_RateLimit_DAY: 4, rlspb.RateLimitResponse_RateLimit_MONTH: 5,
		rlspb.RateLimitResponse_RateLimit_YEAR: 6, rlspb.RateLimitResponse_RateLimit_WEEK: 7,
	} {
		if int32(u) != want {
			t.Errorf("%v = %d, want %d", u, int32(u), want)
		}
	}
}

const winEnvoy = `
domain: w
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: org
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: odd
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: slow
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// The cluster's policies for winEnvoy's rules (the edge serves the
// cluster's policy under a rule's name, whatever the rule says).
const winEnvoyPolicies = `policies:
  - {name: w.user, algorithm: fixed-window, limit: 3, window: 1h, key: [user]}
  - {name: w.org, algorithm: fixed-window, limit: 50, period: week, key: [org]}
  - {name: w.team, algorithm: sliding-window-approx, limit: 7, window: 10m, key: [team]}
  - {name: w.odd, algorithm: fixed-window, limit: 9, window: 1500ms, key: [odd]}
  - {name: w.slow, algorithm: concurrency, limit: 2, key: [slow]}
`

// TestRLSWindow: a descriptor whose rule maps to a window policy is
// described as the window: current_limit with the limit per the window's
// unit (and multiplier), limit_remaining the window's, duration_until_reset
// the time to its end, the window's RateLimit fields, and Retry-After at
// the reset once spent. A concurrency policy's descriptor is refused
// with FAILED_PRECONDITION naming the rule and the policy.
func TestRLSWindow(t *testing.T) {
	clearOfHourEnd(t)
	c := startCluster(t, bucketOnly)
	applyPolicies(t, c, winEnvoyPolicies)
	h := startEdge(t, servers(c), loadEnvoy(t, winEnvoy), "edge-rls-win")
	h.waitKnows(t, "w.user", policy.FixedWindow)
	h.waitKnows(t, "w.slow", policy.Concurrency)

	untilHour := func() time.Duration {
		now := time.Now()
		return now.Truncate(time.Hour).Add(time.Hour).Sub(now)
	}
	var resp *rlspb.RateLimitResponse
	for i := range 3 {
		resp = h.should(t, "w", 0, desc("user=ann"))
		st := resp.GetStatuses()[0]
		if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || st.GetLimitRemaining() != uint32(2-i) {
			t.Fatalf("hit %d: %v", i, resp)
		}
		cl := st.GetCurrentLimit()
		if cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlspb.RateLimitResponse_RateLimit_HOUR || cl.GetUnitMultiplier() != nil {
			t.Errorf("current_limit %v, want 3 per HOUR", cl)
		}
		if d, want := st.GetDurationUntilReset().AsDuration(), untilHour(); d > want+time.Second || d < want-2*time.Second {
			t.Errorf("duration_until_reset %v, want the time to the hour's end %v", d, want)
		}
	}
	if got, want := header(resp, "RateLimit-Policy"), `"w.user";q=3;w=3600`; got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
	if m := oneMember(t, header(resp, "RateLimit")); intParam(t, m, "r") != 0 || intParam(t, m, "t") < 1 {
		t.Errorf("RateLimit %q", header(resp, "RateLimit"))
	}
	resp = h.should(t, "w", 0, desc("user=ann"))
	st := resp.GetStatuses()[0]
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 {
		t.Fatalf("the fourth hit of 3 per hour: %v", resp)
	}
	ra := header(resp, "Retry-After")
	var secs int64
	if _, err := fmt.Sscan(ra, &secs); err != nil || time.Duration(secs)*time.Second < untilHour()-time.Second || time.Duration(secs)*time.Second > untilHour()+2*time.Second {
		t.Errorf("Retry-After %q, want the seconds to the hour's end (%v)", ra, untilHour())
	}

	// Careless costs: a probe (hits 0) spends nothing; a cost above L is
	// OVER_LIMIT with no Retry-After (no wait admits it) and no t.
	for range 2 {
		if r := h.should(t, "w", 0, withHits(desc("user=bob"), 0)); r.GetOverallCode() != rlspb.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 3 {
			t.Errorf("probe: %v", r)
		}
	}
	resp = h.should(t, "w", 0, withHits(desc("user=bob"), 4))
	if resp.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT || header(resp, "Retry-After") != "" {
		t.Errorf("cost 4 of a window of 3: %v", resp)
	}
	if _, has := oneMember(t, header(resp, "RateLimit")).Param("t"); has {
		t.Errorf("cost above the limit: RateLimit %q names a reset", header(resp, "RateLimit"))
	}
	if r := h.should(t, "w", 0, withHits(desc("user=bob"), 1<<63)); r.GetOverallCode() != rlspb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("cost 2^63: %v", r)
	}

	// The unit mapping on the wire: a calendar week, a 10-minute window
	// (MINUTE x10), one of 1.5 s (no whole unit: UNKNOWN, the limit as is).
	for _, c := range []struct {
		d    string
		rpu  uint32
		unit rlspb.RateLimitResponse_RateLimit_Unit
		mult uint32
		w    string
	}{
		{"org=acme", 50, rlspb.RateLimitResponse_RateLimit_WEEK, 1, ""},
		{"team=red", 7, rlspb.RateLimitResponse_RateLimit_MINUTE, 10, `"w.team";q=7;w=600`},
		{"odd=x", 9, rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1, `"w.odd";q=9;w=2`},
	} {
		resp := h.should(t, "w", 0, desc(c.d))
		cl := resp.GetStatuses()[0].GetCurrentLimit()
		mult := uint32(1)
		if cl.GetUnitMultiplier() != nil {
			mult = cl.GetUnitMultiplier().GetValue()
		}
		if resp.GetOverallCode() != rlspb.RateLimitResponse_OK || cl.GetRequestsPerUnit() != c.rpu || cl.GetUnit() != c.unit || mult != c.mult {
			t.Errorf("%s: %v, want %d per %v x%d", c.d, resp, c.rpu, c.unit, c.mult)
		}
		if c.w != "" && header(resp, "RateLimit-Policy") != c.w {
			t.Errorf("%s: RateLimit-Policy %q, want %q", c.d, header(resp, "RateLimit-Policy"), c.w)
		}
	}

	// A concurrency policy: refused, never decided as a rate; the other
	// descriptors of the call are not charged.
	before := h.should(t, "w", 0, desc("org=acme")).GetStatuses()[0].GetLimitRemaining()
	ctx, cancel := context.WithTimeout(context.Background(), testcluster.DefaultWait)
	defer cancel()
	_, err := h.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "w", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("org=acme"), desc("slow=job")}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"w.slow" is a concurrency policy`) || !strings.Contains(err.Error(), "descriptor 1") {
		t.Errorf("a descriptor of a concurrency policy: %v, want FAILED_PRECONDITION naming it", err)
	}
	if after := h.should(t, "w", 0, desc("org=acme")).GetStatuses()[0].GetLimitRemaining(); after != before-1 {
		t.Errorf("org=acme: %d left, then %d after one more hit; the refused call charged it", before, after)
	}

	// An edge that does not know the policy yet: the client refuses the
	// cluster's slot lease, the edge says why.
	fresh := startEdge(t, servers(c), loadEnvoy(t, winEnvoy), "edge-rls-win-fresh", func(cfg *Config) { cfg.PolicyRefresh = time.Hour })
	testcluster.WaitFor(t, testcluster.DefaultWait, fresh.e.Ready)
	fresh.e.policies.Store(&map[string]policyInfo{})
	_, err = fresh.rls.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "w", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("slow=job")}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"w.slow" is a concurrency policy`) {
		t.Errorf("a descriptor of a concurrency policy the edge did not know: %v", err)
	}
}

// TestCheckConcurrencyRefused: a Check item naming a concurrency policy
// is FAILED_PRECONDITION (gRPC) and 400 (HTTP), naming the item and the
// policy, and nothing in the batch is charged; so before the edge knows
// the policy (the cluster's slot lease is refused by the client); and an
// edge whose --config maps an Envoy rule to one does not start.
func TestCheckConcurrencyRefused(t *testing.T) {
	c := startCluster(t, checkPolicies)
	applyPolicies(t, c, "policies:\n  - {name: slots, algorithm: concurrency, limit: 3, key: [tenant]}\n")
	h := startEdge(t, servers(c), nil, "edge-conc")
	h.waitKnows(t, "slots", policy.Concurrency)

	_, err := h.adm.Check(context.Background(), &api.CheckRequest{Items: []*api.CheckItem{item("per-tenant", "a", 1), item("slots", "a", 1)}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `item 1: policy "slots" is a concurrency policy (at most 3 requests in flight)`) {
		t.Errorf("Check of a concurrency policy: %v", err)
	}
	if r := h.check(t, false, item("per-tenant", "a", 4)); !r.GetAllowed() {
		t.Errorf("the refused Check charged its other item: %v", r)
	}
	resp, err := http.Post(h.url+"/v1/check", "application/json", strings.NewReader(`{"items":[{"policy":"slots","key":{"tenant":"b"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":"FailedPrecondition"`) || !strings.Contains(string(b), "concurrency policy") {
		t.Errorf("POST /v1/check of a concurrency policy: %d %s", resp.StatusCode, b)
	}

	// An edge that has not read the policy list yet (a long refresh, and
	// it is asked at once): the cluster answers with a slot lease, the
	// client refuses it, the edge says why.
	fresh := startEdge(t, servers(c), nil, "edge-conc-fresh", func(cfg *Config) { cfg.PolicyRefresh = time.Hour })
	testcluster.WaitFor(t, testcluster.DefaultWait, fresh.e.Ready) // its one read in the hour is done
	fresh.e.policies.Store(&map[string]policyInfo{})               // as if the first read had not happened
	_, err = fresh.adm.Check(context.Background(), &api.CheckRequest{Items: []*api.CheckItem{item("slots", "c", 1)}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `item 0: policy "slots" is a concurrency policy`) {
		t.Errorf("Check of a concurrency policy the edge did not know: %v", err)
	}

	// --config: an Envoy rule mapped to a concurrency policy.
	conf := loadEnvoy(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n")
	pols, err := policy.Parse(strings.NewReader("policies:\n  - {name: d.k, algorithm: concurrency, limit: 2, key: [k]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Config{Servers: servers(c), ClientID: "edge-conc-config", Envoy: conf, Policies: pols})
	if err == nil || !strings.Contains(err.Error(), `maps to policy "d.k", which --config defines as a concurrency policy`) {
		t.Errorf("New with an Envoy rule on a concurrency policy: %v", err)
	}
}

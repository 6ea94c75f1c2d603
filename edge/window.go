package edge

import (
	"errors"
	"fmt"
	"math"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/envoyconf"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// Window and concurrency policies at the edge (docs/envoy.md, "Window
// policies" and "Concurrency policies").
//
// A window policy's key is a chunk lease like any other (the client's
// hot path decides), and the client reports the window it belongs to
// (client.Limiter.Window): the edge describes that window in a Check
// result's window_* fields and an Envoy descriptor status, in place of the
// token-bucket figures.
//
// A concurrency policy bounds requests in flight: a slot must be given
// back when the request ends, and neither a Check nor Envoy's rate limit
// call has an end. The edge refuses such a policy with
// FAILED_PRECONDITION, never deciding it as a rate.

// windowResult fills a Check result's window fields (and its RateLimit
// fields in the window syntax) from the limiter's window.
func windowResult(r *api.CheckResult, pol string, ws client.WindowState) {
	rem := httplimit.WindowRemainingMilli(ws)
	r.WindowLimit = ws.LimitMilli / lease.MilliPerToken
	r.WindowLength = durationpb.New(ws.Window)
	r.WindowRemaining = max(rem/lease.MilliPerToken, 0)
	r.WindowReset = durationpb.New(ws.ResetIn)
	r.WindowResetSeconds = httplimit.WindowResetSeconds(ws)
	r.RatelimitPolicy = httplimit.WindowPolicyField(pol, ws)
	t := r.WindowResetSeconds
	if r.RetryNever {
		t = -1 // a cost above the limit: no wait admits it
	}
	r.Ratelimit = httplimit.RateLimitField(pol, rem, t)
}

// windowSpecResult fills what a window policy's definition says (the
// limit, and a fixed window's length) when the edge holds no chunk of the
// key to report the current window from.
func windowSpecResult(r *api.CheckResult, p policy.Policy) {
	r.WindowLimit = p.LimitMilli / lease.MilliPerToken
	if p.WindowNanos > 0 {
		r.WindowLength = durationpb.New(time.Duration(p.WindowNanos))
	}
}

// Envoy's units (go-control-plane v1.40.0, RateLimitResponse.RateLimit.Unit),
// longest first, with their lengths as envoyproxy/ratelimit counts them (a
// month is 30 days, a year 365; envoyconf.Unit.Seconds).
var envoyUnits = []struct {
	unit rlspb.RateLimitResponse_RateLimit_Unit
	len  time.Duration
}{
	{rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
	{rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlspb.RateLimitResponse_RateLimit_SECOND, time.Second},
}

// windowUnit is the Envoy unit and multiplier of a window: a calendar
// period is its unit (day, week, month: DAY, WEEK, MONTH, whatever the
// day's or month's length); a fixed window of a whole number of seconds
// is the longest unit that divides it, times the quotient (1m: MINUTE;
// 10m: MINUTE x10; 90s: SECOND x90; 30d: MONTH; 14d: WEEK x2). A window
// that is not a whole number of seconds (1500ms) is UNKNOWN (multiplier
// 1): Envoy then names no window in its x-ratelimit headers, and the
// RateLimit-Policy field the edge adds carries the true length.
func windowUnit(period string, window time.Duration) (rlspb.RateLimitResponse_RateLimit_Unit, uint32) {
	switch period {
	case lease.PeriodDay:
		return rlspb.RateLimitResponse_RateLimit_DAY, 1
	case lease.PeriodWeek:
		return rlspb.RateLimitResponse_RateLimit_WEEK, 1
	case lease.PeriodMonth:
		return rlspb.RateLimitResponse_RateLimit_MONTH, 1
	}
	if window <= 0 || window%time.Second != 0 {
		return rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1
	}
	for _, u := range envoyUnits {
		if window%u.len == 0 {
			return u.unit, uint32(min(window/u.len, math.MaxUint32))
		}
	}
	return rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1 // unreachable: SECOND divides it
}

// windowLimit is a window policy's current_limit: requests_per_unit the
// limit L (at most 2^32-1), the window's unit and multiplier. The window
// comes from the policy's definition (a calendar period is only known
// there), else from the current window's length.
func (e *Edge) windowLimit(r *envoyconf.Rule, ws client.WindowState, haveWS bool) *rlspb.RateLimitResponse_RateLimit {
	limit, period, length := int64(0), "", time.Duration(0)
	if p, ok := e.policyInfo(r.Policy); ok && p.spec.Algorithm.IsWindow() {
		limit, period, length = p.spec.LimitMilli/lease.MilliPerToken, p.spec.Period, time.Duration(p.spec.WindowNanos)
	}
	if haveWS {
		limit = ws.LimitMilli / lease.MilliPerToken
		if period == "" && length == 0 {
			length = ws.Window
		}
	}
	unit, mult := windowUnit(period, length)
	rl := &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: uint32(min(max(limit, 0), math.MaxUint32)), Unit: unit}
	if mult > 1 {
		rl.UnitMultiplier = wrapperspb.UInt32(mult)
	}
	return rl
}

// isWindowPolicy reports whether the edge knows pol as a window policy.
func (e *Edge) isWindowPolicy(pol string) (policy.Policy, bool) {
	p, ok := e.policyInfo(pol)
	return p.spec, ok && p.spec.Algorithm.IsWindow()
}

// concurrencyPolicy reports whether the edge knows pol as a concurrency
// policy (from the cluster's list, or --config before it arrives).
func (e *Edge) concurrencyPolicy(pol string) (policy.Policy, bool) {
	p, ok := e.policyInfo(pol)
	return p.spec, ok && p.spec.Algorithm == policy.Concurrency
}

// refusedAsConcurrency reports whether a decision was made without a
// lease because the cluster answered the key with a slot lease: a
// concurrency policy the edge did not know of yet (client.ErrConcurrencyPolicy).
func refusedAsConcurrency(l *client.Limiter, d client.Decision) bool {
	return d.Reason == client.NoLease && errors.Is(l.Err(), client.ErrConcurrencyPolicy)
}

// concurrencyError is the FAILED_PRECONDITION answer for what (a Check
// item, an Envoy descriptor) naming pol, a concurrency policy (limit 0:
// not known, the cluster answered with a slot lease).
func concurrencyError(what, pol string, limit int64, call string) error {
	n := "its limit"
	if limit > 0 {
		n = fmt.Sprintf("at most %d", limit)
	}
	return rpcerr.Errorf(codes.FailedPrecondition,
		"%s: policy %q is a concurrency policy (%s requests in flight), not a rate: %s has no release, so the edge cannot hold a slot for the request; use the Go client's Slots (client/inflight, docs/concurrency.md), or name a rate or window policy",
		what, pol, n, call)
}

// checkConcurrency refuses a Check whose items name a concurrency policy.
func (e *Edge) checkConcurrency(items []*api.CheckItem) error {
	for i, it := range items {
		if p, ok := e.concurrencyPolicy(it.GetPolicy()); ok {
			return concurrencyError(fmt.Sprintf("item %d", i), it.GetPolicy(), p.LimitMilli/lease.MilliPerToken, "a Check")
		}
	}
	return nil
}

// envoyConcurrency is an error naming every Envoy rule that maps to a
// concurrency policy of pols (rationd edge refuses to start with one).
func envoyConcurrency(conf *envoyconf.Config, pols *policy.File) error {
	if conf == nil || pols == nil {
		return nil
	}
	byName := map[string]policy.Policy{}
	for _, p := range pols.Policies {
		byName[p.Name] = p
	}
	var errs []error
	for _, r := range conf.Rules {
		if p, ok := byName[r.Policy]; ok && r.Policy != "" && p.Algorithm == policy.Concurrency {
			errs = append(errs, fmt.Errorf("envoy rule %s maps to policy %q, which --config defines as a concurrency policy (limit %d in flight): Envoy's rate limit call has no release, so the edge cannot hold its slots; give the rule a rate or window policy",
				r.Label(), r.Policy, p.LimitMilli/lease.MilliPerToken))
		}
	}
	return errors.Join(errs...)
}

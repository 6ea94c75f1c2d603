package edge

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/envoyconf"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// Descriptor outcomes, the result label of ration_edge_descriptors_total.
const (
	resOK          = "ok"
	resOverLimit   = "over_limit"
	resShadow      = "shadow_over_limit" // a shadow rule would have refused; answered OK
	resUnmatched   = "unmatched"         // no rule (or an unknown domain): OK
	resUnlimited   = "unlimited"
	resReplaced    = "replaced"      // another matched rule replaces it: OK
	resDenyAll     = "deny_all"      // requests_per_unit 0: OVER_LIMIT
	resNotCharged  = "not_evaluated" // another descriptor refused first: OK, not charged
	resNegative    = "negative_hits" // is_negative_hits: not supported, nothing charged
	resOverrideIgn = "limit_override_ignored"
	// resChargedAfter: a charge after the work (ChargeAfterKey): charged,
	// never refused, OK.
	resChargedAfter = "charged_after"
)

// ChargeAfterKey marks a descriptor as a charge after the work (Envoy's
// apply_on_stream_done, its hits_addend the measured cost; docs/envoy.md,
// "Charges after the work"): an entry with this key and the value
// ChargeAfterValue is left out of the matching, and the matched rule's
// budget is charged the hits with client.Limiter.Charge, never refused
// (what the edge's share lacks becomes debt, docs/design.md §4.1). The
// descriptor's status is OK.
const (
	ChargeAfterKey   = "ration_charge"
	ChargeAfterValue = "after"
)

type rlsSlot struct {
	rule   *envoyconf.Rule
	lim    *client.Limiter
	cost   int64
	result string
	d      client.Decision
	done   bool // decided (d is set)
	// win: a window policy's key, ws its window (read after the
	// decision).
	win bool
	ws  client.WindowState
}

// rlsServer adapts the Edge to the generated service interface.
type rlsServer struct {
	rlspb.UnimplementedRateLimitServiceServer
	e *Edge
}

func (s rlsServer) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	return s.e.ShouldRateLimit(ctx, req)
}

// ShouldRateLimit answers Envoy's rate limit service call: every
// descriptor is checked, the overall code is OVER_LIMIT if any descriptor
// is. See docs/envoy.md for the semantics.
func (e *Edge) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	e.m.rlsCalls.Add(1)
	if err := validateRLS(req); err != nil {
		e.m.rlsInvalid.Add(1)
		return nil, err
	}
	slots, err := e.classify(req)
	if err != nil {
		return nil, err
	}
	e.decide(slots)
	if err := e.checkDecided(slots); err != nil {
		return nil, err
	}
	return e.answer(req.GetDomain(), slots), nil
}

// rlsClassifier matches one call's descriptors to rules, under one
// configuration for the whole call.
type rlsClassifier struct {
	e      *Edge
	conf   *envoyconf.Config // nil: no rules, every descriptor unmatched
	domain string
	// Scratch for one descriptor's entries.
	keys, values [MaxEntries]string
}

// classify gives each descriptor of req a slot: its cost, and its rule and
// limiter, or the result that needs no limiter (unmatched, unlimited,
// deny-all, replaced, negative hits). A descriptor whose rule maps to a
// concurrency policy is a FAILED_PRECONDITION error.
func (e *Edge) classify(req *rlspb.RateLimitRequest) ([]rlsSlot, error) {
	c := &rlsClassifier{e: e, conf: e.envoy.Load(), domain: req.GetDomain()}
	replaced := map[string]bool{} // rule names a matched rule replaces
	slots := make([]rlsSlot, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		s := &slots[i]
		s.cost = clampCost(descriptorCost(req, d))
		if c.conf == nil {
			s.result = resUnmatched
			continue
		}
		if err := c.match(i, d, s); err != nil {
			return nil, err
		}
		if s.rule != nil {
			for _, r := range s.rule.Replaces {
				replaced[r] = true
			}
		}
	}
	// Replaced rules drop out (envoyproxy/ratelimit: a limit whose name a
	// matched rule replaces is not applied).
	for i := range slots {
		s := &slots[i]
		if s.rule != nil && s.rule.Name != "" && replaced[s.rule.Name] {
			s.result, s.lim = resReplaced, nil
		}
	}
	return slots, nil
}

// descriptorCost is a descriptor's hits: its own hits_addend, else the
// request's, else 1.
func descriptorCost(req *rlspb.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) uint64 {
	switch {
	case d.GetHitsAddend() != nil:
		return d.GetHitsAddend().GetValue()
	case req.GetHitsAddend() != 0:
		return uint64(req.GetHitsAddend())
	}
	return 1
}

// match finds descriptor i's rule and fills in its slot s. s.rule stays
// set only for a rule that applies: its Replaces then take effect.
func (c *rlsClassifier) match(i int, d *ratelimitv3.RateLimitDescriptor, s *rlsSlot) error {
	e := c.e
	n := 0
	after := false
	for _, en := range d.GetEntries() {
		if en.GetKey() == ChargeAfterKey && en.GetValue() == ChargeAfterValue {
			after = true
			continue
		}
		c.keys[n], c.values[n] = en.GetKey(), en.GetValue()
		n++
	}
	s.rule = c.conf.Match(c.domain, c.keys[:n], c.values[:n])
	switch {
	case s.rule == nil:
		s.result = resUnmatched
		return nil
	case d.GetIsNegativeHits():
		s.result, s.rule = resNegative, nil
		return nil
	}
	if d.GetLimit() != nil {
		e.m.descriptor(c.domain, resOverrideIgn)
	}
	switch {
	case s.rule.Unlimited:
		s.result = resUnlimited
	case s.rule.DenyAll():
		s.result = resDenyAll
	default:
		if p, ok := e.concurrencyPolicy(s.rule.Policy); ok {
			e.m.rlsInvalid.Add(1)
			return concurrencyError(fmt.Sprintf("descriptor %d (envoy rule %s)", i, s.rule.Label()), s.rule.Policy, p.LimitMilli/lease.MilliPerToken, "Envoy's rate limit call")
		}
		// Values are bytes (rlsdecode.go): each known by its wire name.
		key := s.rule.Key(c.values[:n])
		for a, v := range key {
			key[a] = client.WireKeyValue(v)
		}
		s.lim = e.limiter(s.rule.Policy, key)
		if after {
			// Never refused, never part of the request's all-or-none
			// charge: the work is done already.
			if s.cost > 0 {
				_, _ = s.lim.Charge(min(s.cost, client.MaxCost))
			}
			s.lim, s.result = nil, resChargedAfter
		}
	}
	return nil
}

// decide charges the slots' limiters: enforced rules first, unless a
// deny-all rule refuses the request already; then, if the request is
// admitted, shadow rules. It then reads each window policy's window.
func (e *Edge) decide(slots []rlsSlot) {
	over := false
	for i := range slots {
		if slots[i].result == resDenyAll {
			over = true
		}
	}
	// Enforced rules first, all or none when they cost the same.
	enforced, sameCost := enforcedSlots(slots)
	if !over && len(enforced) > 0 {
		if sameCost {
			over = e.decideTogether(slots, enforced)
		} else {
			over = decideInOrder(slots, enforced)
		}
	}
	// Shadow rules: charged only when the request is admitted, always OK.
	if !over {
		for i := range slots {
			if s := &slots[i]; s.lim != nil && s.rule.ShadowMode {
				s.d, s.done = s.lim.AllowN(s.cost), true
			}
		}
	}
	for i := range slots {
		if s := &slots[i]; s.lim != nil {
			s.ws, s.win = s.lim.Window()
		}
	}
}

// enforcedSlots lists the slots with a limiter of an enforced (not shadow)
// rule, and reports whether they all cost the same.
func enforcedSlots(slots []rlsSlot) (enforced []int, sameCost bool) {
	sameCost = true
	for i := range slots {
		if s := &slots[i]; s.lim != nil && !s.rule.ShadowMode {
			if len(enforced) > 0 && s.cost != slots[enforced[0]].cost {
				sameCost = false
			}
			enforced = append(enforced, i)
		}
	}
	return enforced, sameCost
}

// decideTogether charges the enforced slots, which cost the same, all or
// none; the slots after the refusing one stay undecided. It reports
// whether one refused.
func (e *Edge) decideTogether(slots []rlsSlot, enforced []int) (over bool) {
	var lbuf [MaxDescriptors]*client.Limiter
	var dbuf [MaxDescriptors]client.Decision
	lims, ds := lbuf[:len(enforced)], dbuf[:len(enforced)]
	for k, i := range enforced {
		lims[k] = slots[i].lim
	}
	refused := e.client.AllowAllDetail(slots[enforced[0]].cost, lims, ds)
	for k, i := range enforced {
		if refused >= 0 && k > refused {
			break
		}
		slots[i].d, slots[i].done = ds[k], true
	}
	return refused >= 0
}

// decideInOrder charges enforced slots of different costs in order; a
// refusal does not refund the earlier ones (as envoyproxy/ratelimit, which
// charges every descriptor), and stops the later ones. It reports whether
// one refused.
func decideInOrder(slots []rlsSlot, enforced []int) (over bool) {
	for _, i := range enforced {
		s := &slots[i]
		s.d, s.done = s.lim.AllowN(s.cost), true
		if !s.d.Allowed {
			return true
		}
	}
	return false
}

// checkDecided refuses the call for a concurrency policy the edge did not
// know of yet (the cluster answered with a slot lease, which the client
// refused).
func (e *Edge) checkDecided(slots []rlsSlot) error {
	for i := range slots {
		if s := &slots[i]; s.done && refusedAsConcurrency(s.lim, s.d) {
			e.m.rlsInvalid.Add(1)
			return concurrencyError(fmt.Sprintf("descriptor %d (envoy rule %s)", i, s.rule.Label()), s.rule.Policy, 0, "Envoy's rate limit call")
		}
	}
	return nil
}

// answer builds the response from the decided slots, counting each
// descriptor's result: a status per descriptor, the overall code, and the
// headers of the refusing descriptor or the one with the least remaining.
func (e *Edge) answer(domain string, slots []rlsSlot) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{Statuses: make([]*rlspb.RateLimitResponse_DescriptorStatus, len(slots))}
	headerSlot, headerRem := -1, int64(math.MaxInt64)
	for i := range slots {
		s := &slots[i]
		st := &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case s.result == resUnlimited:
			st.LimitRemaining = math.MaxUint32
		case s.result == resDenyAll:
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
			st.CurrentLimit = currentLimit(s.rule)
		case s.lim != nil && !s.done:
			s.result = resNotCharged
			st.CurrentLimit = e.limitOf(s)
		case s.lim != nil:
			if rem := e.decidedStatus(s, st); headerSlot < 0 || rem < headerRem {
				headerSlot, headerRem = i, rem
			}
		}
		e.m.descriptor(domain, s.result)
		if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
			resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if resp.OverallCode != rlspb.RateLimitResponse_OVER_LIMIT {
		resp.OverallCode = rlspb.RateLimitResponse_OK
	}
	if headerSlot >= 0 {
		resp.ResponseHeadersToAdd = e.headers(&slots[headerSlot], resp.Statuses[headerSlot].Code == rlspb.RateLimitResponse_OVER_LIMIT)
	}
	return resp
}

// decidedStatus fills in the status st of a charged slot s and sets its
// result. It returns the slot's rank for the response headers: its
// remaining budget in milli-units, or -1 for a refusal, which names the
// headers.
func (e *Edge) decidedStatus(s *rlsSlot, st *rlspb.RateLimitResponse_DescriptorStatus) int64 {
	e.noteRefusal(s.lim, s.d)
	st.CurrentLimit = e.limitOf(s)
	rem := s.d.RemainingMilli
	if s.win {
		// The window's figures: what it has left through this
		// edge, and the time to its end.
		rem = httplimit.WindowRemainingMilli(s.ws)
		st.DurationUntilReset = durationpb.New(s.ws.ResetIn)
	} else {
		st.DurationUntilReset = durationpb.New(e.untilReset(s.rule, s.d))
	}
	st.LimitRemaining = uint32(min(max(rem/lease.MilliPerToken, 0), math.MaxUint32))
	refused := !s.d.Allowed || s.d.Shadow
	switch {
	case refused && s.rule.ShadowMode, s.d.Shadow:
		s.result = resShadow
	case refused:
		s.result = resOverLimit
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
	default:
		s.result = resOK
	}
	if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
		rem = -1 // the refusing descriptor names the headers
	}
	return rem
}

func validateRLS(req *rlspb.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return rpcerr.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	n := len(req.GetDescriptors())
	if n == 0 {
		return rpcerr.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	if n > MaxDescriptors {
		return rpcerr.Errorf(codes.InvalidArgument, "%d descriptors; at most %d per request", n, MaxDescriptors)
	}
	for i, d := range req.GetDescriptors() {
		m := len(d.GetEntries())
		if m == 0 {
			return rpcerr.Errorf(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		if m > MaxEntries {
			return rpcerr.Errorf(codes.InvalidArgument, "descriptor %d has %d entries; at most %d", i, m, MaxEntries)
		}
		for j, en := range d.GetEntries() {
			if en.GetKey() == "" {
				return rpcerr.Errorf(codes.InvalidArgument, "descriptor %d entry %d has an empty key", i, j)
			}
			if len(en.GetKey()) > MaxNameLen {
				return rpcerr.Errorf(codes.InvalidArgument, "descriptor %d entry %d: key of %d bytes; at most %d", i, j, len(en.GetKey()), MaxNameLen)
			}
		}
	}
	return nil
}

func currentLimit(r *envoyconf.Rule) *rlspb.RateLimitResponse_RateLimit {
	return &rlspb.RateLimitResponse_RateLimit{Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unit: rlspb.RateLimitResponse_RateLimit_Unit(r.Unit)}
}

// untilReset is a descriptor status's duration_until_reset: for a
// refusal, the wait after which the cost could be admitted (a unit when no
// wait will); for an admission, the time this edge's share takes to refill
// the bucket at the rule's rate (a token bucket has no window to reset).
func (e *Edge) untilReset(r *envoyconf.Rule, d client.Decision) time.Duration {
	if !d.Allowed || d.Shadow {
		if d.RetryAfter == lease.RetryNever || d.RetryAfter <= 0 {
			return time.Duration(r.Unit.Seconds()) * time.Second
		}
		return d.RetryAfter
	}
	rate, burst := e.rateOf(r)
	if t := httplimit.RefillSeconds(rate, burst, d.RemainingMilli); t >= 0 {
		return time.Duration(t) * time.Second
	}
	return 0
}

// rateOf is the rate and burst of a rule's policy: the cluster's, else
// the rule's own.
func (e *Edge) rateOf(r *envoyconf.Rule) (float64, int64) {
	if p, ok := e.policyInfo(r.Policy); ok && p.rate > 0 {
		return p.rate, p.burst
	}
	return r.RatePerSecond(), int64(r.RequestsPerUnit)
}

// headers are response_headers_to_add: the RateLimit-Policy and RateLimit
// fields (client/httplimit's syntax) of the refusing descriptor, or of the
// one with the least remaining, and Retry-After on a refusal.
func (e *Edge) headers(s *rlsSlot, over bool) []*corev3.HeaderValue {
	if s.win {
		return windowHeaders(s, over)
	}
	rate, burst := e.rateOf(s.rule)
	var out []*corev3.HeaderValue
	if f := httplimit.PolicyField(s.rule.Policy, rate, burst); f != "" {
		out = append(out, &corev3.HeaderValue{Key: "RateLimit-Policy", Value: f})
	}
	t := httplimit.RefillSeconds(rate, burst, s.d.RemainingMilli)
	if over {
		t = httplimit.CeilSeconds(e.untilReset(s.rule, s.d))
		out = append(out, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(t, 10)})
	}
	out = append(out, &corev3.HeaderValue{Key: "RateLimit", Value: httplimit.RateLimitField(s.rule.Policy, s.d.RemainingMilli, t)})
	return out
}

// limitOf is a decided or skipped descriptor's current_limit: the
// window's (windowLimit) for a window policy, else the rule's.
func (e *Edge) limitOf(s *rlsSlot) *rlspb.RateLimitResponse_RateLimit {
	if _, ok := e.isWindowPolicy(s.rule.Policy); ok || s.win {
		return e.windowLimit(s.rule, s.ws, s.win)
	}
	return currentLimit(s.rule)
}

// windowHeaders are a window policy's response_headers_to_add, as
// client/httplimit's window layer answers: RateLimit-Policy
// "name";q=<limit>;w=<window seconds>, RateLimit "name";r=<remaining>;
// t=<seconds to the reset>, and on a refusal Retry-After: at the reset
// when the window is spent, at the next renewal when it still has units;
// none for a cost above the limit (no wait admits it).
func windowHeaders(s *rlsSlot, over bool) []*corev3.HeaderValue {
	pol := s.rule.Policy
	out := []*corev3.HeaderValue{{Key: "RateLimit-Policy", Value: httplimit.WindowPolicyField(pol, s.ws)}}
	rem, t := httplimit.WindowRemainingMilli(s.ws), httplimit.WindowResetSeconds(s.ws)
	if over {
		switch {
		case s.d.RetryAfter == lease.RetryNever:
			t = -1
		case s.d.RetryAfter > 0:
			out = append(out, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(httplimit.CeilSeconds(s.d.RetryAfter), 10)})
		default:
			out = append(out, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(max(t, 1), 10)})
		}
	}
	return append(out, &corev3.HeaderValue{Key: "RateLimit", Value: httplimit.RateLimitField(pol, rem, t)})
}

package edge

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/client/httplimit"
	"github.com/ration-dev/ration/internal/checkreq"
	"github.com/ration-dev/ration/lease"
)

// reasonNotEvaluated: an all_or_none batch stopped at an earlier refusal.
const reasonNotEvaluated = "not-evaluated"

// reasonChargedAfter: an item with charge_after, charged and never refused.
const reasonChargedAfter = "charged-after"

type admissionServer struct {
	api.UnimplementedAdmissionServer
	e *Edge
}

func (s admissionServer) Check(ctx context.Context, req *api.CheckRequest) (*api.CheckResponse, error) {
	return s.e.Check(ctx, req)
}

// Check decides a batch of items from the edge's leases (see
// api/check.proto).
func (e *Edge) Check(_ context.Context, req *api.CheckRequest) (*api.CheckResponse, error) {
	e.m.checkCalls.Add(1)
	costs, err := validateCheck(req)
	if err != nil {
		e.m.checkInvalid.Add(1)
		return nil, err
	}
	items := req.GetItems()
	if err := e.checkConcurrency(items); err != nil {
		e.m.checkInvalid.Add(1)
		return nil, err
	}
	var lbuf [MaxCheckItems]*client.Limiter
	var dbuf [MaxCheckItems]client.Decision
	var obuf [MaxCheckItems]checkreq.Outcome
	lims, ds, outs := lbuf[:len(items)], dbuf[:len(items)], obuf[:len(items)]
	for i, it := range items {
		lims[i] = e.limiter(it.GetPolicy(), client.Key(it.GetKey()))
	}
	evaluated, err := checkreq.Decide(e.client, e.reservations, req, costs, lims, ds, outs)
	if err != nil {
		e.m.checkInvalid.Add(1)
		return nil, err
	}
	// A concurrency policy the edge did not know of yet: the cluster
	// answered its key with a slot lease, which the client refused.
	// Items decided before it stay charged, as with any failed call.
	for i := range evaluated {
		if refusedAsConcurrency(lims[i], ds[i]) {
			e.m.checkInvalid.Add(1)
			return nil, concurrencyError(fmt.Sprintf("item %d", i), items[i].GetPolicy(), 0, "a Check")
		}
	}
	resp := &api.CheckResponse{Results: make([]*api.CheckResult, len(items)), Allowed: true}
	for i, it := range items {
		if i >= evaluated {
			resp.Results[i] = &api.CheckResult{Reason: reasonNotEvaluated}
			e.m.checkResult(reasonNotEvaluated)
			continue
		}
		if it.GetChargeAfter() {
			resp.Results[i] = &api.CheckResult{Allowed: true, Reason: reasonChargedAfter}
			e.m.checkResult(reasonChargedAfter)
			continue
		}
		if it.GetSettle() != nil {
			ch := outs[i].Charge
			resp.Results[i] = &api.CheckResult{Allowed: true, Reason: outs[i].Reason, Debt: ceilTokens(ch.DebtMilli), Excess: ceilTokens(ch.ExcessMilli)}
			e.m.checkResult(outs[i].Reason)
			continue
		}
		e.noteRefusal(lims[i], ds[i])
		r := e.result(it.GetPolicy(), lims[i], ds[i])
		r.Reservation = outs[i].Reservation
		resp.Results[i] = r
		e.m.checkResult(r.Reason)
		if !r.Allowed {
			resp.Allowed = false
		}
	}
	if evaluated < len(items) {
		resp.Allowed = false
	}
	return resp, nil
}

func (e *Edge) result(pol string, lim *client.Limiter, d client.Decision) *api.CheckResult {
	r := &api.CheckResult{Allowed: d.Allowed, Reason: d.Reason.String(), Remaining: max(d.RemainingMilli/lease.MilliPerToken, 0), Shadow: d.Shadow}
	refused := !d.Allowed
	switch {
	case !refused:
	case d.RetryAfter == lease.RetryNever:
		r.RetryNever = true
	default:
		r.RetryAfter = durationpb.New(d.RetryAfter)
		r.RetryAfterSeconds = httplimit.CeilSeconds(d.RetryAfter)
	}
	// A window policy: the window's figures, not a bucket's.
	if ws, ok := lim.Window(); ok {
		windowResult(r, pol, ws)
		return r
	}
	p, ok := e.policyInfo(pol)
	if ok && p.spec.Algorithm.IsWindow() {
		windowSpecResult(r, p.spec)
		return r
	}
	if !ok || p.rate <= 0 {
		return r
	}
	r.Rate, r.Burst = p.rate, p.burst
	r.RatelimitPolicy = httplimit.PolicyField(pol, p.rate, p.burst)
	t := httplimit.RefillSeconds(p.rate, p.burst, d.RemainingMilli)
	switch {
	case refused && r.RetryNever:
		t = -1
	case refused:
		t = r.RetryAfterSeconds
	}
	r.Ratelimit = httplimit.RateLimitField(pol, d.RemainingMilli, t)
	return r
}

// validateCheck checks a request's shape and returns each item's cost
// (internal/checkreq, shared with the servers' built-in edge).
func validateCheck(req *api.CheckRequest) ([]int64, error) { return checkreq.Validate(req) }

// ceilTokens is milli-tokens in whole tokens, rounded up.
func ceilTokens(milli int64) int64 {
	return (milli + lease.MilliPerToken - 1) / lease.MilliPerToken
}

// Package checkreq checks the shape of an Admission.Check request, for
// the servers that answer it: rationd edge (package edge) and every
// rationd's built-in edge (coordinator/remote.go).
package checkreq

import (
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/limits"
	"github.com/ration-dev/ration/internal/rpcerr"
	"google.golang.org/grpc/codes"
)

// Validate checks a request's shape and returns each item's cost (0
// counts as 1; a cost above client.MaxCost stays above it).
func Validate(req *api.CheckRequest) ([]int64, error) {
	items := req.GetItems()
	switch n := len(items); {
	case n == 0:
		return nil, rpcerr.Error(codes.InvalidArgument, "no items; a Check names 1 to 64 {policy, key, cost}")
	case n > limits.CheckItems:
		return nil, rpcerr.Errorf(codes.InvalidArgument, "%d items; at most %d per Check", n, limits.CheckItems)
	}
	costs := make([]int64, len(items))
	for i, it := range items {
		if it.GetPolicy() == "" {
			return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: empty policy", i)
		}
		if len(it.GetPolicy()) > limits.PolicyNameBytes {
			return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: policy name of %d bytes; at most %d", i, len(it.GetPolicy()), limits.PolicyNameBytes)
		}
		if len(it.GetKey()) > limits.KeyAttributes {
			return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: %d key attributes; at most %d", i, len(it.GetKey()), limits.KeyAttributes)
		}
		for k, v := range it.GetKey() {
			if k == "" || len(k) > limits.KeyValueBytes {
				return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: key attribute names are 1 to %d bytes", i, limits.KeyValueBytes)
			}
			if len(v) > limits.KeyValueBytes {
				return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: key attribute %q: value of %d bytes; at most %d", i, k, len(v), limits.KeyValueBytes)
			}
		}
		if it.GetChargeAfter() && req.GetAllOrNone() {
			return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: charge_after with all_or_none; a charge after the work is never refused nor refunded", i)
		}
		switch c := it.GetCost(); {
		case c < 0:
			return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: negative cost %d", i, c)
		case c == 0 && it.GetChargeAfter():
			costs[i] = 0
		case c == 0:
			costs[i] = 1
		default:
			costs[i] = ClampCost(uint64(c))
		}
		if req.GetAllOrNone() && costs[i] != costs[0] {
			return nil, rpcerr.Errorf(codes.InvalidArgument, "item %d: cost %d differs from item 0's %d; all_or_none charges one cost on every item", i, costs[i], costs[0])
		}
	}
	return costs, nil
}

// ClampCost maps a requested cost onto the client's range: more than
// client.MaxCost (no policy's burst admits it) stays more, without
// overflowing.
func ClampCost(c uint64) int64 {
	if c > uint64(client.MaxCost) {
		return client.MaxCost + 1
	}
	return int64(c)
}

// Decide decides a validated request's items (costs from Validate) on
// their limiters, lims[i] for item i, into ds, and returns how many were
// evaluated: all of them, or with all_or_none up to the first refused.
// An item with charge_after is charged, never refused (docs/design.md
// §4.1): what the bucket lacks becomes debt. Shared by `rationd edge` and
// the servers' built-in edge.
func Decide(c *client.Client, req *api.CheckRequest, costs []int64, lims []*client.Limiter, ds []client.Decision) (evaluated int) {
	items := req.GetItems()
	if req.GetAllOrNone() {
		if refused := c.AllowAllDetail(costs[0], lims, ds); refused >= 0 {
			return refused + 1
		}
		return len(items)
	}
	for i, l := range lims {
		if items[i].GetChargeAfter() {
			res, _ := l.Charge(min(costs[i], client.MaxCost)) // costs are in range
			ds[i] = client.Decision{Verdict: client.Verdict{Allowed: true, Reason: client.Allowed}, RemainingMilli: -res.DebtMilli}
			continue
		}
		ds[i] = l.AllowN(costs[i])
	}
	return len(items)
}

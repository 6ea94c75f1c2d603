// Package checkreq checks the shape of an Admission.Check request, for
// the servers that answer it: rationd edge (package edge) and every
// rationd's built-in edge (coordinator/remote.go).
package checkreq

import (
	"time"

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
		if err := validateReserve(req, i, it); err != nil {
			return nil, err
		}
		switch c := it.GetCost(); {
		case it.GetSettle() != nil:
			costs[i] = 0 // cost is ignored
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

// validateReserve checks item i's reserve, hold and settle fields.
func validateReserve(req *api.CheckRequest, i int, it *api.CheckItem) error {
	st := it.GetSettle()
	switch {
	case it.GetReserve() && it.GetChargeAfter():
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: reserve with charge_after; a reservation admits by an estimate, a charge after the work is never refused", i)
	case st != nil && (it.GetReserve() || it.GetChargeAfter()):
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: settle with reserve or charge_after; a settle item only settles", i)
	case st != nil && req.GetAllOrNone():
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: settle with all_or_none; a settle is never refused nor refunded", i)
	case st != nil && st.GetReservation() == "":
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: settle without a reservation id", i)
	case st != nil && len(st.GetReservation()) > limits.KeyValueBytes:
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: reservation id of %d bytes; at most %d", i, len(st.GetReservation()), limits.KeyValueBytes)
	case st != nil && (st.GetActual() < 0 || st.GetActual() > client.MaxCost):
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: actual cost %d; 0 to %d", i, st.GetActual(), client.MaxCost)
	case it.GetHold() != nil && !it.GetReserve():
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: hold without reserve", i)
	case req.GetAllOrNone() && it.GetReserve() != req.GetItems()[0].GetReserve():
		return rpcerr.Errorf(codes.InvalidArgument, "item %d: all_or_none mixes reserve and plain items; reserve all of them or none", i)
	}
	if h := it.GetHold(); h != nil {
		if err := h.CheckValid(); err != nil {
			return rpcerr.Errorf(codes.InvalidArgument, "item %d: hold: %v", i, err)
		}
		if d := h.AsDuration(); d < time.Millisecond || d > MaxHold {
			return rpcerr.Errorf(codes.InvalidArgument, "item %d: hold %v; 1ms to %v", i, d, MaxHold)
		}
	}
	return nil
}

// UsesReservations reports whether a request has a reserve or settle
// item (served only where there is a reservation table: rationd edge).
func UsesReservations(req *api.CheckRequest) bool {
	for _, it := range req.GetItems() {
		if it.GetReserve() || it.GetSettle() != nil {
			return true
		}
	}
	return false
}

// hold is a reserve item's hold (validated).
func hold(it *api.CheckItem) time.Duration {
	if h := it.GetHold(); h != nil {
		return h.AsDuration()
	}
	return client.DefaultReservationHold
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

// Outcome is what a reserve or settle item adds to its Decision.
type Outcome struct {
	// Reservation is an admitted reserve item's id.
	Reservation string
	// Reason is a settle item's: ReasonSettled or ReasonExpired.
	Reason string
	// Charge is what a settle item's actual cost above its estimate did.
	Charge client.ChargeResult
}

// Decide decides a validated request's items (costs from Validate) on
// their limiters, lims[i] for item i, into ds (and, for reserve and
// settle items, outs, from table tab), and returns how many were
// evaluated: all of them, or with all_or_none up to the first refused.
// An item with charge_after is charged, never refused (docs/design.md
// §4.1): what the bucket lacks becomes debt. A reserve item is decided as
// a plain one and an admitted one filed in tab; an all_or_none batch of
// them is reserved together or not at all (client.ReserveAll). A settle
// item that fails (unknown id, settled twice, a full table) fails the
// call, the items before it staying decided. Shared by `rationd edge`
// and the servers' built-in edge (which has no table: tab nil, and
// refuses reserve and settle before, UsesReservations).
func Decide(c *client.Client, tab *Reservations, req *api.CheckRequest, costs []int64, lims []*client.Limiter, ds []client.Decision, outs []Outcome) (evaluated int, err error) {
	items := req.GetItems()
	if req.GetAllOrNone() && items[0].GetReserve() {
		return decideReserveAll(c, tab, req, costs, lims, ds, outs)
	}
	if req.GetAllOrNone() {
		if refused := c.AllowAllDetail(costs[0], lims, ds); refused >= 0 {
			return refused + 1, nil
		}
		return len(items), nil
	}
	for i, l := range lims {
		it := items[i]
		switch {
		case it.GetChargeAfter():
			res, _ := l.Charge(min(costs[i], client.MaxCost)) // costs are in range
			ds[i] = client.Decision{Verdict: client.Verdict{Allowed: true, Reason: client.Allowed}, RemainingMilli: -res.DebtMilli}
		case it.GetSettle() != nil:
			res, reason, err := tab.settle(it.GetSettle().GetReservation(), l, it.GetSettle().GetActual())
			if err != nil {
				return i, err
			}
			ds[i] = client.Decision{Verdict: client.Verdict{Allowed: true, Reason: client.Allowed}, RemainingMilli: -res.DebtMilli}
			outs[i] = Outcome{Reason: reason, Charge: res}
		case it.GetReserve():
			id, d, err := tab.reserve(l, costs[i], hold(it))
			if err != nil {
				return i, err
			}
			ds[i], outs[i] = d, Outcome{Reservation: id}
		default:
			ds[i] = l.AllowN(costs[i])
		}
	}
	return len(items), nil
}

// decideReserveAll reserves an all_or_none batch of reserve items
// together, or none of them.
func decideReserveAll(c *client.Client, tab *Reservations, req *api.CheckRequest, costs []int64, lims []*client.Limiter, ds []client.Decision, outs []Outcome) (int, error) {
	if err := tab.room(len(lims)); err != nil {
		return 0, err
	}
	h := hold(req.GetItems()[0])
	var buf [limits.CheckItems]*client.Reservation
	rs := buf[:len(lims)]
	if refused := c.ReserveAll(costs[0], h+clientHoldMargin, lims, rs, ds); refused >= 0 {
		return refused + 1, nil
	}
	for i, r := range rs {
		if r != nil {
			outs[i].Reservation = tab.add(r, lims[i], h)
		}
	}
	return len(lims), nil
}

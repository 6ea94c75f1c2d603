package client

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/lease"
)

// Costs known only after the work (docs/design.md §4.1): Charge records a
// cost after the fact, never refused; Reserve admits by an estimate and
// Reservation.Settle charges the difference once the actual cost is
// known. What the lease's bucket lacks becomes debt, down to the lease's
// debt allowance (its share of the policy's max_debt); a bucket in debt
// admits nothing until its rate has paid the debt. What goes beyond the
// allowance, the excess, is recorded and reported (ChargeResult,
// metrics) but not covered by the bound. On a policy without max_debt the
// allowance is 0: a charge takes what the bucket holds and the rest is
// excess. A fixed window's chunk is charged the same way (docs/design.md
// §8.6): it has no rate, so a chunk in debt admits nothing until a
// renewal's units pay it, and the debt counts in the window where the
// chunk ends; what goes beyond the window's limit is carried into the
// next window.

// DefaultReservationHold is how long a reservation from Reserve may wait
// for its Settle: after it, the reservation is charged its estimate (it
// was taken at the reservation) and Settle returns ErrReservationExpired.
const DefaultReservationHold = 10 * time.Minute

// Errors of Charge, Reserve and Settle.
var (
	// ErrCostTooLarge: a cost above MaxCost (more than any policy's
	// burst or debt bound can hold).
	ErrCostTooLarge = errors.New("ration: cost above MaxCost")
	// ErrAlreadySettled: Settle was called twice on one reservation.
	ErrAlreadySettled = errors.New("ration: reservation already settled")
	// ErrReservationExpired: Settle after the reservation's deadline; the
	// reservation was charged its estimate.
	ErrReservationExpired = errors.New("ration: reservation expired before it was settled")
)

// ChargeResult is what a charge after the work did.
type ChargeResult struct {
	// ChargedMilli is what the lease's bucket took, its debt included.
	ChargedMilli int64
	// DebtMilli is how far below zero the bucket is after the charge
	// (0: not in debt). While it is positive the limiter admits nothing.
	DebtMilli int64
	// ExcessMilli is the part of the charge beyond the bucket's debt
	// allowance (or all of it with no usable lease): recorded, reported,
	// not covered by the bound.
	ExcessMilli int64
}

// Charge records cost tokens spent after the fact (a cost known only at
// the end of the work, like an LLM answer's tokens). It is never refused:
// what the lease's bucket lacks becomes debt, down to the lease's debt
// allowance, and the rest is excess (ChargeResult.ExcessMilli, the
// debt_excess_tokens_total metric). Only bad input is an error: a
// negative cost (ErrInvalidCost) or one above MaxCost (ErrCostTooLarge).
// A cost of 0 charges nothing. On a key with no lease yet it waits for the
// first one as a first admission does (Config.FirstLeaseWait); with none
// by then, all of the cost is excess.
func (l *Limiter) Charge(cost int64) (ChargeResult, error) {
	if cost < 0 {
		return ChargeResult{}, fmt.Errorf("%w: charge of %d", ErrInvalidCost, cost)
	}
	if cost > MaxCost {
		return ChargeResult{}, fmt.Errorf("%w: charge of %d", ErrCostTooLarge, cost)
	}
	return l.chargeMilli(cost * lease.MilliPerToken), nil
}

// chargeMilli charges costMilli after the fact to the current lease's
// bucket (a reservation's too: its estimate's lease may have ended since,
// and the charge then goes to the one in use), else it is all excess.
func (l *Limiter) chargeMilli(costMilli int64) ChargeResult {
	if costMilli <= 0 {
		return ChargeResult{}
	}
	t := l.cur.Load()
	if t == nil && l.evicted.Load() {
		return l.live().chargeMilli(costMilli)
	}
	if t == nil && l.route != nil && !l.route.local.Load() && costMilli%lease.MilliPerToken == 0 && l.chargeRemote(costMilli) {
		// A key decided remotely is charged where it is decided, at its
		// edge's lease (docs/design.md §3.4, "Remote decisions by default").
		res := ChargeResult{ChargedMilli: costMilli}
		addSat(&l.chargedMilli, costMilli)
		return res
	}
	if t == nil && l.c.cfg.FirstLeaseWait > 0 {
		// A key with no lease yet (a cold key's first charge): wait for
		// its first grant, as a first admission does.
		if wait := l.firstWait(); wait > 0 {
			l.awaitFirst(wait)
			t = l.cur.Load()
		}
	}
	var res ChargeResult
	now := l.c.clock.Precise()
	if t == nil || now >= t.deadline || l.c.closed.Load() {
		res.ExcessMilli = costMilli // no bucket of a usable lease to hold it
	} else {
		level, excess := t.bucket.ChargeN(now, costMilli)
		res = ChargeResult{ChargedMilli: costMilli - excess, DebtMilli: max(-level, 0), ExcessMilli: excess}
		if level < 0 {
			l.debtBucket.Store(t.bucket)
		}
		l.pokeDry() // a bucket run dry asks for its share sooner
	}
	addSat(&l.chargedMilli, costMilli)
	addSat(&l.excessMilli, res.ExcessMilli)
	return res
}

// Reservation is an admission by an estimate, settled later with the
// actual cost (Limiter.Reserve). It is safe for concurrent use; Settle
// takes effect once.
type Reservation struct {
	l *Limiter
	// bucket took the estimate (nil: nothing was taken, a shadow policy's
	// admission).
	bucket        *lease.AtomicBucket
	estimateMilli int64
	deadline      int64 // local clock
	done          atomic.Bool
}

// Reserve admits by an estimate of a cost known only after the work: it
// is decided and charged exactly as AllowN(estimate), and an admitted
// reservation (Decision.Allowed) must be settled with Settle once the
// actual cost is known, within DefaultReservationHold; one never settled
// keeps its estimate. A refused one returns a nil Reservation.
func (l *Limiter) Reserve(estimate int64) (*Reservation, Decision) {
	return l.ReserveFor(estimate, DefaultReservationHold)
}

// ReserveFor is Reserve with the time the reservation may wait for its
// Settle (at least 1 ms).
func (l *Limiter) ReserveFor(estimate int64, hold time.Duration) (*Reservation, Decision) {
	if estimate < 0 || estimate > MaxCost {
		return nil, l.rejectCost(estimate)
	}
	if l.cur.Load() == nil && l.evicted.Load() {
		return l.live().ReserveFor(estimate, hold)
	}
	costMilli := estimate * lease.MilliPerToken
	var d Decision
	var b *lease.AtomicBucket
	if costMilli == 0 {
		d = l.allowN(0)
	} else {
		d, b = l.allow(costMilli, true)
	}
	if !d.Allowed {
		return nil, d
	}
	r := &Reservation{l: l, bucket: b, estimateMilli: costMilli, deadline: l.c.clock.Precise() + int64(max(hold, time.Millisecond))}
	return r, d
}

// EstimateMilli returns the estimate the reservation took.
func (r *Reservation) EstimateMilli() int64 { return r.estimateMilli }

// Settle charges the reservation's actual cost: the difference from its
// estimate is charged after the fact (Charge's rule: never refused, a
// debt if the bucket lacks it) when higher, refunded when lower (to the
// bucket that took the estimate, while it is still the limiter's usable
// one; otherwise the tokens are lost, safely). It takes effect once:
// later calls return ErrAlreadySettled. After the reservation's deadline
// it returns ErrReservationExpired and charges nothing more (the
// estimate stays taken). A negative actual is ErrInvalidCost and one
// above MaxCost ErrCostTooLarge; neither settles the reservation.
func (r *Reservation) Settle(actual int64) (ChargeResult, error) {
	if actual < 0 {
		return ChargeResult{}, fmt.Errorf("%w: actual cost %d", ErrInvalidCost, actual)
	}
	if actual > MaxCost {
		return ChargeResult{}, fmt.Errorf("%w: actual cost %d", ErrCostTooLarge, actual)
	}
	if !r.done.CompareAndSwap(false, true) {
		return ChargeResult{}, ErrAlreadySettled
	}
	l := r.l
	if l.c.clock.Precise() >= r.deadline {
		return ChargeResult{}, ErrReservationExpired
	}
	actualMilli := actual * lease.MilliPerToken
	switch {
	case actualMilli > r.estimateMilli:
		return l.chargeMilli(actualMilli - r.estimateMilli), nil
	case actualMilli < r.estimateMilli && r.bucket != nil:
		if t := l.cur.Load(); t != nil && t.bucket == r.bucket && l.c.clock.Precise() < t.deadline {
			r.bucket.Refund(r.estimateMilli - actualMilli)
		}
	}
	return ChargeResult{}, nil
}

// Settlement settles a request admitted by an estimate under several
// limiters (the layers of AllowAll) with its measured cost. One from
// NewSettlement charges each limiter what the estimate missed, after the
// fact (Charge: never refused), and refunds nothing; one from
// NewReservedSettlement settles each reservation (Reservation.Settle:
// a lower actual refunds too). The measured cost is given at once
// (Settle) or added up as the work goes (Add, during a stream) and
// settled when it ends (Finish). The middlewares (httplimit.Settle and
// AddCost, grpclimit.Settle and AddCost) hand one to the handler. It is
// safe for concurrent use and takes effect once.
type Settlement struct {
	lims     []*Limiter
	rs       []*Reservation
	estimate int64
	added    atomic.Int64 // -1: nothing added
	done     atomic.Bool
}

// NewSettlement returns the settlement of a request that lims admitted at
// cost estimate.
func NewSettlement(estimate int64, lims ...*Limiter) *Settlement {
	s := &Settlement{lims: lims, estimate: estimate}
	s.added.Store(-1)
	return s
}

// NewReservedSettlement returns the settlement of a request admitted by
// the reservations rs (of estimate each; nil ones are skipped) and, at
// cost estimate without a reservation, by lims (charged only what the
// estimate missed, as with NewSettlement).
func NewReservedSettlement(estimate int64, rs []*Reservation, lims ...*Limiter) *Settlement {
	s := NewSettlement(estimate, lims...)
	s.rs = rs
	return s
}

// Settle charges the measured cost actual: to each reservation its
// Settle (a lower actual refunds; one past its hold is charged what the
// estimate missed), and to every other limiter actual less the estimate,
// if positive. Later calls return ErrAlreadySettled; a negative actual
// is ErrInvalidCost and one above MaxCost ErrCostTooLarge, and neither
// settles.
func (s *Settlement) Settle(actual int64) error {
	if actual < 0 {
		return fmt.Errorf("%w: actual cost %d", ErrInvalidCost, actual)
	}
	if actual > MaxCost {
		return fmt.Errorf("%w: actual cost %d", ErrCostTooLarge, actual)
	}
	if !s.done.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	extra := actual - s.estimate
	for _, r := range s.rs {
		if r == nil {
			continue
		}
		if _, err := r.Settle(actual); errors.Is(err, ErrReservationExpired) && extra > 0 {
			_, _ = r.l.Charge(extra) // in range: 0 < extra <= MaxCost
		}
	}
	if extra > 0 {
		for _, l := range s.lims {
			if _, err := l.Charge(extra); err != nil {
				return err
			}
		}
	}
	return nil
}

// Add adds n (>= 0) to the measured cost that Finish settles; the sum
// stops at MaxCost. After the settlement it returns ErrAlreadySettled.
func (s *Settlement) Add(n int64) error {
	if n < 0 {
		return fmt.Errorf("%w: added cost %d", ErrInvalidCost, n)
	}
	if s.done.Load() {
		return ErrAlreadySettled
	}
	for {
		old := s.added.Load()
		sum := min(max(old, 0)+min(n, MaxCost), MaxCost)
		if s.added.CompareAndSwap(old, sum) {
			return nil
		}
	}
}

// Finish settles with the sum of Add, when Add was called and the
// settlement has not been settled yet; otherwise it does nothing (the
// estimate stays charged).
func (s *Settlement) Finish() {
	if n := s.added.Load(); n >= 0 {
		_ = s.Settle(n) // in range; a settled one stays settled
	}
}

// ReserveAll reserves estimate on every layer (as AllowAll admits), each
// reservation held for hold, into rs and ds (len(layers) each): all of
// them or none. It returns the index of the first refused layer, or -1;
// on a refusal the layers reserved before it are settled at 0 (their
// estimates refunded, as AllowAll refunds) and rs is all nil. With rs or
// ds shorter than layers (a caller's bug) nothing is reserved: the first
// layer with no room in both is returned as refused (ds may have no entry
// for it), rs is all nil and ds is left as it was.
func (c *Client) ReserveAll(estimate int64, hold time.Duration, layers []*Limiter, rs []*Reservation, ds []Decision) (refused int) {
	if n := min(len(rs), len(ds)); n < len(layers) {
		clear(rs)
		return n
	}
	for i, l := range layers {
		rs[i], ds[i] = l.ReserveFor(estimate, hold)
		if ds[i].Allowed {
			continue
		}
		for j := range i {
			_, _ = rs[j].Settle(0) // within its hold: refunds, cannot fail
			rs[j] = nil
		}
		return i
	}
	return -1
}

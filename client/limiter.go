package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/lease"
)

// Reason says why a Decision came out the way it did.
type Reason uint8

const (
	// Allowed: admitted from the lease.
	Allowed Reason = iota
	// Limited: not enough tokens now; RetryAfter says when. A cost above
	// this replica's share but within the policy's burst is Limited too,
	// with RetryAfter at the next renewal, which asks for a share it fits.
	Limited
	// ExceedsCapacity: the cost is more than the policy's burst; no wait
	// admits it. (From a server that does not send the policy's burst: more
	// than this replica's local cap.)
	ExceedsCapacity
	// NoLease: the first grant for this key has not arrived (yet).
	NoLease
	// Unavailable: the lease ran out and no renewal succeeded, and the
	// policy is fail-closed.
	Unavailable
	// ShadowDenied: a shadow policy would have denied this; Allowed is true.
	ShadowDenied
	// FallbackAllowed: the cluster is unreachable and the policy is
	// fail-open; admitted by the local fallback limit.
	FallbackAllowed
	// InvalidCost: the cost is negative, a caller's bug; nothing is
	// charged and RetryAfter is lease.RetryNever (WaitN returns
	// ErrInvalidCost). A shadow policy refuses it too: it is not a quota
	// decision.
	InvalidCost

	numReasons = int(InvalidCost) + 1
)

// MaxCost is the largest cost any policy can admit, in tokens: the largest
// burst (lease.MaxCapacityMilli). A larger cost is ExceedsCapacity on every
// key, decided before any arithmetic on it, so no cost can overflow.
const MaxCost = lease.MaxCapacityMilli / lease.MilliPerToken

// ErrInvalidCost is returned by WaitN for a negative cost.
var ErrInvalidCost = errors.New("ration: cost must not be negative")

func (r Reason) String() string {
	switch r {
	case Allowed:
		return "allowed"
	case Limited:
		return "limited"
	case ExceedsCapacity:
		return "exceeds-capacity"
	case NoLease:
		return "no-lease"
	case Unavailable:
		return "unavailable"
	case ShadowDenied:
		return "shadow-denied"
	case FallbackAllowed:
		return "fallback-allowed"
	case InvalidCost:
		return "invalid-cost"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Decision is the outcome of one admission. Read its fields directly:
// d.Allowed, d.Reason, d.Shadow (promoted from Verdict), d.RemainingMilli,
// d.RetryAfter.
//
// It is shaped for the hot path: the Go compiler keeps a struct in
// registers only if it has at most 4 fields (and at most 32 bytes), so the
// three small fields are grouped in an embedded Verdict. With 5 top-level
// fields, every caller of AllowN spilled the result to its stack and copied
// it back, which cost more than the admission itself (see bench/history/2026-12-03.md,
// "Client hot path"). A composite literal must name the Verdict:
// Decision{Verdict: Verdict{Allowed: true, Reason: Allowed}}.
type Decision struct {
	Verdict
	// RemainingMilli is the local bucket's level after the decision.
	RemainingMilli int64
	// RetryAfter is the earliest wait after which the same cost could be
	// admitted locally (0 when allowed; lease.RetryNever if never).
	RetryAfter time.Duration
}

// Verdict is the part of a Decision that says what happened.
type Verdict struct {
	Allowed bool
	Reason  Reason
	// Shadow is set when a shadow policy would have denied the request.
	Shadow bool
}

// terms is one lease's usable state. It is immutable once published; a
// renewal publishes a new terms sharing the same bucket.
type terms struct {
	leaseID uint64
	bucket  *lease.AtomicBucket
	// deadline is the local monotonic time (client clock base) until which
	// the lease may be used; guardFrom is where the hot path stops deciding
	// on the floored reading (Clock.Fresh) and allow decides on the precise
	// one (Clock.Precise).
	deadline, guardFrom int64
	// renewAt is when the background loop renews (local time).
	renewAt   int64
	capMilli  int64
	rateMilli int64 // the share r_i (the bucket mints r_i/(1+ρ))
	// policyBurst is the policy's burst B (0 if the server did not say):
	// a cost within it may be admitted once the share grows.
	policyBurst int64
	// contended: the key's holders together ask for more than its rate
	// (Grant.contended): a trickle's seat is thin (thinLease).
	contended  bool
	ttlNanos   int64
	driftPPM   int64
	shadow     bool
	failOpen   bool
	fallback   *lease.AtomicBucket // fail-open local limit, nil if fail-closed
	canonical  string
	expiredAck bool // the loop saw the lease gone at the coordinator
	// version is the Grant.version of the terms installed in bucket (its
	// rate and cap were set before this terms was published); the next
	// renewal acknowledges it, which lets the coordinator drop older
	// versions at once (docs/design.md §3.4).
	version uint64
	// clampedMilli is what installing version took off the bucket (its
	// level above the cut cap); the next renewal reports it with the
	// acknowledgement, and the cluster returns it to the pool (rule i).
	clampedMilli int64
	// debtLiftedMilli is the debt installing version lifted off the bucket
	// (its level below the lowered allowance); the next renewal reports
	// it, and the cluster moves it into the key's debt (rule k).
	debtLiftedMilli int64
	// win: a window policy's chunk (window.go); nil for a token bucket.
	win *windowTerms
}

// Limiter admits work for one key of one policy from this replica's lease.
// It is safe for concurrent use. Get one with Client.Limiter.
//
// A limiter nothing was offered on for Config.IdleTimeout is evicted by
// the background loop: its lease is released with the unspent tokens and
// the Client forgets it. Keeping the *Limiter is still safe: its next call
// misses the fast path and hands itself, and every later call, to the
// Client's live limiter for the same key (Client.Limiter's, created if
// there is none), which acquires a lease afresh: that first call waits up
// to Config.FirstLeaseWait, as on a new key. Its decisions are then
// counted on the live limiter.
type Limiter struct {
	c      *Client
	policy string
	attrs  map[string]string // the key it was made for (never modified)
	id     string            // LimiterID(policy, attrs)
	regID  string            // the ID Client.limiters has it under (Client.mu)
	// born orders limiters by registration: acquires go oldest first, so
	// of two keys of one budget made before its key attributes were
	// known, the older owns the budget and the newer becomes its alias.
	born uint64

	cur       atomic.Pointer[terms]
	first     chan struct{} // closed at the first grant (or a refusal)
	firstOnce sync.Once
	// unmet is the cost offered but not taken from the lease's bucket
	// (refused, no lease, unavailable, fallback) since the last demand
	// report. Admitted cost is not counted on the fast path: the loop reads
	// it from the bucket (AtomicBucket.ConsumedMilli).
	unmet atomic.Int64
	// maxCost is the largest cost the slow path saw since the last demand
	// report (every refusal takes it): the next demand asks for a cap that
	// fits it.
	maxCost atomic.Int64
	// Decision counts for metrics (metrics.go). Allowed decisions are
	// counted only once a collector is attached (Client.countAllowed): one
	// more atomic add on the fast path.
	decisions [numReasons]atomic.Int64 // by Reason
	shadowed  atomic.Int64             // decisions with Shadow set
	nearLimit atomic.Int64             // admissions leaving < 10% of the cap
	waiters   atomic.Int64
	// Charges after the work (debt.go): every cost charged, the part of
	// it beyond the bucket's debt allowance, and the last bucket a charge
	// took below zero (a release past its deadline reports that bucket's
	// whole allowance as its debt).
	chargedMilli, excessMilli atomic.Int64
	debtBucket                atomic.Pointer[lease.AtomicBucket]
	lastErr                   atomic.Pointer[error]
	// invalid, set at creation, is why no cluster can lease the key
	// (keyProblem; Client.refusedLimiter): it is never sent.
	invalid error
	retryAt atomic.Int64 // local time before which the loop does not retry
	// firstUntil is when the first-lease wait ends (local time; 0 before
	// the first call): calls before the first grant wait until then, later
	// ones not at all.
	firstUntil atomic.Int64
	// evicted is set (under Client.mu, before the loop unpublishes cur)
	// when the loop evicts the limiter; successor is the live limiter for
	// the same key that its calls go to since.
	// An alias (keying.go) is evicted from the start, with its budget's
	// limiter as successor; successorGen is the Client's keyingGen when
	// successor was looked up, so a change of the key attributes makes it
	// look again.
	evicted      atomic.Bool
	successor    atomic.Pointer[Limiter]
	successorGen atomic.Uint64

	// Owned by the background loop.
	lastBucket   *lease.AtomicBucket // the bucket lastConsumed was read from
	lastConsumed int64
	meter        lease.DemandMeter
	// reportedAt is when demand last measured (a report that rode along
	// early repeats lastDemand instead).
	reportedAt int64
	lastDemand lease.Demand // the last measured demand (Known false: none)
	fails      int
	// activeAt is the last time (local) the loop saw cost offered, or the
	// limiter's creation: the idle clock of eviction. The seen* fields are
	// the demand accounting as evictIdle last read it.
	activeAt     int64
	seenUnmet    int64
	seenBucket   *lease.AtomicBucket
	seenConsumed int64
	// The audit's base (loop.go, auditReport): auditBucket's admissions as
	// read when the answer to request auditSeq (on its lease) arrived.
	auditBucket *lease.AtomicBucket
	auditBase   int64
	auditSeq    uint64
	// route is the key's routing to an edge (edgeroute.go); nil without
	// Config.Edges.
	route *route

	// A rise of demand (rise.go). riseOK: the last answer granted all the
	// rate its report asked for, so a higher demand may get more; the hot
	// path then wakes the loop once (dryPoked) when the bucket runs low.
	riseOK, dryPoked atomic.Bool
	// Owned by the loop: the offered-rate probe (offered since the last
	// report, as read at probeAt), the last rise renewal's send time, and
	// the rate the next report takes (0: none).
	probeAt, probeOffered int64
	riseSentAt, riseRate  int64
	// The renewal schedule (schedule.go), owned by the loop: the terms of
	// this key's live entry in it (nil: none), and whether the batch being
	// built or sent holds it.
	queued  *terms
	batched bool
}

// Err returns the last error the background loop saw for this key (a
// refusal such as an unknown policy, or a failed RPC), or nil.
func (l *Limiter) Err() error {
	if l.evicted.Load() {
		if s := l.successor.Load(); s != nil {
			return s.Err()
		}
	}
	if e := l.lastErr.Load(); e != nil {
		return *e
	}
	return nil
}

// ErrConcurrencyPolicy is Limiter.Err's error (wrapped) for a key of a
// concurrency policy: its decisions are NoLease (use Client.Slots).
var ErrConcurrencyPolicy = errors.New("ration: a concurrency policy is not a rate")

// ErrTooManyWaiters is returned by WaitN when MaxWaiters callers already wait.
var ErrTooManyWaiters = errors.New("ration: too many waiters on this limiter")

// ErrWouldExceedDeadline is returned by WaitN when the wait would not fit
// the context's deadline.
var ErrWouldExceedDeadline = errors.New("ration: wait would exceed the context deadline")

// Allow is AllowN(1).Allowed, with the same decision, accounting and
// metrics. Its fast path returns the bool alone, without building a
// Decision.
func (l *Limiter) Allow() bool {
	if t := l.cur.Load(); t != nil {
		c := l.c
		if now := c.clock.Fresh(); now < t.guardFrom && !c.closed.Load() {
			if rem, ok := t.bucket.TryTakeN(now, lease.MilliPerToken); ok {
				if (rem+1)*10 <= t.capMilli || c.countAllowed.Load() {
					l.countAdmitted(t, rem)
				}
				return true
			}
		}
	}
	return l.allowN(lease.MilliPerToken).Allowed
}

// AllowN decides, without blocking (but see Config.FirstLeaseWait), whether
// cost tokens may be spent now. The common case is one monotonic clock read
// and one lock-free bucket operation: no RPC, no allocation, no mutex.
//
// Costs: a cost above MaxCost (more than any policy's burst) is
// ExceedsCapacity with lease.RetryNever, a negative one InvalidCost, both
// without touching the lease or the demand it reports. A cost of 0 spends
// nothing and is decided like any other on the lease's state: Allowed
// while a lease (or a fail-open fallback) is usable, NoLease or
// Unavailable otherwise, so it probes the lease without spending.
//
// The fast path makes no call: a live lease, away from its deadline (the
// clock's reading, floored to its resolution, below the precomputed guard
// band), tokens in the bucket with no refill due, nothing to count. A
// refill (at most once per resolution, 1ms by default), a refusal and
// anything near the deadline go through allowN, which decides exactly as
// the full path always has.
func (l *Limiter) AllowN(cost int64) Decision {
	// One compare keeps costs outside [1, MaxCost] (0, negative, too large)
	// off the fast path, before the cost is multiplied.
	if t := l.cur.Load(); t != nil && uint64(cost-1) < uint64(MaxCost) {
		costMilli := cost * lease.MilliPerToken
		c := l.c
		if now := c.clock.Fresh(); now < t.guardFrom && !c.closed.Load() {
			if rem, ok := t.bucket.TryTakeN(now, costMilli); ok {
				// (rem+1)*10 <= cap is rem < cap/10 without the division;
				// rem <= lease.MaxCapacityMilli, so it cannot overflow.
				if (rem+1)*10 <= t.capMilli || c.countAllowed.Load() {
					l.countAdmitted(t, rem)
				}
				return Decision{Verdict: Verdict{Allowed: true, Reason: Allowed}, RemainingMilli: rem}
			}
		}
	}
	return l.allowCost(cost)
}

// allowCost is AllowN past its fast path: a cost outside [0, MaxCost] is
// refused before any arithmetic on it; the others are decided by allowN.
func (l *Limiter) allowCost(cost int64) Decision {
	if cost < 0 || cost > MaxCost {
		return l.rejectCost(cost)
	}
	return l.allowN(cost * lease.MilliPerToken)
}

// rejectCost decides a cost outside [0, MaxCost]: InvalidCost if negative,
// ExceedsCapacity if too large (ShadowDenied on a shadow policy), counted
// like any decision but neither charged nor reported as demand.
func (l *Limiter) rejectCost(cost int64) Decision {
	if l.evicted.Load() && l.cur.Load() == nil {
		return l.live().rejectCost(cost)
	}
	d := Decision{Verdict: Verdict{Reason: ExceedsCapacity}, RetryAfter: lease.RetryNever}
	if cost < 0 {
		d.Reason = InvalidCost
	} else if t := l.cur.Load(); t != nil && t.shadow {
		d.Allowed, d.Shadow, d.Reason, d.RetryAfter = true, true, ShadowDenied, 0
	}
	return l.count(d)
}

// countAdmitted counts an admission from the lease's bucket for metrics:
// near the limit (< 10% of the cap left), and allowed if a collector is
// attached.
func (l *Limiter) countAdmitted(t *terms, rem int64) {
	if rem < t.capMilli/2 {
		if rem < t.capMilli/10 {
			l.nearLimit.Add(1)
			l.pokeIfSpent(t, rem)
		}
		l.pokeDry()
	}
	if l.c.countAllowed.Load() {
		l.decisions[Allowed].Add(1)
	}
}

// pokeIfSpent wakes the loop when an admission left a window chunk empty
// while its window has nothing left: the loop releases it (spentChunk).
func (l *Limiter) pokeIfSpent(t *terms, rem int64) {
	if rem == 0 && t.win != nil && t.win.remainingMilli == 0 {
		l.c.poke()
	}
}

// allowN is AllowN past its first try: the fast path again, now with a
// refill (TakeN), then the full decision. costMilli is in [0,
// lease.MaxCapacityMilli] (allowCost checked the cost).
func (l *Limiter) allowN(costMilli int64) Decision {
	if t := l.cur.Load(); t != nil {
		if now := l.c.clock.Fresh(); now < t.guardFrom && !l.c.closed.Load() {
			if rem, ok := t.bucket.TakeN(now, costMilli); ok {
				l.countAdmitted(t, rem)
				return Decision{Verdict: Verdict{Allowed: true, Reason: Allowed}, RemainingMilli: rem}
			}
		}
	} else if l.evicted.Load() {
		return l.live().allowN(costMilli)
	}
	d, _ := l.allow(costMilli, true)
	return d
}

// live returns the limiter an evicted limiter's calls go to: the Client's
// registered one for the same key, registered anew if there is none (its
// first call then waits for a lease as on a new key). It is looked up
// again once that one is evicted in turn, so a held limiter never leads
// down a chain of evicted ones.
func (l *Limiter) live() *Limiter {
	if s := l.successor.Load(); s != nil && !s.evicted.Load() && l.successorGen.Load() == l.c.keyingGen.Load() {
		return s
	}
	s, gen := l.c.liveLimiter(l.policy, l.attrs)
	l.successor.Store(s)
	l.successorGen.Store(gen)
	return s
}

// allow decides, and returns the bucket it charged (nil if it charged
// none: a refusal, or a shadow policy admitting what it would refuse), so
// that AllowAll refunds exactly what was taken, where it was taken.
func (l *Limiter) allow(costMilli int64, waitFirst bool) (Decision, *lease.AtomicBucket) {
	t := l.cur.Load()
	if t == nil {
		if l.evicted.Load() {
			return l.live().allow(costMilli, waitFirst)
		}
		if l.route != nil && !l.route.local.Load() {
			if d, ok := l.allowRemote(costMilli); ok {
				return d, nil // no local bucket charged: AllowAll cannot refund it
			}
		}
		if waitFirst && l.c.cfg.FirstLeaseWait > 0 {
			if wait := l.firstWait(); wait > 0 {
				l.awaitFirst(wait)
				t = l.cur.Load()
			}
		}
		if t == nil && l.evicted.Load() {
			// Evicted during the wait (which eviction cuts short).
			return l.live().allow(costMilli, waitFirst)
		}
		if t == nil {
			addSat(&l.unmet, costMilli)
			return l.count(Decision{Verdict: Verdict{Reason: NoLease}, RetryAfter: l.c.cfg.FirstLeaseWait}), nil
		}
	}
	now := l.c.clock.Fresh()
	if now >= t.guardFrom {
		// Near the deadline a floored (lagging) reading is not safe to trust.
		now = l.c.clock.Precise()
	}
	if now >= t.deadline || l.c.closed.Load() {
		addSat(&l.unmet, costMilli)
		d, charged := l.unusable(t, costMilli)
		return l.count(d), charged
	}
	if costMilli == 0 {
		// Spends nothing: allowed while the lease is usable.
		out := Decision{Verdict: Verdict{Allowed: true, Reason: Allowed}, RemainingMilli: t.bucket.LevelMilli(now)}
		if l.c.countAllowed.Load() {
			l.decisions[Allowed].Add(1)
		}
		return out, nil
	}
	// The slow path (AllowN has already tried the fast one): the full
	// decision, with reason and retry-after.
	d := t.bucket.AllowN(now, costMilli)
	if costMilli > l.maxCost.Load() {
		l.maxCost.Store(costMilli)
	}
	if !d.Allowed {
		addSat(&l.unmet, costMilli)
		d = t.shareWait(now, costMilli, d)
		l.pokeDry()
	}
	out := Decision{Verdict: Verdict{Allowed: d.Allowed}, RemainingMilli: d.RemainingMilli, RetryAfter: d.RetryAfter}
	var charged *lease.AtomicBucket
	switch d.Reason {
	case lease.ReasonOK:
		out.Reason = Allowed
		charged = t.bucket
		if d.RemainingMilli < t.capMilli/10 {
			l.nearLimit.Add(1)
			l.pokeIfSpent(t, d.RemainingMilli)
		}
		if d.RemainingMilli < t.capMilli/2 {
			l.pokeDry()
		}
	case lease.ReasonExceedsCapacity:
		out.Reason = ExceedsCapacity
	default:
		out.Reason = Limited
	}
	if t.shadow && !d.Allowed {
		out.Allowed, out.Shadow, out.Reason = true, true, ShadowDenied
		l.shadowed.Add(1)
	}
	if out.Reason != Allowed || l.c.countAllowed.Load() {
		l.decisions[out.Reason].Add(1)
	}
	return out, charged
}

// shareRetry is how long after its renewal is due a caller refused for
// want of a share is told to retry: about one renewal round trip.
const shareRetry = 10 * time.Millisecond

// shareWait turns a refusal that only a larger share can end into a wait
// for the next renewal: a cost above the lease's cap but within the
// policy's burst (the renewal reports it as the largest cost, and the
// coordinator keeps the cap at least that where the budget allows), or a
// lease with no rate. Only a cost above the policy's burst is hopeless
// (ExceedsCapacity, RetryNever). A grant from a server that does not send
// the policy's burst keeps the old answer.
func (t *terms) shareWait(now, costMilli int64, d lease.Decision) lease.Decision {
	untilShare := time.Duration(max(t.renewAt-now, 0)) + shareRetry
	if t.win != nil {
		return t.win.wait(now, costMilli, untilShare, t.shareWaitBucket(costMilli, d))
	}
	switch {
	case d.Reason == lease.ReasonExceedsCapacity && t.policyBurst > 0 && costMilli <= t.policyBurst:
		d.Reason, d.RetryAfter = lease.ReasonLimit, untilShare
	case d.Reason == lease.ReasonLimit && d.RetryAfter == lease.RetryNever:
		d.RetryAfter = untilShare
	}
	return d
}

// firstWait returns how much longer a call before the first grant waits:
// the first call starts a FirstLeaseWait-long wait, calls during it wait
// for what is left, later calls not at all.
func (l *Limiter) firstWait() time.Duration {
	now := l.c.clock.Precise()
	until := l.firstUntil.Load()
	if until == 0 {
		l.firstUntil.CompareAndSwap(0, now+int64(l.c.cfg.FirstLeaseWait))
		until = l.firstUntil.Load()
	}
	return time.Duration(until - now)
}

// count records a decision of the slow paths for metrics.
func (l *Limiter) count(d Decision) Decision {
	l.decisions[d.Reason].Add(1)
	if d.Shadow {
		l.shadowed.Add(1)
	}
	return d
}

// unusable decides when the lease has run out: fail-open admits from the
// local fallback limit, fail-closed denies as Unavailable.
func (l *Limiter) unusable(t *terms, costMilli int64) (Decision, *lease.AtomicBucket) {
	if t.fallback != nil && !l.c.closed.Load() && costMilli == 0 {
		return Decision{Verdict: Verdict{Allowed: true, Reason: FallbackAllowed}, RemainingMilli: t.fallback.LevelMilli(l.c.clock.Precise())}, nil
	}
	if t.fallback != nil && !l.c.closed.Load() {
		// The precise clock, not the floored one: this path is cold, and a
		// lagging reading taken while the fallback bucket is full would
		// let it count the lag again after its first admission, g + f·(W
		// + lag) in a window instead of g + f·W.
		d := t.fallback.AllowN(l.c.clock.Precise(), costMilli)
		if d.Allowed {
			return Decision{Verdict: Verdict{Allowed: true, Reason: FallbackAllowed}, RemainingMilli: d.RemainingMilli}, t.fallback
		}
		return Decision{Verdict: Verdict{Reason: Limited}, RemainingMilli: d.RemainingMilli, RetryAfter: d.RetryAfter}, nil
	}
	out := Decision{Verdict: Verdict{Reason: Unavailable}, RetryAfter: l.c.cfg.RenewRetryMax}
	if t.win != nil && t.fallback == nil && !t.expiredAck && !l.c.closed.Load() {
		if d, ok := t.win.afterDeadline(l.c.clock.Precise()); ok {
			out = d
		}
	}
	if t.shadow {
		out.Allowed, out.Shadow = true, true
	}
	return out, nil
}

func (l *Limiter) awaitFirst(d time.Duration) {
	select {
	case <-l.first:
	default:
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-l.first:
		case <-tm.C:
		}
	}
}

// WaitN blocks until cost tokens are admitted, but only if the wait the
// lease predicts fits ctx's deadline; otherwise it fails at once with
// ErrWouldExceedDeadline. A cost above this replica's share but within the
// policy's burst waits for the share to grow (each try is retried at the
// next renewal, which asks for it); only a cost no wait can admit (above
// the policy's burst, or above MaxCost: ExceedsCapacity) fails at once, as
// does a negative cost (ErrInvalidCost); a cost of 0 waits only for a
// usable lease. At most Config.MaxWaiters callers wait per limiter.
func (l *Limiter) WaitN(ctx context.Context, cost int64) error {
	if cost < 0 {
		return fmt.Errorf("%w: %d on %s", ErrInvalidCost, cost, l.id)
	}
	if n := l.waiters.Add(1); n > int64(l.c.cfg.MaxWaiters) {
		l.waiters.Add(-1)
		return ErrTooManyWaiters
	}
	defer l.waiters.Add(-1)
	for {
		d := l.AllowN(cost)
		switch {
		case d.Allowed:
			return nil
		case d.Reason == ExceedsCapacity:
			return fmt.Errorf("ration: cost %d exceeds the capacity of %s", cost, l.id)
		case l.invalid != nil:
			return l.invalid // no wait leases this key
		}
		wait := max(d.RetryAfter, time.Millisecond)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return ErrWouldExceedDeadline
		}
		tm := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			tm.Stop()
			return ctx.Err()
		case <-tm.C:
		}
	}
}

// addSat adds v (>= 0) to a, saturating at math.MaxInt64 instead of
// wrapping: a burst of refused costs up to MaxCost each must not turn the
// offered demand negative.
func addSat(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		n := old + v
		if n < old {
			n = math.MaxInt64
		}
		if a.CompareAndSwap(old, n) {
			return
		}
	}
}

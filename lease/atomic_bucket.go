package lease

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// cacheLine is the padding unit. 128 bytes covers both the 64-byte line and
// the adjacent-line prefetcher of x86 (which pulls lines in pairs) and the
// 128-byte lines of some arm64 parts.
const cacheLine = 128

// AtomicBucket is the lock-free, allocation-free twin of TokenBucket, safe for
// concurrent use. Client replicas call it on their hot path.
//
// Time is an argument (int64 nanoseconds on any monotonic base, the same base
// for every call on one bucket, in [0, MaxTimeNanos] like every time in this
// package); the bucket never reads a clock. Unlike
// TokenBucket, no method returns an error: a time earlier than the time
// already credited (a lagging clock read, or a goroutine that read the clock
// before another one) simply mints nothing and the call is decided on the
// current level.
//
// # Design
//
// The state is four independent atomics: level (milli-tokens), last (the time
// up to which refill has been credited), rate and capacity, plus minDelta,
// which is derived from rate. Refill and admission use exactly the rules of
// TokenBucket (the shared refill and decide helpers):
//
//   - Refill. A caller whose now is after last computes, from its snapshot of
//     (level, last, rate, capacity), the new level and new last with refill:
//     the whole milli-tokens minted over now-last and the time they used up,
//     so the unminted fraction stays behind as time. It then
//     tries last.CompareAndSwap(last, newLast). Only the winner adds the
//     minted milli-tokens to level, with a CAS loop that caps at capacity.
//     The CAS on last makes the credited time segments disjoint, and each
//     segment mints at most rate*segment (mintMilli rounds down), so the
//     total minted never exceeds rate * (latest time - start). A stale level
//     in the snapshot can only make the winner mint less (the cap is applied
//     again when adding), never more. A loser retries with the new last,
//     which normally finds nothing left to mint.
//   - Full. Time spent full mints nothing. When a refill finds the bucket
//     full, or fills it, last becomes a full mark (fullMark: negative, so no
//     reading is ever at or before it) instead of a time: no time is
//     credited while the bucket is full. The take that ends the full spell
//     replaces the mark, after its CAS on level, with the time minting
//     resumes from: a reading taken after the level dropped (the precise
//     clock's, see SetPreciseClock). A time in last instead would let a
//     take whose reading lags that time skip the refill and leave the time
//     spent full since then to be minted by the next refill.
//   - minDelta = ceil(1e9 / rate) is the shortest interval that mints one
//     milli-token. When the bucket is not full and now-last < minDelta,
//     mintMilli would return 0, so the caller skips it (and its 128-bit
//     division): low rates do not recompute on every call. The shortcut is
//     exact (d >= ceil(1e9/r) iff floor(r*d/1e9) >= 1 for integer d), and it
//     is checked after the full test, so a full bucket still moves its mark to
//     now exactly as TokenBucket moves last. A second exact shortcut, fillsUp,
//     recognises with two multiplications that the elapsed time refills the
//     bucket completely (refill's result is then (capacity, now)), which is
//     the common case for high-rate buckets, so the 128-bit divisions are
//     only paid when a partial refill is really needed.
//   - Single-threaded, an AtomicBucket therefore makes the same decisions
//     (Allowed, Reason, RemainingMilli, RetryAfter) and holds the same level
//     and credited time (when not full) as a TokenBucket fed the same calls
//     (without a precise clock), including
//     SetRate, SetCapacity and Drain (after LevelMilli). A hot-path call
//     with an earlier time than one already made is decided as TokenBucket
//     decides at that latest time (only RetryAfter, measured from the
//     credited time, can differ). `rationctl simulate` relies on this, and
//     TestAtomicBucketMatchesTokenBucket checks it.
//   - Admission is a CAS loop on level: if level >= cost, CAS level to
//     level-cost. A rejected request changes nothing. A request is admitted
//     only against milli-tokens that are really in level, so concurrent use
//     never admits more than the exact TokenBucket would over the same
//     timeline; races can only make it admit slightly less (a refill whose
//     snapshot was stale, or time discarded as "full" while another
//     goroutine was charging).
//
// The fast path (tokens available, clock not past last, which a full mark
// never is) is one load of last, one load of level and one CAS on level: no
// division and no read of rate or capacity, which are only read when
// refilling or rejecting. level and last
// share a padded cache line (every call reads both); the read-mostly fields
// live on a second line, so hot-path writes never invalidate them, and the
// struct is exactly two padded lines (256 bytes, a size class the allocator
// aligns to 256), so a neighbouring object cannot share either line.
//
// SetRate and SetCapacity are the control path (lease renewals). They
// serialize among themselves with a mutex that the hot path never takes.
// Against concurrent hot-path calls, a change takes effect at some point
// during the call: a concurrent refill may credit a segment near now at the
// old rate. After SetCapacity lowers the capacity, a refill that had read the
// old capacity clamps the level again after adding, so once both calls have
// returned the level is within the new capacity.
type AtomicBucket struct {
	// Hot line: written by every admission (level) and every refill (last).
	level atomic.Int64
	last  atomic.Int64
	_     [cacheLine - 16]byte

	// Cold line: read on refill and rejection, written by the setters.
	minDelta atomic.Int64
	rate     atomic.Int64
	capacity atomic.Int64
	// credited is every milli-token ever put into level (start, refills,
	// refunds) minus every one taken out other than by admission (clamps,
	// drains), so credited - level is what admissions consumed. It is
	// written only off the admission fast path.
	credited atomic.Int64
	// refunded is every milli-token Refund was asked to give back (the
	// whole charge, even the part the capacity cut off), so credited -
	// level - refunded is a lower bound of what admissions that stood
	// consumed (the online audit, RefundedMilli).
	refunded atomic.Int64
	// precise, if set, reads a clock that never lags (see SetPreciseClock).
	precise func() int64
	// per is the rate's period (BucketConfig.PeriodNanos), fixed at creation.
	per int64
	// floor is how far below zero ChargeN may take level: the lease's
	// debt allowance (rule k, docs/design.md §4.1). 0: never below zero.
	floor atomic.Int64
	mu    sync.Mutex // serializes SetRate and SetCapacity
	_     [cacheLine - 72]byte
}

// SetPreciseClock gives the bucket a precise reading of the same clock its
// callers pass (coarsely) to AllowN. Call it before first use.
//
// Why: a coarse clock lags real time by a varying amount. Time a bucket
// spends full mints nothing, so the take that ends a full spell starts the
// minting again from its reading; if that reading lags, the time between it
// and the real moment of the take, which the bucket spent full, is minted:
// up to min(cap, rate·lag) extra in some window. Starting it at a precise
// reading taken after the take closes the gap. It costs one precise clock
// read per full spell (the take that ends it), never on the admission fast
// path of a busy bucket.
func (b *AtomicBucket) SetPreciseClock(now func() int64) { b.precise = now }

// PeriodNanos returns the period of the bucket's rate (one second unless
// BucketConfig.PeriodNanos set another), fixed at creation.
func (b *AtomicBucket) PeriodNanos() int64 { return b.per }

// ConsumedMilli returns the milli-tokens admissions have taken from the
// bucket since it was created: the client reports demand from it without
// counting on the hot path. Under concurrent use it is a close estimate.
func (b *AtomicBucket) ConsumedMilli() int64 { return b.credited.Load() - b.level.Load() }

// RefundedMilli returns the milli-tokens Refund has been asked to give
// back since the bucket was created (top-ups included). ConsumedMilli
// minus it is at most what admissions that were not undone consumed.
func (b *AtomicBucket) RefundedMilli() int64 { return b.refunded.Load() }

// NewAtomicBucket returns a bucket whose clock starts at startNanos, which
// must be in [0, MaxTimeNanos]. The hot-path methods do not check their times:
// a negative time is simply earlier than startNanos and mints nothing.
func NewAtomicBucket(cfg BucketConfig, startNanos int64) (*AtomicBucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTime(startNanos); err != nil {
		return nil, err
	}
	b := &AtomicBucket{}
	b.per = cfg.period()
	b.rate.Store(cfg.RateMilliPerSec)
	b.minDelta.Store(nanosToMintPer(cfg.RateMilliPerSec, b.per, 1))
	b.capacity.Store(cfg.CapacityMilli)
	lvl := int64(0)
	if cfg.StartFull {
		lvl = cfg.CapacityMilli
	}
	b.start(startNanos, lvl)
	return b, nil
}

// start sets a new bucket's level and credited time: a full bucket is
// marked full from startNanos (see fullMark).
func (b *AtomicBucket) start(startNanos, levelMilli int64) {
	b.level.Store(levelMilli)
	b.credited.Store(levelMilli)
	if levelMilli >= b.capacity.Load() {
		b.last.Store(fullMark(startNanos))
	} else {
		b.last.Store(startNanos)
	}
}

// AllowN charges costMilli if the bucket holds that many milli-tokens at
// nowNanos (after refill), and reports the decision as TokenBucket.Admit does.
//
// It never fails. A non-positive cost is a caller bug that the hot path
// cannot report as an error, so it is rejected as
// Decision{Reason: ReasonExceedsCapacity, RetryAfter: RetryNever} (with
// RemainingMilli 0) and changes nothing, not even the refill.
func (b *AtomicBucket) AllowN(nowNanos, costMilli int64) Decision {
	if costMilli <= 0 {
		return Decision{Reason: ReasonExceedsCapacity, RetryAfter: RetryNever}
	}
	last := b.last.Load()
	refilled := nowNanos > last || last < 0 // (a negative now is a caller's bug)
	if refilled {
		b.refillTo(nowNanos)
	}
	for {
		lvl := b.level.Load()
		if lvl < costMilli {
			return b.reject(nowNanos, lvl, costMilli)
		}
		if b.level.CompareAndSwap(lvl, lvl-costMilli) {
			if refilled {
				b.endFullSpell(nowNanos)
			}
			return Decision{Allowed: true, Reason: ReasonOK, RemainingMilli: lvl - costMilli}
		}
	}
}

// Allow reports whether one token (MilliPerToken) is admitted at nowNanos,
// charging it if so. It is AllowN(nowNanos, MilliPerToken).Allowed without
// building a Decision: the fast path is two loads and one CAS.
func (b *AtomicBucket) Allow(nowNanos int64) bool {
	last := b.last.Load()
	refilled := nowNanos > last || last < 0 // (a negative now is a caller's bug)
	if refilled {
		b.refillTo(nowNanos)
	}
	for {
		lvl := b.level.Load()
		if lvl < MilliPerToken {
			return false
		}
		if b.level.CompareAndSwap(lvl, lvl-MilliPerToken) {
			if refilled {
				b.endFullSpell(nowNanos)
			}
			return true
		}
	}
}

// reject builds the Decision for a request that the level lvl cannot cover.
// It is off the fast path, so it may read rate and capacity.
func (b *AtomicBucket) reject(nowNanos, lvl, costMilli int64) Decision {
	capm := b.capacity.Load()
	last := b.last.Load()
	if last < 0 {
		// Marked full but short (a take's endFullSpell is under way):
		// minting starts no earlier than now.
		last = max(nowNanos, fullSince(last))
	}
	// A lagging now has seen no refill; measure the wait from last.
	nowNanos = max(nowNanos, last)
	return decide(lvl, last, nowNanos, costMilli, b.rate.Load(), b.per, capm)
}

// LevelMilli returns the level at nowNanos after refill, without charging.
func (b *AtomicBucket) LevelMilli(nowNanos int64) int64 {
	if nowNanos > b.last.Load() {
		b.refillTo(nowNanos)
	}
	return b.level.Load()
}

// refillTo credits refill up to nowNanos (see the type's doc comment).
func (b *AtomicBucket) refillTo(nowNanos int64) {
	for {
		last := b.last.Load()
		if last < 0 {
			if b.settleFull(nowNanos, last) {
				return
			}
			continue
		}
		if nowNanos <= last {
			return
		}
		lvl := b.level.Load()
		capm := b.capacity.Load()
		newLvl, newLast := capm, fullMark(nowNanos) // full, or fills up: time spent full mints nothing
		if lvl < capm {
			elapsed := nowNanos - last
			if elapsed < b.minDelta.Load() {
				return // exact shortcut: mintMilli would mint 0
			}
			if rate := b.rate.Load(); !fillsUp(rate, b.per, elapsed, capm-lvl) {
				newLvl, newLast = refill(lvl, last, nowNanos, rate, b.per, capm)
				if newLast == nowNanos && newLvl >= capm {
					newLast = fullMark(nowNanos)
				}
			}
		} else {
			newLvl = lvl
		}
		if newLast == last {
			return // nothing minted (rate changed under us, or rate 0)
		}
		if b.last.CompareAndSwap(last, newLast) {
			if newLvl > lvl {
				b.addMinted(newLvl-lvl, nowNanos)
			}
			return
		}
		// Another caller credited (part of) this segment; retry from its last.
	}
}

// A full bucket's last holds a mark instead of a time: fullMark(t), a
// negative number, says the bucket is full, was last seen full at t, and
// has no credited time pending (time spent full mints nothing). Every time
// is >= 0, so no reading is <= a mark: TryTakeN's fast path declines and
// every other call goes through refillTo. The take that ends a full spell
// (endFullSpell), or the first refill to see the level below the capacity
// (settleFull), replaces the mark with the time minting resumes from: a
// precise reading taken after it saw the level drop, if the bucket has a
// precise clock, else the caller's reading (never before t). A full spell
// therefore ends at a reading taken no earlier than the take that ended
// it, however far the taker's own (coarse) reading lags: marking the start
// of the spell with a time instead, as an earlier version did, left every
// take whose lagging reading was not after that time to skip the refill,
// and the next refill minted the time the bucket had spent full since.
func fullMark(t int64) int64 { return -1 - t }

// fullSince returns the t of a mark fullMark(t).
func fullSince(mark int64) int64 { return -1 - mark }

// settleFull handles a marked last (mark < 0) for a caller at nowNanos:
// still full, it moves the mark to nowNanos if later (as TokenBucket moves
// last to now when full); no longer full, it replaces the mark with the
// time minting resumes from. It reports false if a concurrent change of
// last got there first (the caller then looks again).
func (b *AtomicBucket) settleFull(nowNanos, mark int64) bool {
	since := fullSince(mark)
	if b.level.Load() >= b.capacity.Load() {
		return nowNanos <= since || b.last.CompareAndSwap(mark, fullMark(nowNanos))
	}
	return b.last.CompareAndSwap(mark, b.resumeAt(max(nowNanos, since)))
}

// resumeAt is when minting resumes after a full spell that a caller at t
// saw end: t, or the precise clock's reading if later.
func (b *AtomicBucket) resumeAt(t int64) int64 {
	if b.precise != nil {
		t = max(t, b.precise())
	}
	return t
}

// endFullSpell is called after a take that refilled: if the bucket was
// marked full, the take ended the spell and minting resumes now.
func (b *AtomicBucket) endFullSpell(nowNanos int64) {
	if mark := b.last.Load(); mark < 0 {
		b.settleFull(nowNanos, mark)
	}
}

// markFull marks the bucket full (fullMark of its credited time, or of
// nowNanos if later) if its level is at the capacity and last is a time.
// Whatever filled it (a refill racing with a refund, a refund, a clamp)
// is then no longer followed by takes that skip the refill.
func (b *AtomicBucket) markFull(nowNanos int64) {
	for {
		last := b.last.Load()
		if last < 0 || b.level.Load() < b.capacity.Load() {
			return
		}
		if b.last.CompareAndSwap(last, fullMark(max(last, nowNanos))) {
			return
		}
	}
}

// fillsUp reports whether rate (per periodNanos) mints at least
// deficitMilli (> 0) over elapsedNanos (> 0), i.e. whether mintMilliPer's
// result would reach it, without its two 128-bit divisions:
// floor(r*e/p) >= k iff r*e >= k*p.
// Refill's result is then simply (capacity, now). A high-rate bucket refills
// to full between most calls, so this keeps the divisions off that path.
func fillsUp(rateMilliPerSec, periodNanos, elapsedNanos, deficitMilli int64) bool {
	mh, ml := bits.Mul64(uint64(rateMilliPerSec), uint64(elapsedNanos))
	nh, nl := bits.Mul64(uint64(deficitMilli), uint64(periodNanos))
	return mh > nh || (mh == nh && ml >= nl)
}

// addMinted adds minted milli-tokens to level, capped at capacity, for a
// refill at nowNanos. Only the caller that won the CAS on last for the
// segment that minted them calls it.
func (b *AtomicBucket) addMinted(minted, nowNanos int64) {
	var capm int64
	for {
		lvl := b.level.Load()
		capm = b.capacity.Load()
		newLvl := min(capm, lvl+minted)
		if newLvl <= lvl {
			return // already at or above the capacity
		}
		if b.level.CompareAndSwap(lvl, newLvl) {
			b.credited.Add(newLvl - lvl)
			if newLvl == capm {
				// Filled up: normally last is marked already; a partial
				// refill that a concurrent refund topped up is not.
				b.markFull(nowNanos)
			}
			break
		}
	}
	// SetCapacity stores the capacity, then clamps. If it lowered the
	// capacity after we read it, either we see the new value here and clamp,
	// or our CAS preceded its store and its clamp sees our addition.
	if c := b.capacity.Load(); c < capm {
		b.clampLevel(c)
		b.markFull(nowNanos)
	}
}

// clampLevel lowers level to capm if it is above, and returns what it
// took off.
func (b *AtomicBucket) clampLevel(capm int64) int64 {
	for {
		lvl := b.level.Load()
		if lvl <= capm {
			return 0
		}
		if b.level.CompareAndSwap(lvl, capm) {
			b.credited.Add(capm - lvl)
			return lvl - capm
		}
	}
}

// SetRate switches the refill rate at nowNanos, for lease renewals, exactly
// as TokenBucket.SetRate does: time up to nowNanos is credited at the old
// rate first; if the rate changes, the fraction of a milli-token the old rate
// had not yet minted by nowNanos is dropped (it accrued at the old rate, and
// the new rate, possibly faster, must not mint it). If nowNanos is not after
// the time already credited (the renewal's clock reading lags a hot-path
// one), the new rate applies from the time already credited. The rate is
// clamped to [0, MaxRateMilliPerSec] where TokenBucket would return an error.
func (b *AtomicBucket) SetRate(nowNanos, rateMilliPerSec int64) {
	rateMilliPerSec = min(max(rateMilliPerSec, 0), MaxRateMilliPerSec)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillTo(nowNanos) // at the old rate; a full bucket stays marked full
	if rateMilliPerSec == b.rate.Load() {
		return // nothing changes: keep the fraction
	}
	// Drop the fraction the old rate has not minted by nowNanos (a marked
	// bucket has none).
	for {
		last := b.last.Load()
		if last < 0 || nowNanos <= last || b.last.CompareAndSwap(last, nowNanos) {
			break
		}
	}
	// A hot-path reader may see the new rate with the old minDelta for a
	// moment; a stale minDelta only delays a mint or costs a useless
	// mintMilli, it never loses or over-mints tokens.
	b.rate.Store(rateMilliPerSec)
	b.minDelta.Store(nanosToMintPer(rateMilliPerSec, b.per, 1))
}

// SetCapacity changes the capacity at nowNanos, as TokenBucket.SetCapacity
// does. Refill up to nowNanos is credited under the old capacity first (so
// time spent full before nowNanos stays unminted). Lowering the capacity
// clamps the level down to it; raising it never adds tokens, the bucket then
// refills at its rate. The capacity is clamped to [0, MaxCapacityMilli] where
// TokenBucket would return an error. It returns what the clamp took off
// (a renewal reports it, rule i); a concurrent refill that read the old
// capacity and clamps again after it is not counted, so the figure never
// exceeds what the bucket really lost.
func (b *AtomicBucket) SetCapacity(nowNanos, capMilli int64) (clampedMilli int64) {
	capMilli = min(max(capMilli, 0), MaxCapacityMilli)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillTo(nowNanos)
	b.capacity.Store(capMilli)
	clampedMilli = b.clampLevel(capMilli)
	// If the clamp left the bucket full, the pending fraction is void (time
	// spent full mints nothing): mark it full now rather than at the next
	// call, which may carry an older clock reading. If a raise ended a full
	// spell, minting resumes from nowNanos. TokenBucket does the same at its
	// next call, so decisions stay identical.
	b.refillTo(nowNanos)
	b.markFull(nowNanos)
	return clampedMilli
}

// Drain atomically takes every milli-token (the level becomes 0) and returns
// how many there were. It takes no time argument and credits no refill: call
// LevelMilli(now) first to include refill up to now. Refill continues
// afterwards from the time already credited; to stop it (releasing a lease),
// SetRate(now, 0) before draining.
func (b *AtomicBucket) Drain() int64 {
	n := b.level.Swap(0)
	b.credited.Add(-n)
	if mark := b.last.Load(); mark < 0 {
		// It ended a full spell: minting resumes from the time it was
		// last seen full (LevelMilli's now), or the precise clock's now.
		b.settleFull(fullSince(mark), mark)
	}
	return n
}

// NewAtomicBucketWithLevel returns a bucket that starts at levelMilli
// (clamped to [0, capacity]): a client's bucket for a new lease starts with
// the tokens the coordinator debited from its pool.
func NewAtomicBucketWithLevel(cfg BucketConfig, startNanos, levelMilli int64) (*AtomicBucket, error) {
	b, err := NewAtomicBucket(cfg, startNanos)
	if err != nil {
		return nil, err
	}
	b.start(startNanos, max(0, min(levelMilli, cfg.CapacityMilli)))
	return b, nil
}

// Refund gives back costMilli that an AllowN charged (a later layer of an
// all-or-nothing check refused), never above the capacity.
func (b *AtomicBucket) Refund(costMilli int64) {
	if costMilli <= 0 {
		return
	}
	b.refunded.Add(costMilli)
	for {
		cur := b.level.Load()
		next := min(b.capacity.Load(), satAdd(cur, costMilli))
		if next <= cur {
			return
		}
		if b.level.CompareAndSwap(cur, next) {
			b.credited.Add(next - cur)
			if next == b.capacity.Load() {
				b.markFull(0) // full again: from its credited time
			}
			return
		}
	}
}

// TakeN is AllowN's fast path without the Decision: it charges costMilli if
// the bucket holds it at nowNanos and reports the level left. A false ok
// charged nothing; call AllowN for the full decision (reason, retry-after).
func (b *AtomicBucket) TakeN(nowNanos, costMilli int64) (remainingMilli int64, ok bool) {
	last := b.last.Load()
	refilled := nowNanos > last || last < 0 // (a negative now is a caller's bug)
	if refilled {
		b.refillTo(nowNanos)
	}
	for {
		lvl := b.level.Load()
		if lvl < costMilli || costMilli <= 0 {
			return lvl, false
		}
		if b.level.CompareAndSwap(lvl, lvl-costMilli) {
			if refilled {
				b.endFullSpell(nowNanos)
			}
			return lvl - costMilli, true
		}
	}
}

// TryTakeN is TakeN's common case alone, small enough for the compiler to
// inline into a caller's fast path: when nowNanos mints nothing (it is not
// after the time already credited; a full bucket's mark never passes, so
// the take that ends a full spell goes through TakeN) and the level covers costMilli, it
// charges it with two loads and one CAS and returns the level left. In any
// other case (a refill is due, the level is short, a concurrent CAS won, a
// non-positive cost) it charges nothing and returns ok false: the caller
// then decides with TakeN or AllowN, which refill.
func (b *AtomicBucket) TryTakeN(nowNanos, costMilli int64) (remainingMilli int64, ok bool) {
	lvl := b.level.Load()
	if nowNanos <= b.last.Load() && lvl >= costMilli && costMilli > 0 && b.level.CompareAndSwap(lvl, lvl-costMilli) {
		return lvl - costMilli, true
	}
	return 0, false
}

// SetDebtAllowance sets how far below zero ChargeN may take the level
// (the lease's debt allowance, rule k), and lifts a level below the new
// floor up to it, returning the debt it lifted: the caller reports it to
// the cluster with the renewal acknowledging the allowance, which moves
// it into the key's debt (it is owed, not forgiven).
func (b *AtomicBucket) SetDebtAllowance(allowanceMilli int64) (liftedMilli int64) {
	floor := min(max(allowanceMilli, 0), MaxCapacityMilli)
	b.floor.Store(floor)
	for {
		lvl := b.level.Load()
		if lvl >= -floor {
			return 0
		}
		if b.level.CompareAndSwap(lvl, -floor) {
			b.credited.Add(-floor - lvl)
			return -floor - lvl
		}
	}
}

// DebtAllowanceMilli returns the bucket's debt allowance (SetDebtAllowance).
func (b *AtomicBucket) DebtAllowanceMilli() int64 { return b.floor.Load() }

// ChargeN records costMilli spent after the fact at nowNanos (after
// refill): it is never refused. What the level covers is taken from it;
// what it lacks takes the level below zero, down to minus the debt
// allowance at most; the rest, excessMilli, is beyond the allowance (the
// bound's debt term does not cover it: the caller reports it). A level in
// debt admits nothing (AllowN needs level >= cost) and is paid by the
// rate first. A non-positive cost charges nothing.
func (b *AtomicBucket) ChargeN(nowNanos, costMilli int64) (levelMilli, excessMilli int64) {
	last := b.last.Load()
	refilled := nowNanos > last || last < 0
	if refilled {
		b.refillTo(nowNanos)
	}
	if costMilli <= 0 {
		return b.level.Load(), 0
	}
	for {
		lvl := b.level.Load()
		floor := -b.floor.Load()
		want := lvl - min(costMilli, 1<<61) // |lvl| <= 2^50: no overflow
		next := max(want, min(lvl, floor))
		if b.level.CompareAndSwap(lvl, next) {
			if refilled {
				b.endFullSpell(nowNanos)
			}
			return next, costMilli - (lvl - next)
		}
	}
}

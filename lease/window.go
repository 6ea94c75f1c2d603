package lease

import (
	"fmt"
	"time"
)

// WindowConfig configures the window limiters.
type WindowConfig struct {
	LimitMilli  int64 // units admitted per window, in milli-units (1 unit = 1000)
	WindowNanos int64 // window length, > 0
}

// Validate reports a configuration outside the supported ranges.
func (c WindowConfig) Validate() error {
	if c.LimitMilli < 0 || c.LimitMilli > MaxCapacityMilli {
		return fmt.Errorf("%w: limit %d milli-units is outside [0, %d]", ErrInvalidConfig, c.LimitMilli, MaxCapacityMilli)
	}
	if c.WindowNanos <= 0 {
		return fmt.Errorf("%w: window %d ns must be positive", ErrInvalidConfig, c.WindowNanos)
	}
	return nil
}

// Compile-time checks that every window limiter is a Limiter.
var (
	_ Limiter = (*FixedWindow)(nil)
	_ Limiter = (*SlidingWindow)(nil)
	_ Limiter = (*ApproxSlidingWindow)(nil)
)

// windowClock is the backwards-time guard shared by the window limiters.
// There is no start time in the constructors: the first call's time, whatever
// its base, becomes the first seen time, so a limiter created long before its
// first use does not treat the idle gap as history.
type windowClock struct {
	seenNanos int64
	started   bool
}

// check validates nowNanos without recording it, so that a call that fails
// for any reason leaves the limiter untouched.
func (c *windowClock) check(nowNanos int64) error {
	// Negative times are refused because time zero is the alignment origin
	// of the fixed windows and the sliding arithmetic relies on now-t not
	// overflowing, which holds when both are non-negative.
	if nowNanos < 0 {
		return fmt.Errorf("%w: %d ns is before the time origin 0", ErrTimeBackwards, nowNanos)
	}
	if c.started && nowNanos < c.seenNanos {
		return fmt.Errorf("%w: %d ns is before %d ns", ErrTimeBackwards, nowNanos, c.seenNanos)
	}
	return nil
}

func (c *windowClock) observe(nowNanos int64) {
	c.seenNanos = nowNanos
	c.started = true
}

// validateCall applies the argument checks every Admit and Refund share, in
// the same order as TokenBucket: cost first, then time.
func validateCall(c *windowClock, nowNanos, costMilli int64) error {
	if costMilli <= 0 {
		return fmt.Errorf("%w: got %d", ErrInvalidCost, costMilli)
	}
	return c.check(nowNanos)
}

// FixedWindow admits at most LimitMilli per window, with windows aligned to
// multiples of WindowNanos from time zero: the window of time t is
// t / WindowNanos. It is not safe for concurrent use.
//
// It is the cheapest window limiter but also the loosest: a burst of
// LimitMilli at the last nanosecond of one window and another at the first
// nanosecond of the next admits 2*LimitMilli within two nanoseconds.
type FixedWindow struct {
	cfg       WindowConfig
	clock     windowClock
	windowIdx int64
	usedMilli int64
}

// NewFixedWindow returns an empty fixed-window limiter.
func NewFixedWindow(cfg WindowConfig) (*FixedWindow, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &FixedWindow{cfg: cfg}, nil
}

// Config returns the limiter's parameters.
func (f *FixedWindow) Config() WindowConfig { return f.cfg }

// advance moves to nowNanos, which the caller has already checked.
func (f *FixedWindow) advance(nowNanos int64) {
	f.clock.observe(nowNanos)
	if idx := nowNanos / f.cfg.WindowNanos; idx != f.windowIdx {
		f.windowIdx = idx
		f.usedMilli = 0
	}
}

// Admit implements Limiter. A rejected request waits until the next window
// starts, when the used budget resets.
func (f *FixedWindow) Admit(nowNanos, costMilli int64) (Decision, error) {
	if err := validateCall(&f.clock, nowNanos, costMilli); err != nil {
		return Decision{}, err
	}
	f.advance(nowNanos)
	limit := f.cfg.LimitMilli
	if costMilli > limit {
		return Decision{Reason: ReasonExceedsCapacity, RemainingMilli: limit - f.usedMilli, RetryAfter: RetryNever}, nil
	}
	if f.usedMilli <= limit-costMilli {
		f.usedMilli += costMilli
		return Decision{Allowed: true, Reason: ReasonOK, RemainingMilli: limit - f.usedMilli}, nil
	}
	// W - now%W rather than (idx+1)*W - now: the latter overflows in the
	// last window before math.MaxInt64.
	wait := f.cfg.WindowNanos - nowNanos%f.cfg.WindowNanos
	return Decision{Reason: ReasonLimit, RemainingMilli: limit - f.usedMilli, RetryAfter: time.Duration(wait)}, nil
}

// Refund implements Limiter. The used budget never drops below zero.
func (f *FixedWindow) Refund(nowNanos, costMilli int64) error {
	if err := validateCall(&f.clock, nowNanos, costMilli); err != nil {
		return err
	}
	f.advance(nowNanos)
	f.usedMilli = max(0, f.usedMilli-costMilli)
	return nil
}

// slidingEntry is the admitted cost at one instant, stored as a running total
// so that the cost of any run of entries is a difference of two totals.
type slidingEntry struct {
	nanos int64
	// cumMilli is the total admitted through this entry since the limiter
	// was created, modulo 2^64. Only differences are used, and those are
	// bounded by LimitMilli, so wrapping after centuries of traffic is
	// harmless.
	cumMilli uint64
}

// slidingMinCap is the smallest ring allocated; it avoids reallocating on
// every one of the first few admissions.
const slidingMinCap = 8

// SlidingWindow is the exact sliding-window limiter: the units admitted in
// (now - WindowNanos, now] never exceed LimitMilli. An admission at time t
// stops counting at t + WindowNanos. It is not safe for concurrent use.
//
// It keeps one entry per distinct admission time still in the window
// (admissions at the same time are coalesced), in a ring buffer that grows
// and shrinks with the window's contents, so memory is O(entries in the
// window), dropping expired entries is amortised O(1), and the retry time of
// a rejection is found by binary search in O(log entries).
type SlidingWindow struct {
	cfg   WindowConfig
	clock windowClock
	// ring[head], ..., ring[head+n-1] (mod len(ring)) are the entries in the
	// window, oldest first.
	ring []slidingEntry
	head int
	n    int
	// baseCumMilli is the running total just before ring[head], i.e. of
	// everything that has already left the window.
	baseCumMilli uint64
}

// NewSlidingWindow returns an empty exact sliding-window limiter.
func NewSlidingWindow(cfg WindowConfig) (*SlidingWindow, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &SlidingWindow{cfg: cfg}, nil
}

// Config returns the limiter's parameters.
func (s *SlidingWindow) Config() WindowConfig { return s.cfg }

// at returns the i-th entry in the window, oldest first.
func (s *SlidingWindow) at(i int) *slidingEntry {
	j := s.head + i
	if j >= len(s.ring) {
		j -= len(s.ring)
	}
	return &s.ring[j]
}

// tailCum is the running total through the newest entry.
func (s *SlidingWindow) tailCum() uint64 {
	if s.n == 0 {
		return s.baseCumMilli
	}
	return s.at(s.n - 1).cumMilli
}

// usedMilli is the total admitted in the window.
func (s *SlidingWindow) usedMilli() int64 { return int64(s.tailCum() - s.baseCumMilli) }

// resize moves the entries to a ring of capacity c >= n, oldest at index 0.
func (s *SlidingWindow) resize(c int) {
	ring := make([]slidingEntry, c)
	for i := range s.n {
		ring[i] = *s.at(i)
	}
	s.ring, s.head = ring, 0
}

// expire drops the entries that have left the window at nowNanos, which the
// caller has already checked.
func (s *SlidingWindow) expire(nowNanos int64) {
	s.clock.observe(nowNanos)
	// now - t cannot overflow: 0 <= t <= now.
	for s.n > 0 && nowNanos-s.at(0).nanos >= s.cfg.WindowNanos {
		s.baseCumMilli = s.at(0).cumMilli
		s.head++
		if s.head == len(s.ring) {
			s.head = 0
		}
		s.n--
	}
	// Shrink once the ring is at most a quarter full, so that a burst does
	// not pin its memory forever; the factor-four hysteresis keeps grow and
	// shrink from alternating, which keeps both amortised O(1).
	if c := len(s.ring); c > slidingMinCap && s.n <= c/4 {
		for c > slidingMinCap && s.n <= c/4 {
			c /= 2
		}
		s.resize(c)
	}
}

// push records costMilli admitted at nowNanos.
func (s *SlidingWindow) push(nowNanos, costMilli int64) {
	if s.n > 0 {
		if last := s.at(s.n - 1); last.nanos == nowNanos {
			last.cumMilli += uint64(costMilli)
			return
		}
	}
	cum := s.tailCum() + uint64(costMilli)
	if s.n == len(s.ring) {
		s.resize(max(slidingMinCap, 2*len(s.ring)))
	}
	s.n++
	*s.at(s.n - 1) = slidingEntry{nanos: nowNanos, cumMilli: cum}
}

// Admit implements Limiter. A rejected request's RetryAfter is the exact
// time until enough of the oldest entries have left the window for the cost
// to fit.
func (s *SlidingWindow) Admit(nowNanos, costMilli int64) (Decision, error) {
	if err := validateCall(&s.clock, nowNanos, costMilli); err != nil {
		return Decision{}, err
	}
	s.expire(nowNanos)
	limit, used := s.cfg.LimitMilli, s.usedMilli()
	if costMilli > limit {
		return Decision{Reason: ReasonExceedsCapacity, RemainingMilli: limit - used, RetryAfter: RetryNever}, nil
	}
	if used <= limit-costMilli {
		s.push(nowNanos, costMilli)
		return Decision{Allowed: true, Reason: ReasonOK, RemainingMilli: limit - used - costMilli}, nil
	}
	// The oldest entries must free need; find the first entry whose running
	// total from the window start reaches it. It exists because need <= used
	// (costMilli <= limit), and running totals grow with age order.
	need := uint64(used - (limit - costMilli))
	lo, hi := 0, s.n-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.at(mid).cumMilli-s.baseCumMilli >= need {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	// That entry leaves at t + W; W - (now - t) avoids overflowing t + W.
	wait := s.cfg.WindowNanos - (nowNanos - s.at(lo).nanos)
	return Decision{Reason: ReasonLimit, RemainingMilli: limit - used, RetryAfter: time.Duration(wait)}, nil
}

// Refund implements Limiter. It takes the cost off the newest entry, which
// is the one the preceding Admit at the same time charged; it never takes
// more than that entry holds, and an emptied entry is dropped.
func (s *SlidingWindow) Refund(nowNanos, costMilli int64) error {
	if err := validateCall(&s.clock, nowNanos, costMilli); err != nil {
		return err
	}
	s.expire(nowNanos)
	if s.n == 0 {
		return nil
	}
	prev := s.baseCumMilli
	if s.n > 1 {
		prev = s.at(s.n - 2).cumMilli
	}
	last := s.at(s.n - 1)
	if uint64(costMilli) >= last.cumMilli-prev {
		s.n--
		return nil
	}
	last.cumMilli -= uint64(costMilli)
	return nil
}

// ApproxSlidingWindow approximates the sliding window with two counters in
// O(1) memory: prev, the units admitted in the previous aligned window, and
// curr, those in the current one (windows aligned as in FixedWindow). With
// e = now mod W, it assumes prev was spread evenly and estimates the units
// in (now - W, now] as
//
//	estimate = curr + ceil(prev * (W - e) / W)
//
// (exact 128-bit integer arithmetic) and admits a cost iff
// estimate + cost <= L. It is not safe for concurrent use.
//
// Worst-case error. Over-admission: the exact count in any sliding window
// (t - W, t] is at most L + floor(L*(W-2)/W) for W >= 2 (which is < 2L) and
// L for W = 1. Proof: let t lie at offset e of window k and P be window k-1's
// total. The window (t - W, t] holds the part of P after offset e, which is
// at most P and is empty when e = W-1, plus window k's admissions up to e,
// which the rule caps at L - ceil(P*(W-e)/W) (the cap only shrinks as e
// grows). So the count is at most P + L - ceil(P*(W-e)/W) = L + floor(P*e/W)
// <= L + floor(L*(W-2)/W) when e <= W-2, and at most L when e = W-1. The
// bound is reached by L admitted at the last nanosecond of one window and
// floor(L*(W-2)/W) more at offset W-2 of the next.
//
// Under-admission: it can also reject what the exact window would admit,
// because traffic early in the previous window is still charged in part
// after it has left the exact window; L admitted at the first nanosecond of
// one window has left the exact window one window later, yet at the next
// boundary the estimate is still L and admits nothing.
type ApproxSlidingWindow struct {
	cfg       WindowConfig
	clock     windowClock
	windowIdx int64
	prevMilli int64
	currMilli int64
}

// NewApproxSlidingWindow returns an empty approximate sliding-window limiter.
func NewApproxSlidingWindow(cfg WindowConfig) (*ApproxSlidingWindow, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &ApproxSlidingWindow{cfg: cfg}, nil
}

// Config returns the limiter's parameters.
func (a *ApproxSlidingWindow) Config() WindowConfig { return a.cfg }

// advance rolls the counters to the window of nowNanos, which the caller has
// already checked.
func (a *ApproxSlidingWindow) advance(nowNanos int64) {
	// The first call sets the window without rolling, so that the windows
	// before it count as empty whatever the time base.
	first := !a.clock.started
	a.clock.observe(nowNanos)
	idx := nowNanos / a.cfg.WindowNanos
	switch {
	case first || idx == a.windowIdx:
	case idx == a.windowIdx+1:
		a.prevMilli, a.currMilli = a.currMilli, 0
	default:
		// A whole window passed with no calls: both counters are stale.
		a.prevMilli, a.currMilli = 0, 0
	}
	a.windowIdx = idx
}

// estimate is the approximate count in (now - W, now] at offset e of the
// current window. It never exceeds L: it was at most L after every admission
// and does not grow with time (see retryAfter).
func (a *ApproxSlidingWindow) estimate(e int64) int64 {
	w := a.cfg.WindowNanos
	return a.currMilli + ceilMulDiv(a.prevMilli, w-e, w)
}

// Admit implements Limiter. A rejected request's RetryAfter is exact: the
// estimate never grows with time when nothing is charged, so the first
// instant at which the cost fits is found in closed form.
func (a *ApproxSlidingWindow) Admit(nowNanos, costMilli int64) (Decision, error) {
	if err := validateCall(&a.clock, nowNanos, costMilli); err != nil {
		return Decision{}, err
	}
	a.advance(nowNanos)
	limit := a.cfg.LimitMilli
	e := nowNanos % a.cfg.WindowNanos
	est := a.estimate(e)
	remaining := max(0, limit-est)
	if costMilli > limit {
		return Decision{Reason: ReasonExceedsCapacity, RemainingMilli: remaining, RetryAfter: RetryNever}, nil
	}
	if est <= limit-costMilli {
		a.currMilli += costMilli
		return Decision{Allowed: true, Reason: ReasonOK, RemainingMilli: remaining - costMilli}, nil
	}
	return Decision{Reason: ReasonLimit, RemainingMilli: remaining, RetryAfter: a.retryAfter(e, costMilli)}, nil
}

// retryAfter returns the smallest wait after which costMilli fits, given it
// does not fit now at offset e and nothing else is charged meanwhile.
//
// With nothing charged the estimate never grows: within a window only the
// decaying prev term moves, and at a boundary the estimate becomes the old
// curr (at offset 0 the new prev term is the whole old curr), which is at
// most the old estimate. So the answer is the first time the cost fits,
// searched window by window; by the second boundary both counters are zero.
//
// ceil(p*(W-x)/W) <= room iff p*(W-x) <= room*W iff x >= W - floor(room*W/p)
// for an integer room >= 0, which gives the first fitting offset x.
func (a *ApproxSlidingWindow) retryAfter(e, costMilli int64) time.Duration {
	w, limit := a.cfg.WindowNanos, a.cfg.LimitMilli
	// Later in the current window, if curr alone leaves room. Here room < prev
	// (else it would fit now), so MulDiv is below W and x is in (e, W].
	if room := limit - costMilli - a.currMilli; room >= 0 && a.prevMilli > 0 {
		if x := w - MulDiv(room, w, a.prevMilli); x < w {
			return time.Duration(x - e)
		}
	}
	// In the next window curr becomes prev and the new curr is zero. Waits
	// that do not fit in int64 (windows over ~146 years) saturate at
	// RetryNever.
	toNext := w - e
	room := limit - costMilli // >= 0: costMilli <= limit was checked.
	if a.currMilli <= room {
		return time.Duration(toNext)
	}
	if x := w - MulDiv(room, w, a.currMilli); x < w {
		return time.Duration(satAdd(toNext, x))
	}
	// room == 0: the cost is the whole limit, which fits only once both
	// counters are zero, at the start of the window after next.
	return time.Duration(satAdd(toNext, w))
}

// Refund implements Limiter. The current count never drops below zero.
func (a *ApproxSlidingWindow) Refund(nowNanos, costMilli int64) error {
	if err := validateCall(&a.clock, nowNanos, costMilli); err != nil {
		return err
	}
	a.advance(nowNanos)
	a.currMilli = max(0, a.currMilli-costMilli)
	return nil
}

package lease

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// MilliPerToken is the number of milli-tokens in one token. Every token
// quantity in this package is an int64 count of milli-tokens, so fractional
// rates such as 0.5 tokens/s are exact integers (500 milli-tokens/s).
const MilliPerToken = 1000

// NanosPerSecond converts rates (per second) to the nanosecond time base.
const NanosPerSecond = int64(time.Second)

// Limits on parameters. Within them no arithmetic in this package overflows:
// products that can exceed int64 are computed in 128 bits (math/bits) and
// saturate instead of wrapping.
const (
	// MaxRateMilliPerSec is 10^9 tokens per second.
	MaxRateMilliPerSec = int64(1e9) * MilliPerToken
	// MaxCapacityMilli is 10^12 tokens.
	MaxCapacityMilli = int64(1e12) * MilliPerToken
)

// maxPeriodNanos bounds a rate's period (BucketConfig.PeriodNanos,
// LedgerConfig.RatePeriodNanos): two days, room for a rate per day
// stretched by the largest drift factor.
const maxPeriodNanos = 2 * 24 * 3600 * NanosPerSecond

// MaxTimeNanos is the latest time any call may pass: far beyond any real
// clock (about 290 years), and low enough that time + MaxTTLNanos and
// differences of valid times never overflow. Times are never negative.
const MaxTimeNanos = int64(math.MaxInt64) - 2*MaxTTLNanos

// ErrTimeOutOfRange is returned for a time outside [0, MaxTimeNanos].
var ErrTimeOutOfRange = errors.New("lease: time out of range")

func checkTime(t int64) error {
	if t < 0 || t > MaxTimeNanos {
		return fmt.Errorf("%w: %d ns is outside [0, %d]", ErrTimeOutOfRange, t, MaxTimeNanos)
	}
	return nil
}

// RetryNever is the RetryAfter of a request that waiting cannot admit: its
// cost exceeds the capacity, or the refill rate is zero.
const RetryNever = time.Duration(math.MaxInt64)

// Sentinel errors. They describe misuse (bad arguments), never a business
// outcome: a rejected request is a Decision, not an error.
var (
	// ErrTimeBackwards is returned when a call's time is earlier than the
	// time of a previous call on the same object. State is left unchanged.
	ErrTimeBackwards = errors.New("lease: time went backwards")
	// ErrInvalidCost is returned for a cost that is not positive.
	ErrInvalidCost = errors.New("lease: cost must be positive")
	// ErrInvalidConfig wraps every parameter validation failure.
	ErrInvalidConfig = errors.New("lease: invalid configuration")
)

// Reason says why a Decision came out the way it did.
type Reason uint8

const (
	// ReasonOK: the request was admitted.
	ReasonOK Reason = iota
	// ReasonLimit: not enough budget now; retrying after RetryAfter may succeed.
	ReasonLimit
	// ReasonExceedsCapacity: the cost is larger than the limiter can ever
	// hold, so no amount of waiting admits it.
	ReasonExceedsCapacity
)

// String returns the stable, lower-case name used in CLI output and APIs.
func (r Reason) String() string {
	switch r {
	case ReasonOK:
		return "ok"
	case ReasonLimit:
		return "limit"
	case ReasonExceedsCapacity:
		return "exceeds-capacity"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Decision is the outcome of one admission check.
type Decision struct {
	// Allowed reports whether the cost was admitted (and charged).
	Allowed bool
	// Reason is ReasonOK iff Allowed.
	Reason Reason
	// RemainingMilli is the budget left after this decision, in milli-units.
	RemainingMilli int64
	// RetryAfter is zero when Allowed; the earliest wait after which the same
	// request would be admitted if nothing else were charged; or RetryNever.
	RetryAfter time.Duration
}

// Limiter is the common surface of every single-key limiter in this package.
// Time is always an argument (nanoseconds on any monotonic base); a call with
// an earlier time than the last one fails with ErrTimeBackwards and changes
// nothing.
type Limiter interface {
	// Admit charges costMilli if the budget allows it at nowNanos.
	Admit(nowNanos, costMilli int64) (Decision, error)
	// Refund gives back costMilli that the immediately preceding Admit at
	// the same nowNanos charged. It is how a chain of limiters undoes the
	// charges of earlier links when a later one rejects.
	Refund(nowNanos, costMilli int64) error
}

// mintMilli returns how many whole milli-tokens a rate mints over elapsedNanos
// and how much of that time those whole milli-tokens used up. The caller
// advances its clock by usedNanos, not elapsedNanos, so the fraction of a
// milli-token not yet minted is carried forward as time and never lost
// (beyond at most 1 ns of rounding per call, always toward fewer tokens).
//
// The result saturates at math.MaxInt64 milli-tokens; callers cap it.
func mintMilli(rateMilliPerSec, elapsedNanos int64) (mintedMilli, usedNanos int64) {
	return mintMilliPer(rateMilliPerSec, NanosPerSecond, elapsedNanos)
}

// mintMilliPer is mintMilli for a rate of rateMilli milli-tokens per
// periodNanos (> 0) nanoseconds: floor(rate·elapsed/period) whole
// milli-tokens, and the time they used, ceil(minted·period/rate). A period
// other than one second expresses rates below one milli-token per second
// exactly (1 token a minute is 1000 per 60e9 ns), and a drift factor
// applied to time instead of to the rate: r_i per (1+ρ) seconds mints
// exactly r_i/(1+ρ) per second, with no rounding of the rate.
func mintMilliPer(rateMilli, periodNanos, elapsedNanos int64) (mintedMilli, usedNanos int64) {
	if rateMilli <= 0 || elapsedNanos <= 0 || periodNanos <= 0 {
		return 0, 0
	}
	hi, lo := bits.Mul64(uint64(rateMilli), uint64(elapsedNanos))
	if hi >= uint64(periodNanos) {
		return math.MaxInt64, elapsedNanos
	}
	q, _ := bits.Div64(hi, lo, uint64(periodNanos))
	if q > math.MaxInt64 {
		return math.MaxInt64, elapsedNanos
	}
	minted := int64(q)
	if minted == 0 {
		return 0, 0
	}
	return minted, nanosToMintPer(rateMilli, periodNanos, minted)
}

// nanosToMint returns the shortest time in which rateMilliPerSec mints at
// least amountMilli: ceil(amountMilli * 1e9 / rate). It returns RetryNever's
// nanoseconds when the rate is zero or the time does not fit in int64.
func nanosToMint(rateMilliPerSec, amountMilli int64) int64 {
	return nanosToMintPer(rateMilliPerSec, NanosPerSecond, amountMilli)
}

// nanosToMintPer is nanosToMint for a rate of rateMilli per periodNanos:
// ceil(amount·period/rate).
func nanosToMintPer(rateMilli, periodNanos, amountMilli int64) int64 {
	if amountMilli <= 0 {
		return 0
	}
	if rateMilli <= 0 || periodNanos <= 0 {
		return int64(RetryNever)
	}
	hi, lo := bits.Mul64(uint64(amountMilli), uint64(periodNanos))
	// ceil: add rate-1 before dividing.
	var carry uint64
	lo, carry = bits.Add64(lo, uint64(rateMilli)-1, 0)
	hi += carry
	if hi >= uint64(rateMilli) {
		return int64(RetryNever)
	}
	q, _ := bits.Div64(hi, lo, uint64(rateMilli))
	if q > math.MaxInt64 {
		return int64(RetryNever)
	}
	return int64(q)
}

// MulDiv returns floor(a*b/c) for non-negative a, b and positive c,
// saturating at math.MaxInt64.
func MulDiv(a, b, c int64) int64 { return mulDivAdd(a, b, c, 0) }

// ceilMulDiv returns ceil(a*b/c) for non-negative a, b and positive c,
// saturating at math.MaxInt64.
func ceilMulDiv(a, b, c int64) int64 { return mulDivAdd(a, b, c, uint64(c)-1) }

// mulDivAdd returns floor((a*b + add)/c) for non-negative a, b, positive
// c and add < c, saturating at math.MaxInt64 (0 if a or b is not positive).
func mulDivAdd(a, b, c int64, add uint64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	lo, carry := bits.Add64(lo, add, 0)
	hi += carry
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// satAdd adds two non-negative int64s, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

func mul128(a, b int64) (hi, lo uint64) { return bits.Mul64(uint64(a), uint64(b)) }

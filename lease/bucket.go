package lease

import (
	"fmt"
	"time"
)

// BucketConfig configures a token bucket.
type BucketConfig struct {
	// CapacityMilli is the burst B: the most milli-tokens the bucket holds.
	CapacityMilli int64
	// RateMilliPerSec is the refill rate r in milli-tokens per second, or
	// per PeriodNanos if that is set.
	RateMilliPerSec int64
	// PeriodNanos is the time over which the bucket mints RateMilliPerSec
	// (0: one second). Rates below a milli-token per second (1 token a
	// minute: 1000 per 60 s) and rates divided by a drift factor (r_i per
	// (1+ρ) seconds, ClientPeriodNanos) are then exact. In [0, maxPeriodNanos].
	PeriodNanos int64
	// StartFull makes the bucket start at CapacityMilli instead of empty.
	StartFull bool
}

// Validate reports a configuration outside the supported ranges.
func (c BucketConfig) Validate() error {
	if c.CapacityMilli < 0 || c.CapacityMilli > MaxCapacityMilli {
		return fmt.Errorf("%w: capacity %d milli-tokens is outside [0, %d]", ErrInvalidConfig, c.CapacityMilli, MaxCapacityMilli)
	}
	if c.RateMilliPerSec < 0 || c.RateMilliPerSec > MaxRateMilliPerSec {
		return fmt.Errorf("%w: rate %d milli-tokens/s is outside [0, %d]", ErrInvalidConfig, c.RateMilliPerSec, MaxRateMilliPerSec)
	}
	if c.PeriodNanos < 0 || c.PeriodNanos > maxPeriodNanos {
		return fmt.Errorf("%w: rate period %d ns is outside [0, %d]", ErrInvalidConfig, c.PeriodNanos, maxPeriodNanos)
	}
	return nil
}

// period returns the bucket's rate period, one second if unset.
func (c BucketConfig) period() int64 {
	if c.PeriodNanos == 0 {
		return NanosPerSecond
	}
	return c.PeriodNanos
}

// TokenBucket is the exact, single-threaded token bucket. It is not safe for
// concurrent use; AtomicBucket is its lock-free twin with the same arithmetic.
//
// A request of cost c at time t first refills the bucket to
// min(B, level + r*(t-last)); it is admitted iff level >= c, and then c is
// subtracted. A rejected request consumes nothing.
type TokenBucket struct {
	cfg        BucketConfig
	levelMilli int64
	// lastNanos is the time up to which refill has been credited. It can lag
	// the latest call time: the lag is the fraction of a milli-token not yet
	// minted. seenNanos is the latest call time, for the backwards check.
	lastNanos int64
	seenNanos int64
}

// NewTokenBucket returns a bucket whose clock starts at startNanos.
func NewTokenBucket(cfg BucketConfig, startNanos int64) (*TokenBucket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkTime(startNanos); err != nil {
		return nil, err
	}
	b := &TokenBucket{cfg: cfg, lastNanos: startNanos, seenNanos: startNanos}
	if cfg.StartFull {
		b.levelMilli = cfg.CapacityMilli
	}
	return b, nil
}

// Config returns the bucket's parameters.
func (b *TokenBucket) Config() BucketConfig { return b.cfg }

// refill is the one refill rule, shared by TokenBucket and AtomicBucket: it
// returns the level and credited-up-to time after advancing to nowNanos.
func refill(levelMilli, lastNanos, nowNanos, rateMilliPerSec, periodNanos, capMilli int64) (int64, int64) {
	if levelMilli >= capMilli {
		// Full: time spent full mints nothing, so there is no fraction to carry.
		return levelMilli, nowNanos
	}
	minted, used := mintMilliPer(rateMilliPerSec, periodNanos, nowNanos-lastNanos)
	if minted == 0 {
		return levelMilli, lastNanos
	}
	if minted >= capMilli-levelMilli {
		return capMilli, nowNanos
	}
	return levelMilli + minted, lastNanos + used
}

// decide is the one admission rule, shared by TokenBucket and AtomicBucket:
// given the refilled level it returns the decision without charging.
func decide(levelMilli, lastNanos, nowNanos, costMilli, rateMilliPerSec, periodNanos, capMilli int64) Decision {
	if costMilli > capMilli {
		return Decision{Reason: ReasonExceedsCapacity, RemainingMilli: levelMilli, RetryAfter: RetryNever}
	}
	if levelMilli >= costMilli {
		return Decision{Allowed: true, Reason: ReasonOK, RemainingMilli: levelMilli - costMilli}
	}
	wait := nanosToMintPer(rateMilliPerSec, periodNanos, costMilli-levelMilli)
	if wait != int64(RetryNever) {
		// Part of the wait has already elapsed as the carried fraction.
		wait -= nowNanos - lastNanos
		if wait < 1 {
			wait = 1
		}
	}
	return Decision{Reason: ReasonLimit, RemainingMilli: levelMilli, RetryAfter: time.Duration(wait)}
}

func (b *TokenBucket) advance(nowNanos int64) error {
	if nowNanos < b.seenNanos {
		return fmt.Errorf("%w: %d ns is before %d ns", ErrTimeBackwards, nowNanos, b.seenNanos)
	}
	if err := checkTime(nowNanos); err != nil {
		return err
	}
	b.seenNanos = nowNanos
	b.levelMilli, b.lastNanos = refill(b.levelMilli, b.lastNanos, nowNanos, b.cfg.RateMilliPerSec, b.cfg.period(), b.cfg.CapacityMilli)
	return nil
}

// Admit implements Limiter.
func (b *TokenBucket) Admit(nowNanos, costMilli int64) (Decision, error) {
	if costMilli <= 0 {
		return Decision{}, fmt.Errorf("%w: got %d", ErrInvalidCost, costMilli)
	}
	if err := b.advance(nowNanos); err != nil {
		return Decision{}, err
	}
	d := decide(b.levelMilli, b.lastNanos, nowNanos, costMilli, b.cfg.RateMilliPerSec, b.cfg.period(), b.cfg.CapacityMilli)
	if d.Allowed {
		b.levelMilli -= costMilli
	}
	return d, nil
}

// Refund implements Limiter. The level never rises above the capacity.
func (b *TokenBucket) Refund(nowNanos, costMilli int64) error {
	if costMilli <= 0 {
		return fmt.Errorf("%w: got %d", ErrInvalidCost, costMilli)
	}
	if err := b.advance(nowNanos); err != nil {
		return err
	}
	b.levelMilli = min(b.cfg.CapacityMilli, satAdd(b.levelMilli, costMilli))
	return nil
}

// LevelMilli returns the level at nowNanos after refill, without charging.
func (b *TokenBucket) LevelMilli(nowNanos int64) (int64, error) {
	if err := b.advance(nowNanos); err != nil {
		return 0, err
	}
	return b.levelMilli, nil
}

// newTokenBucketWithLevel returns a bucket that starts at levelMilli
// (clamped to [0, capacity]) at startNanos: a client's bucket for a new
// lease starts with the tokens the coordinator debited from its pool.
func newTokenBucketWithLevel(cfg BucketConfig, startNanos, levelMilli int64) (*TokenBucket, error) {
	b, err := NewTokenBucket(cfg, startNanos)
	if err != nil {
		return nil, err
	}
	b.levelMilli = max(0, min(levelMilli, cfg.CapacityMilli))
	return b, nil
}

// SetRate credits refill at the old rate up to nowNanos, then mints at the
// new rate from there. A lease renewal calls it when the client hears of a
// new rate share.
func (b *TokenBucket) SetRate(nowNanos, rateMilliPerSec int64) error {
	cfg := b.cfg
	cfg.RateMilliPerSec = rateMilliPerSec
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := b.advance(nowNanos); err != nil {
		return err
	}
	if rateMilliPerSec != b.cfg.RateMilliPerSec {
		// The carried fraction was accrued at the old rate; do not let the
		// new rate mint it (it could be faster).
		b.lastNanos = nowNanos
	}
	b.cfg.RateMilliPerSec = rateMilliPerSec
	return nil
}

// SetCapacity changes the capacity at nowNanos. Lowering it discards tokens
// above the new capacity; raising it never adds tokens.
func (b *TokenBucket) SetCapacity(nowNanos, capMilli int64) error {
	cfg := b.cfg
	cfg.CapacityMilli = capMilli
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := b.advance(nowNanos); err != nil {
		return err
	}
	b.cfg.CapacityMilli = capMilli
	if b.levelMilli > capMilli {
		b.levelMilli = capMilli
	}
	return nil
}

// Drain takes every token at nowNanos and returns how many there were: a
// client releasing a lease reports them as unspent.
func (b *TokenBucket) Drain(nowNanos int64) (int64, error) {
	if err := b.advance(nowNanos); err != nil {
		return 0, err
	}
	n := b.levelMilli
	b.levelMilli = 0
	return n, nil
}

package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Clock is the time source of Do: Now for the budget and HTTP-dates, After
// for the waits between attempts. Tests inject a fake one.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock (time.Now, time.After), the default.
var RealClock Clock = realClock{}

// Defaults of the zero Policy fields.
const (
	DefaultMaxAttempts = 3
	DefaultBase        = 100 * time.Millisecond
	DefaultCap         = 10 * time.Second
)

// Policy bounds and paces the attempts of one call.
type Policy struct {
	// MaxAttempts is the most attempts in all, the first included
	// (default DefaultMaxAttempts; 1 means never retry).
	MaxAttempts int
	// Budget bounds the time from the first attempt's start to the start
	// of the last: no attempt starts later than that, and a wait that
	// would end past it is not begun. 0 means no bound but the context's
	// deadline, which is always respected the same way.
	Budget time.Duration
	// Base is the backoff ceiling after the first attempt; it doubles
	// after each further attempt, up to Cap (defaults DefaultBase and
	// DefaultCap). The wait is drawn uniformly from [0, ceiling] (full
	// jitter), or is the server's hint if that is later.
	Base, Cap time.Duration
	// Clock defaults to RealClock.
	Clock Clock
	// Rand returns a uniform integer in [0, n) for n > 0 (default
	// math/rand/v2.Int64N).
	Rand func(n int64) int64
}

func (p Policy) withDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.Base <= 0 {
		p.Base = DefaultBase
	}
	if p.Cap <= 0 {
		p.Cap = DefaultCap
	}
	if p.Cap < p.Base {
		p.Cap = p.Base
	}
	if p.Clock == nil {
		p.Clock = RealClock
	}
	if p.Rand == nil {
		p.Rand = rand.Int64N
	}
	return p
}

// Ceiling is the full-jitter ceiling of the wait after attempt n (1-based):
// min(Cap, Base·2^(n−1)), with the zero fields at their defaults.
func (p Policy) Ceiling(n int) time.Duration {
	p = p.withDefaults()
	c := p.Base
	for i := 1; i < n && c < p.Cap; i++ {
		c *= 2
	}
	return min(c, p.Cap)
}

// Backoff draws the wait after attempt n (1-based): uniform in
// [0, Ceiling(n)], from p.Rand.
func (p Policy) Backoff(n int) time.Duration {
	p = p.withDefaults()
	c := p.Ceiling(n)
	return time.Duration(p.Rand(int64(c) + 1))
}

// Func is one attempt. attempt counts from 1. It returns nil when done;
// otherwise retryable says whether another attempt may help, and
// retryAfter is the server's hint of the earliest useful retry (0 for
// none).
type Func func(attempt int) (retryAfter time.Duration, retryable bool, err error)

// Do calls fn until it succeeds, returns a non-retryable error, or the
// policy's attempts or budget or ctx's deadline would be exceeded. Between
// attempts it waits max(Backoff(n), retryAfter). It returns nil on
// success, and otherwise the last attempt's error as fn returned it (when
// ctx ends during a wait, ctx's error wrapping the last one).
//
// A wait that would end past the budget or ctx's deadline is not begun:
// Do gives up at once with the last error.
func Do(ctx context.Context, p Policy, fn Func) error {
	p = p.withDefaults()
	start := p.Clock.Now()
	for attempt := 1; ; attempt++ {
		hint, retryable, err := fn(attempt)
		if err == nil {
			return nil
		}
		if !retryable || attempt >= p.MaxAttempts || ctx.Err() != nil {
			return err
		}
		wait := max(p.Backoff(attempt), hint)
		next := p.Clock.Now().Add(wait)
		if p.Budget > 0 && next.Sub(start) > p.Budget {
			return err
		}
		if dl, ok := ctx.Deadline(); ok && !next.Before(dl) {
			// Measured on p.Clock, like the budget.
			return err
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
			case <-p.Clock.After(wait):
			}
		}
	}
}

package lease

import "time"

// calendarWindow is the local (simulation) limiter of a fixed-window
// policy whose windows are calendar periods: like FixedWindow, with the
// window of time t being spec.At(t) (t read as Unix nanoseconds). It is not
// safe for concurrent use.
type calendarWindow struct {
	limitMilli int64
	spec       WindowSpec
	clock      windowClock
	start, end int64
	usedMilli  int64
}

var _ Limiter = (*calendarWindow)(nil)

// NewCalendarWindow returns an empty calendar-window limiter.
func NewCalendarWindow(limitMilli int64, spec WindowSpec) (Limiter, error) {
	if err := (WindowLedgerConfig{LimitMilli: limitMilli, Spec: spec}).validate(); err != nil {
		return nil, err
	}
	return &calendarWindow{limitMilli: limitMilli, spec: spec}, nil
}

func (c *calendarWindow) advance(now int64) {
	c.clock.observe(now)
	if c.end == 0 || now >= c.end || now < c.start {
		c.start, c.end = c.spec.At(now)
		c.usedMilli = 0
	}
}

// Admit implements Limiter; a refusal waits for the next window.
func (c *calendarWindow) Admit(nowNanos, costMilli int64) (Decision, error) {
	if err := validateCall(&c.clock, nowNanos, costMilli); err != nil {
		return Decision{}, err
	}
	c.advance(nowNanos)
	if costMilli > c.limitMilli {
		return Decision{Reason: ReasonExceedsCapacity, RemainingMilli: c.limitMilli - c.usedMilli, RetryAfter: RetryNever}, nil
	}
	if c.usedMilli <= c.limitMilli-costMilli {
		c.usedMilli += costMilli
		return Decision{Allowed: true, Reason: ReasonOK, RemainingMilli: c.limitMilli - c.usedMilli}, nil
	}
	return Decision{Reason: ReasonLimit, RemainingMilli: c.limitMilli - c.usedMilli, RetryAfter: time.Duration(c.end - nowNanos)}, nil
}

// Refund implements Limiter.
func (c *calendarWindow) Refund(nowNanos, costMilli int64) error {
	if err := validateCall(&c.clock, nowNanos, costMilli); err != nil {
		return err
	}
	c.advance(nowNanos)
	c.usedMilli = max(0, c.usedMilli-costMilli)
	return nil
}

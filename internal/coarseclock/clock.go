package coarseclock

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultResolution is the resolution of Default and of New with a
// non-positive resolution. doc.go explains the choice.
const DefaultResolution = time.Millisecond

// cacheLine pads the published time so that the objects allocated next to
// a Clock never share its cache line (128 bytes also covers the adjacent-line
// prefetcher of x86).
const cacheLine = 128

// Clock is a coarse monotonic clock: Now is one atomic load of a value that a
// background goroutine refreshes every resolution. The value is nanoseconds
// since the Clock was created, measured on Go's monotonic clock, and it always
// lags real time: it is the elapsed time as of the last tick, never more.
//
// A Clock is safe for concurrent use. Times from different Clocks have
// different origins and must not be mixed.
type Clock struct {
	now atomic.Int64
	_   [cacheLine - 8]byte

	start      time.Time
	rate       atomic.Pointer[rateChange] // nil: the clock runs at the real rate
	resolution time.Duration
	permanent  bool // the Default clock: Stop is a no-op
	stopOnce   sync.Once
	stop       chan struct{}
	done       chan struct{}
}

// New starts a Clock that refreshes every resolution (DefaultResolution if
// resolution is not positive). It starts one goroutine; call Stop to end it.
func New(resolution time.Duration) *Clock {
	if resolution <= 0 {
		resolution = DefaultResolution
	}
	c := &Clock{
		start:      time.Now(),
		resolution: resolution,
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	go c.run(time.NewTicker(resolution))
	return c
}

var defaultClock = sync.OnceValue(func() *Clock {
	c := New(DefaultResolution)
	c.permanent = true
	return c
})

// Default returns the process-wide Clock at DefaultResolution, starting it on
// first use. It runs for the life of the process: its Stop does nothing.
func Default() *Clock { return defaultClock() }

func (c *Clock) run(t *time.Ticker) {
	defer close(c.done)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			// time.Since uses the monotonic reading of c.start, so it does
			// not jump with wall-clock changes. The max keeps Now
			// non-decreasing even if the platform's monotonic clock ever
			// stepped back.
			if v := c.elapsed(); v > last {
				last = v
				c.now.Store(v)
			}
		}
	}
}

// Now returns the nanoseconds elapsed since the Clock was created, as of the
// latest tick: non-decreasing, and never ahead of the true elapsed time. It
// lags by up to the resolution plus the goroutine's scheduling delay. It is a
// single atomic load.
func (c *Clock) Now() int64 { return c.now.Load() }

// Resolution returns the refresh interval.
func (c *Clock) Resolution() time.Duration { return c.resolution }

// Stop ends the refresh goroutine and waits for it to exit; Now then stays
// frozen at its last value. Stop is idempotent and safe to call
// concurrently. On the Default clock it does nothing.
func (c *Clock) Stop() {
	if c.permanent {
		return
	}
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
}

// Precise reads the monotonic clock now, on the same base as Now: Now() is
// always <= Precise(). It costs a real clock read (~30 ns); use it where a
// lagging reading would be unsafe, such as a lease's deadline.
func (c *Clock) Precise() int64 {
	if c.rate.Load() == nil {
		return int64(time.Since(c.start))
	}
	return max(c.elapsed(), c.now.Load())
}

// Fresh is Precise floored to the resolution (and never below Now): a
// reading taken now, so its lag is at most one resolution whatever
// happened to the refresh goroutine, yet equal for every call within one
// resolution, so a bucket's no-refill fast path still applies. Use it
// where a lag must stay bounded: after the process was stopped (SIGSTOP, a
// VM pause, a long GC), Now keeps its value until the refresh goroutine
// runs again, which may be after other goroutines have decided with it.
func (c *Clock) Fresh() int64 {
	p := c.Precise()
	return max(p-p%int64(c.resolution), c.now.Load())
}

// rateChange is the clock's reading and the real elapsed time at the moment
// SetRate took effect, and the rate error from then on.
type rateChange struct{ realAt, clockAt, ppm int64 }

// elapsed is the clock's reading now: the real elapsed time, or, after
// SetRate, the reading at the change plus the real time since, scaled.
func (c *Clock) elapsed() int64 {
	real := int64(time.Since(c.start))
	r := c.rate.Load()
	if r == nil {
		return real
	}
	return r.clockAt + scale(real-r.realAt, r.ppm)
}

// scale returns d·(10^6 + ppm)/10^6 without overflowing for any d up to
// centuries.
func scale(d, ppm int64) int64 {
	const m = 1_000_000
	return d/m*(m+ppm) + d%m*(m+ppm)/m
}

// SetRate is a test seam for clock faults: from now on the clock advances
// ppm parts per million faster (ppm > 0) or slower (ppm < 0) than real
// time; 0 restores the real rate (from the current reading, so the clock
// never jumps). ppm must be in (−10^6, 10^6]. Readings stay non-decreasing.
// Production code never calls it; the jepsen-like tests drive it through
// binaries built with -tags ration_faults (internal/faults).
func (c *Clock) SetRate(ppm int64) {
	if ppm <= -1_000_000 || ppm > 1_000_000 {
		panic("coarseclock: SetRate ppm out of range")
	}
	real := int64(time.Since(c.start))
	cur := real
	if r := c.rate.Load(); r != nil {
		cur = r.clockAt + scale(real-r.realAt, r.ppm)
	}
	c.rate.Store(&rateChange{realAt: real, clockAt: max(cur, c.now.Load()), ppm: ppm})
}

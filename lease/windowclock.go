package lease

// WindowSlewDivisor is 1/σ: while a slew is in progress window time
// advances at 1 − 1/WindowSlewDivisor of cluster time (99%), so an excess
// of window time over the wall calendar is taken back at 1% of elapsed
// cluster time, never by going back (docs/design.md §8.2, "Slew").
const WindowSlewDivisor = 100

// WindowClock is window time as a function of cluster time t (docs/design.md
// §8.2): w(t) = t + Offset − taken(t), where taken(t) is the part of the
// slew in progress taken back by t: min(SlewNanos, ⌊(t − SlewStart)/D⌋)
// for t > SlewStart (D = WindowSlewDivisor), else 0. Every step of t by one
// nanosecond moves w by 0 or 1, so w is monotone in t and never advances
// faster than t. Forward steps (Step) and new slews (Slew) first settle the
// slew in progress into Offset, so w is continuous across a new slew and
// only jumps forward at a step. Slewed counts all slew taken before the
// slew in progress (SlewedBy adds what that one has taken): a monotone
// counter, which lets a window ledger bound how much slower than cluster
// time window time may have run between two of its operations
// (WindowLedger.ObserveSlew). The zero value is window time = cluster time.
type WindowClock struct {
	Offset    int64
	SlewStart int64
	SlewNanos int64
	Slewed    int64
}

func (c WindowClock) taken(t int64) int64 {
	if c.SlewNanos <= 0 || t <= c.SlewStart {
		return 0
	}
	return min(c.SlewNanos, (t-c.SlewStart)/WindowSlewDivisor)
}

// At is the window time of cluster time t.
func (c WindowClock) At(t int64) int64 { return t + c.Offset - c.taken(t) }

// SlewedBy is the total slew taken back by cluster time t (monotone in t).
func (c WindowClock) SlewedBy(t int64) int64 { return c.Slewed + c.taken(t) }

// SlewLeft is what the slew in progress has still to take back at t.
func (c WindowClock) SlewLeft(t int64) int64 { return c.SlewNanos - c.taken(t) }

// slewing reports whether a slew is still taking time back at t.
func (c WindowClock) slewing(t int64) bool { return c.SlewLeft(t) > 0 }

// settle folds the slew taken by t into Offset and Slewed, and restarts
// what is left of it at t (the same function of t from t on).
func (c *WindowClock) settle(t int64) {
	k := c.taken(t)
	c.Offset -= k
	c.Slewed += k
	c.SlewNanos -= k
	if c.SlewNanos <= 0 {
		c.SlewNanos, c.SlewStart = 0, 0
		return
	}
	if t > c.SlewStart {
		// Keep the remainder of the division: the next nanosecond taken
		// comes when it would have.
		c.SlewStart += k * WindowSlewDivisor
	}
}

// Step moves window time forward by step ≥ 0 at cluster time t, ending any
// slew in progress (what it has taken stays taken).
func (c *WindowClock) Step(t, step int64) {
	c.settle(t)
	c.SlewNanos, c.SlewStart = 0, 0
	c.Offset += max(step, 0)
}

// Slew starts taking amount ≥ 0 back from cluster time t on, replacing the
// slew in progress (what it has taken stays taken).
func (c *WindowClock) Slew(t, amount int64) {
	c.settle(t)
	c.SlewNanos, c.SlewStart = max(amount, 0), t
	if c.SlewNanos == 0 {
		c.SlewStart = 0
	}
}

// ClusterAt is the earliest cluster time t at which window time reaches w
// (At(t) ≥ w; At is monotone over all of int64, before SlewStart too): the
// cluster-time end of a window that ends at w, if no later step or slew
// changes the clock (a forward step makes the true time earlier, a new
// slew later). It depends on the clock alone, not on when it is asked.
func (c WindowClock) ClusterAt(w int64) int64 {
	if c.SlewNanos <= 0 || w <= c.At(c.SlewStart) {
		return w - c.Offset
	}
	end := satAdd(c.SlewStart, satMul(c.SlewNanos, WindowSlewDivisor))
	// Past the slew's end window time rises with every nanosecond again;
	// At(end) itself may be reached a nanosecond before end (the last
	// nanosecond taken back stalls it there), so it is found below.
	if w > c.At(end) {
		return w - c.Offset + c.SlewNanos
	}
	// Inside the slew: the least x = t − SlewStart with x − ⌊x/D⌋ ≥ y.
	y := w - c.Offset - c.SlewStart
	x := y + y/(WindowSlewDivisor-1)
	for x-x/WindowSlewDivisor < y {
		x++
	}
	for x > 0 && (x-1)-(x-1)/WindowSlewDivisor >= y {
		x--
	}
	return c.SlewStart + x
}

func satMul(a, b int64) int64 {
	if a != 0 && (a*b)/a != b {
		return 1<<63 - 1
	}
	return a * b
}

// Restored is the clock a snapshot restore installs at cluster time t
// (docs/design.md §8.2, "Restarts, leader changes, snapshots"): c, the
// restoring cluster's clock, stepped forward to floor if its window time
// at t is below it (ending its slew), with its slew counter at least
// slewed. floor is the snapshot's own window time (at the cluster time it
// was taken), which every restored ledger has seen; slewed is the
// snapshot's slew counter there, so no restored ledger sees the counter go
// back. Window time so never goes back across a restore: from t on the
// result is c itself or, stepped, at least c (a step runs at full speed).
// It returns the step taken (0: none).
func (c WindowClock) Restored(t, floor, slewed int64) (WindowClock, int64) {
	c.settle(t) // the same function from t on, nothing in progress taken yet
	var step int64
	if w := c.At(t); floor > w { // compared, not subtracted: floor may be math.MinInt64
		step = floor - w
		c.Step(t, step)
	}
	c.Slewed = max(c.Slewed, slewed)
	return c, step
}

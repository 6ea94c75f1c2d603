package client

import (
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/lease"
)

// Leased fixed windows (docs/design.md §8). A window policy's grant is a
// chunk: a bucket with no rate whose cap is the chunk's units, topped up
// at renewals, and whose lease ends with the window. The client uses it
// like any lease (until its conservative local deadline); what it adds is
// the window's description, for waits and the RateLimit fields: a refusal
// while the window has nothing left waits for the reset, and after the
// chunk's deadline, until the reset, it is Limited, not Unavailable.

// windowTerms is a chunk's window, as of the answer that installed it.
type windowTerms struct {
	limitMilli     int64
	windowNanos    int64
	resetAt        int64 // local time of the window's end (estimated)
	remainingMilli int64 // what the window had left for anyone
	// endsWithWindow: the lease's deadline is the window's end (its TTL
	// was the time to the reset).
	endsWithWindow bool
	// renewAfterNanos is the chunk's renewal interval (renewalDemand).
	renewAfterNanos int64
}

// windowOf returns a grant's window terms, or nil for a token bucket.
func windowOf(g *api.Grant, now int64) *windowTerms {
	if g.GetWindowLimitMilli() <= 0 && g.GetWindowNanos() <= 0 {
		return nil
	}
	return &windowTerms{limitMilli: g.GetWindowLimitMilli(), windowNanos: g.GetWindowNanos(),
		// The commit came before the answer arrived, so this errs late,
		// by at most the clocks' drift over the rest of the window.
		resetAt:         now + g.GetWindowResetNanos(),
		remainingMilli:  g.GetWindowRemainingMilli(),
		endsWithWindow:  g.GetTtlNanos() >= g.GetWindowResetNanos(),
		renewAfterNanos: g.GetRenewAfterNanos()}
}

// lastChunkRenewal leaves t, a window chunk whose answer's renew_after
// was its TTL (the lease ends with its window within one renewal
// interval), unrenewed to its deadline, where the loop acquires the next
// window's chunk. That answer's ask covered the demand to the window's
// end (renewalDemand's span stops there). Renewed as other leases are,
// halfway to the deadline at most, such a chunk was renewed about nine
// times in its window's last 150 ms, for a unit or two each.
func (t *terms) lastChunkRenewal(g *api.Grant) {
	if t.win != nil && t.win.endsWithWindow && g.GetRenewAfterNanos() >= g.GetTtlNanos() {
		t.renewAt = t.deadline
	}
}

// minReportNanos is the shortest span a chunk's demand report measures:
// a window's 32nd (half its renewal interval when that is the window's
// 16th), at most 100 ms. The
// renewals in a window's last interval come ever sooner, each with a
// lease ending with the window; measured over their few milliseconds, a
// steady demand read as several times itself (one cost in 2 ms), and the
// next window's first chunk, asked for just after, was as many times too
// large.
func (w *windowTerms) minReportNanos() int64 {
	return min(w.windowNanos/32, int64(100*time.Millisecond))
}

// renewalDemand is the demand a chunk's renewal reports (docs/design.md
// §8.1, "The ask"): the cluster tops a live chunk up by its ask, two
// renewal intervals of the reported rate (fsm.windowAsk; the chunk's
// level, sent beside it, covers only the ask's floors), so the rate
// reported is the one that asks only for what the chunk lacks over that
// span (to the window's end at
// most), never a negative one. The full rate at every renewal made each
// top-up land on top of the units still unspent: with the demand's
// headroom a chunk grew by about one and a half intervals of demand per
// renewal, so a few replicas held a day's L long before they could spend
// it, and one arriving a moment later got nothing for the rest of the
// day. d is the measured demand (reported as it is when unknown).
func (w *windowTerms) renewalDemand(d *api.Demand, levelMilli, now int64) *api.Demand {
	span := min(2*w.renewAfterNanos, w.resetAt-now)
	rate := d.GetRateMilliPerSec()
	if span <= 0 || levelMilli <= 0 || rate > lease.MaxRateMilliPerSec || faults.Active(faults.WindowAskIgnoresChunk) {
		return d
	}
	need := max(lease.MulDiv(rate, span, lease.NanosPerSecond)-levelMilli, 0)
	// Rounded up, so the cluster's ask covers need (it then rounds to
	// whole units).
	rate = lease.MulDiv(need, lease.NanosPerSecond, span)
	if lease.MulDiv(rate, span, lease.NanosPerSecond) < need {
		rate++
	}
	return &api.Demand{RateMilliPerSec: rate, BurstMilli: d.GetBurstMilli(), MaxCostMilli: d.GetMaxCostMilli()}
}

// WindowState describes a window policy's current window as this replica
// last heard of it.
type WindowState struct {
	// LimitMilli is the policy's limit per window (milli-units).
	LimitMilli int64
	// Window is the current window's length (a calendar day may be 23 or
	// 25 hours, a month 28 to 31 days).
	Window time.Duration
	// ResetIn is the time until the window ends (0 once past).
	ResetIn time.Duration
	// LocalMilli is what this replica's chunk has left; ClusterMilli what
	// the window had left for any replica at the last answer.
	LocalMilli, ClusterMilli int64
}

// Window reports the window of a window policy's key; false for a token
// bucket, or before the first grant.
func (l *Limiter) Window() (WindowState, bool) {
	if l.evicted.Load() {
		if s := l.successor.Load(); s != nil && s != l {
			return s.Window()
		}
	}
	t := l.cur.Load()
	if t == nil || t.win == nil {
		return WindowState{}, false
	}
	now := l.c.clock.Precise()
	ws := WindowState{LimitMilli: t.win.limitMilli, Window: time.Duration(t.win.windowNanos),
		ResetIn: time.Duration(max(t.win.resetAt-now, 0)), ClusterMilli: t.win.remainingMilli}
	if now < t.deadline {
		ws.LocalMilli = t.bucket.LevelMilli(now)
	}
	return ws, true
}

// windowWait turns a window chunk's refusal into a wait: for the reset
// when the window had nothing left for this cost, else for the next
// renewal (which asks for more).
func (w *windowTerms) wait(now, costMilli int64, untilShare time.Duration, d lease.Decision) lease.Decision {
	if d.Reason != lease.ReasonLimit {
		return d
	}
	if w.remainingMilli < costMilli {
		d.RetryAfter = time.Duration(max(w.resetAt-now, 0)) + shareRetry
	} else {
		d.RetryAfter = untilShare
	}
	return d
}

// afterDeadline is the decision past a chunk's deadline that the window's
// end set: Limited until the reset (a new chunk follows it), not
// Unavailable. ok false: the lease ended for another reason (the caller
// also rules out a lease the cluster refused or cut short, expiredAck).
func (w *windowTerms) afterDeadline(now int64) (Decision, bool) {
	if !w.endsWithWindow || now >= w.resetAt+int64(time.Second) {
		return Decision{}, false
	}
	return Decision{Verdict: Verdict{Reason: Limited}, RetryAfter: time.Duration(max(w.resetAt-now, 0)) + shareRetry}, true
}

// shareWaitBucket is shareWait's mapping of a chunk's refusal: a cost
// within the policy's limit but above the chunk is Limited (more may come),
// one above the limit ExceedsCapacity with RetryNever.
func (t *terms) shareWaitBucket(costMilli int64, d lease.Decision) lease.Decision {
	if d.Reason == lease.ReasonExceedsCapacity && t.policyBurst > 0 && costMilli <= t.policyBurst {
		d.Reason = lease.ReasonLimit
	}
	return d
}

// spentChunk says whether t is a window chunk that can admit nothing more
// in its window: it had units, all are spent, and the window had nothing
// left for anyone at the last answer. The loop releases such a chunk at
// once (releaseSpent) rather than renewing it to the window's end.
//
// Why (docs/design.md §8.1): a forward re-sync of window time (every
// leader change does one, since elections freeze cluster time) ends the
// current window early while its chunks' leases still run, so the next
// window starts with G = the units of every chunk still live then, spent
// or not: the cluster cannot tell spent units from ones that may yet be
// spent. A replica that spent its chunk in the window's first moments and
// kept renewing it made the whole next window's L count as spent, and
// that window admitted nothing. Released, a chunk is no longer live, so
// only units that may really still be spent are carried.
func (t *terms) spentChunk(now int64) bool {
	return t.win != nil && !t.expiredAck && now < t.deadline && t.capMilli > 0 &&
		t.win.remainingMilli == 0 && t.bucket.LevelMilli(now) == 0
}

// releaseSpent releases the spent window chunks of ls (spentChunk), with
// nothing unspent, in one RPC tried once (a chunk whose release fails
// lives to its expiry, as before), and leaves each limiter refusing as
// Limited until the window's reset until a new chunk is installed: the
// caller acquires one at once, which the spent window grants no units,
// so it renews as any chunk does and picks up units released back into
// the window, and the next window's.
func (c *Client) releaseSpent(now int64, ls []*Limiter) {
	held := make([]*terms, len(ls))
	for i, l := range ls {
		t := l.cur.Load()
		held[i] = t
		nt := *t
		w := *t.win
		w.endsWithWindow = true // refused as Limited until the reset (afterDeadline)
		nt.win = &w
		nt.deadline = min(nt.deadline, now)
		nt.guardFrom = min(nt.guardFrom, nt.deadline)
		l.cur.CompareAndSwap(t, &nt) // the loop is cur's only writer
	}
	if err := c.release(c.stop, now, ls, held); err != nil {
		c.log.Debug("release of spent window chunks failed", "keys", len(ls), "err", err)
	}
}

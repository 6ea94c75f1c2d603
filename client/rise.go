package client

import (
	"time"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/lease"
)

// A demand that rises is seen at once (docs/design.md §3.4 item 3, "A
// rise"). The renewal a lease answers comes every renew_after, and its
// demand is the rate offered over that span, smoothed; a holder whose
// load steps up from 100/s to 20 000/s would wait most of a renew interval
// for a share that follows, and then report the span's average. So the
// background loop also measures each leased key's offered rate each time
// it looks, and renews at once, reporting that rate
// (lease.DemandMeter.ReportRise), when
//
//   - the rate offered since the loop last looked (about 100 ms, the
//     loop's tick, or less when woken) is above the lease's rate share
//     (which has the reports' 25% headroom), and either the bucket is
//     below half its cap (the cushion is being spent: a sustained rise,
//     not a few calls bunched together) or the rate offered is at least
//     twice the share, over at least riseProbe and riseMinTokens;
//   - the lease could get more: its last answer granted every bit of the
//     rate its report asked for (a saturated key, granted less than it
//     asks, never renews for a rise: it would only be told the same);
//   - no rise renewal of the key went out in the last riseGap.
//
// The hot path wakes the loop when a decision leaves the bucket below
// half its cap, or refuses, while the lease could get more (pokeDry), so
// a bucket running dry is renewed within one round trip of the loop, not
// at its next tick (maxSleep); once per look of the loop.
const (
	// riseGap is the least time between two renewals of one key for a
	// rise of its demand: at most ten a second per key, and only while
	// each one is granted what it asks for.
	riseGap = int64(100 * time.Millisecond)
	// riseProbe is the least window a steep rise is judged over; a
	// window shorter than riseMinWindow measures nothing yet.
	riseProbe     = int64(50 * time.Millisecond)
	riseMinWindow = int64(10 * time.Millisecond)
	// riseMinTokens: a probe counts as twice the share only with at
	// least this many tokens offered in it, so a key of a few calls a
	// second does not renew for calls that bunch in one probe.
	riseMinTokens = 10 * lease.MilliPerToken
	// riseLowCosts: a bucket below half its cap counts as a rise only
	// with at least this many of the largest cost offered in the probe,
	// as a demand report measures a span only once it saw four costs
	// (lease.DemandMeter): with fewer, a trickle whose calls bunch read
	// as a rise, reported unsmoothed (in a Zipf run, replicas offered
	// 1.4/s reported 2–7/s and held shares the built-in edge serving 96
	// other replicas needed).
	riseLowCosts = 4
)

// pokeDry wakes the loop once when the lease's bucket runs low while the
// lease could get more (the loop clears dryPoked when it has looked).
func (l *Limiter) pokeDry() {
	if l.riseOK.Load() && !l.dryPoked.Load() && l.dryPoked.CompareAndSwap(false, true) {
		l.c.poke()
	}
}

// offeredSince is the cost offered on l since its last demand report:
// what t's bucket admitted since and what was refused or admitted
// elsewhere (the counts demand reads and resets).
func (l *Limiter) offeredSince(t *terms) int64 {
	offered := max(l.unmet.Load(), 0)
	c := t.bucket.ConsumedMilli()
	if t.bucket == l.lastBucket {
		return satAdd(offered, max(c-l.lastConsumed, 0))
	}
	return satAdd(offered, max(c, 0))
}

// rising says whether l, holding t (a token bucket's lease, not due),
// should renew now for a rise of its demand (see above). When it says so,
// l.riseRate holds the rate to report. Otherwise wake, if not zero, is
// when the loop should look again: a wake from the hot path (dryPoked)
// that came before the probe could measure, or within riseGap of the last
// rise renewal, is looked at then (and the hot path does not wake the
// loop again until it has been).
func (l *Limiter) rising(t *terms, now int64) (rise bool, wake int64) {
	if t.win != nil || !l.lastDemand.Known || now >= t.deadline {
		l.dryPoked.Store(false)
		return false, 0
	}
	offered := l.offeredSince(t)
	if l.probeAt < l.reportedAt || offered < l.probeOffered {
		l.probeAt, l.probeOffered = l.reportedAt, 0
	}
	window := now - l.probeAt
	if window < riseMinWindow {
		if l.dryPoked.Load() {
			return false, l.probeAt + riseMinWindow
		}
		return false, 0
	}
	if l.riseOK.Load() && now-l.riseSentAt < riseGap {
		if l.dryPoked.Load() {
			return false, l.riseSentAt + riseGap
		}
		return false, 0
	}
	// A measurement: the rate offered since the loop last looked.
	inWindow := offered - l.probeOffered
	recent := lease.MulDiv(inWindow, lease.NanosPerSecond, window)
	l.probeAt, l.probeOffered = now, offered
	l.dryPoked.Store(false)
	if !l.riseOK.Load() || recent <= t.rateMilli {
		return false, 0
	}
	// A lease granted no cap (it reported no demand) is as low as can be.
	// A bucket run low counts only with riseLowCosts of the largest cost
	// offered in the window: a trickle's two calls bunched in one look
	// empty a two-token cap and read as twenty a second.
	need := riseLowCosts * max(l.maxCost.Load(), l.lastDemand.MaxCostMilli, lease.MilliPerToken)
	if faults.Active(faults.RiseAnyLow) {
		need = 0 // the negative control: any low bucket
	}
	low := t.capMilli == 0 || t.bucket.LevelMilli(now) < t.capMilli/2 && inWindow >= need
	steep := window >= riseProbe && inWindow >= riseMinTokens && recent/2 >= t.rateMilli
	if !low && !steep {
		return false, 0
	}
	l.riseRate, l.riseSentAt = recent, now
	return true, 0
}

// noteAnswer records whether an answer granted every bit of the rate the
// report it answers asked for (Limiter.riseOK).
func (l *Limiter) noteAnswer(rateMilliPerSec int64) {
	d := l.lastDemand
	l.riseOK.Store(d.Known && rateMilliPerSec >= d.RateMilliPerSec)
}

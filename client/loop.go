package client

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxSleep bounds how long the loop sleeps, so new keys and retries are
// picked up promptly even when no lease is due.
const maxSleep = 100 * time.Millisecond

// unknownDemand is what a key asks for before it has any history: "as much
// as is fair". Renewals then report the measured demand.
const unknownDemand = int64(1) << 50

func (c *Client) loop() {
	defer close(c.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.wake:
		case <-timer.C:
		}
		wait := c.round()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

func (c *Client) snapshot() []*Limiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Limiter, 0, len(c.limiters))
	for _, l := range c.limiters {
		out = append(out, l)
	}
	return out
}

// round acquires keys without a usable lease and renews the ones due,
// each group in batched RPCs (batchLen), and returns how long to sleep.
// Its scan looks at every key (acquires, releases, rises, eviction) and
// queues any terms the renewal schedule does not hold (schedule.go); then
// it sends, one RPC at a time, a renewal of the ready keys with the
// earliest deadlines and an acquire in turn, so neither waits behind all
// of the other's RPCs: every acquire of the round, and renewals for up to
// maxSleep or until those are sent.
func (c *Client) round() time.Duration {
	now := c.clock.Precise()
	c.routeRound(now) // edgeroute.go
	c.evictIdle(now)
	wakeAt := now + int64(maxSleep)
	var acquire, spent, unused []*Limiter
	excess := c.excessKeys(now)
	for _, l := range c.snapshot() {
		t := l.cur.Load()
		switch {
		case t == nil || t.expiredAck || now >= t.deadline:
			if now >= l.retryAt.Load() && l.wantsLease() {
				acquire = append(acquire, l)
			}
		case t.spentChunk(now) && !c.keepSpent.Load():
			// A spent window chunk is released, not renewed (window.go),
			// and a new one acquired in its place.
			spent = append(spent, l)
		case now >= t.renewAt && len(unused) < excess && !l.offeredSinceReport(t):
			unused = append(unused, l) // released, not renewed (PressureKeys)
		case now >= t.renewAt:
			c.sched.queue(l, t)
		default:
			c.sched.queue(l, t)
			if rise, wake := l.rising(t, now); rise {
				c.sched.rise = append(c.sched.rise, l) // rise.go
			} else if wake > 0 {
				wakeAt = min(wakeAt, wake)
			}
		}
	}
	if len(unused) > 0 {
		// Before this round's acquires: a key refused for max_keys may
		// find room once the cluster collects these.
		c.evict(now, unused)
		c.log.Debug("released keys unused since their last renewal (key pressure)", "keys", len(unused))
	}
	if len(spent) > 0 {
		c.releaseSpent(now, spent)
		for _, l := range spent {
			if now >= l.retryAt.Load() {
				acquire = append(acquire, l)
			}
		}
	}
	// Two passes: a policy whose key attributes are unknown sends one key
	// in the first (keying.go); its grant teaches them, and the keys held
	// back go in the second, canonicalised. Any still held back wait for
	// the next round.
	slices.SortFunc(acquire, func(a, b *Limiter) int { return cmp.Compare(a.born, b.born) })
	var acquireNow []*Limiter
	pass := 0
	nextAcquire := func() []*Limiter {
		for len(acquireNow) == 0 && pass < 2 && len(acquire) > 0 {
			acquireNow, acquire = c.acquireable(acquire)
			pass++
		}
		n := min(len(acquireNow), batchLen(acquireNow))
		b := acquireNow[:n]
		acquireNow = acquireNow[n:]
		return b
	}
	end := now + int64(maxSleep)
	for {
		sent := false
		if b := c.sched.batch(c.clock.Precise(), excess); len(b) > 0 {
			c.renewBatch(b)
			sent = true
		}
		if b := nextAcquire(); len(b) > 0 {
			c.acquire(b)
			for _, l := range b {
				c.sched.queue(l, l.cur.Load())
			}
			sent = true
		}
		if !sent || c.stopping() {
			break
		}
		if len(acquireNow) == 0 && (pass == 2 || len(acquire) == 0) && c.clock.Precise() >= end {
			// Every acquire of the round is sent (all of them, oldest
			// first, so none starves behind keys that keep lapsing);
			// renewals still due go in the next round, at once.
			return time.Millisecond
		}
	}
	if len(acquire) > 0 {
		wakeAt = min(wakeAt, c.clock.Precise()+int64(c.cfg.RenewRetryMin))
	}
	now = c.clock.Precise()
	if due, ok := c.sched.nextDue(now); ok {
		wakeAt = min(wakeAt, due)
	}
	return max(time.Duration(wakeAt-now), time.Millisecond)
}

// stopping says whether Close has begun.
func (c *Client) stopping() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// One batched request holds at most maxBatchKeys keys (the servers'
// default max_keys_per_request) of about maxBatchBytes in all (a quarter
// of their default request bound, 4 MiB): a server refuses a request
// over either whole, so the keys of one large batch would fail together
// for the size of some of them.
const (
	maxBatchKeys  = 1024
	maxBatchBytes = 1 << 20
)

// batchLen is how many of ls, from the first, go in one request (at
// least one).
func batchLen(ls []*Limiter) int {
	size := 0
	for i, l := range ls {
		size += l.wireSize()
		if i == maxBatchKeys || (i > 0 && size > maxBatchBytes) {
			return i
		}
	}
	return len(ls)
}

// wireSize is a generous estimate of l's key in a request, in bytes.
func (l *Limiter) wireSize() int {
	n := len(l.policy) + 64 // framing, demand, lease ID, audit report
	for k, v := range l.attrs {
		n += len(k) + len(v) + 8
	}
	return n
}

// rideAlongDivisor sets how soon a key must be due to ride along with the
// renewals due now: within 1/rideAlongDivisor of its own renewal span.
const rideAlongDivisor = 4

// rideAlong is the batching rule round applies (dueSoon); a variable only
// so that a test can put a broken rule in its place (export_test.go).
var rideAlong = (*Limiter).dueSoon

// dueSoon says whether l, holding t, is due for renewal soon enough at now
// to ride along with another key's renewal: not yet due, but due within a
// quarter (1/rideAlongDivisor) of its own renewal span, the time from the
// report its terms answer (reportedAt: the request was sent then) to
// renewAt. So batching costs at most a quarter of a key's span: a key
// renews at most once per 3/4 of its renew_after however many other keys
// fall due (1.33× the renewals at worst, when one is due every round),
// and it cannot cascade, since a rider's next renewal is a full span away
// (in phase with the key it rode with, so the two keep going together).
// Keys granted together renew together anyway (the same renewAt); keys
// granted within a quarter of the span of each other gather into one
// renewal at their first one. A rider measures at least 3/4 of its span,
// so its demand report is a real one (demand). The span is bounded by
// deadline − renewAt as well (renewAt is at most half-way to the deadline,
// setTimes), in case reportedAt predates these terms.
//
// (The rule before, renewAt − now < (deadline − renewAt)/2, held for every
// key right after its own renewal when renew_after ≤ D/3, so one key due
// renewed all of a client's keys, up to ~17× the renewals; bench/history/2026-12-03.md,
// "Client renewals: ride-along only when due".)
func (l *Limiter) dueSoon(t *terms, now int64) bool {
	if t.expiredAck || now >= t.renewAt || now >= t.deadline {
		return false
	}
	span := min(t.renewAt-l.reportedAt, t.deadline-t.renewAt)
	return span > 0 && t.renewAt-now <= span/rideAlongDivisor
}

// demand reports the cost offered since the last report as a demand
// (lease.DemandMeter: the offered rate with headroom, zero for an idle
// limiter, a burst with room for twice the largest cost seen).
//
// A report sent before half of its renewal span repeats the last
// estimate and leaves the counts to the next report: over a few
// milliseconds a steady load often shows no cost at all, and an idle
// limiter reports zero, so a busy limiter's share would collapse (seen:
// TestBusyLimiterNotEvicted's limiter, offering 33/s, refused with
// RetryAfter ~1s under load, when keys rode along just after their own
// renewal). A rider now rides only in the last quarter of its span
// (dueSoon), so this guard no longer fires for riders; it stays for any
// report still sent early.
func (l *Limiter) demand(now int64) *api.Demand {
	rise := l.riseRate
	l.riseRate = 0
	if t := l.cur.Load(); t != nil && l.lastDemand.Known && rise == 0 {
		// t.renewAt is reportedAt + renew_after when t answers the last
		// report; a report before half of that span measures noise. The
		// largest cost keeps accumulating for the next real report.
		// A window chunk's renewals in its window's last interval come
		// ever sooner (its lease ends with the window): a report over
		// less than minReportNanos (window.go) measures noise too.
		if span := t.renewAt - l.reportedAt; span > 0 && now-l.reportedAt < span/2 ||
			t.win != nil && now-l.reportedAt < t.win.minReportNanos() {
			d := l.lastDemand
			return &api.Demand{RateMilliPerSec: d.RateMilliPerSec, BurstMilli: d.BurstMilli, MaxCostMilli: max(d.MaxCostMilli, l.maxCost.Load())}
		}
	}
	// Offered = what the lease's bucket admitted since the last report plus
	// what was refused or admitted elsewhere (unmet).
	offered := l.unmet.Swap(0)
	l.seenUnmet = 0 // so that evictIdle sees any cost offered from now on
	if t := l.cur.Load(); t != nil {
		c := t.bucket.ConsumedMilli()
		if t.bucket == l.lastBucket {
			offered = satAdd(offered, max(c-l.lastConsumed, 0))
		} else {
			offered = satAdd(offered, max(c, 0))
		}
		l.lastBucket, l.lastConsumed = t.bucket, c
	}
	if offered > 0 {
		l.activeAt = now
	}
	d := l.meter.ReportRise(now, offered, l.maxCost.Swap(0), rise) // Report unless rise > 0 (rise.go)
	l.reportedAt, l.lastDemand = now, d
	if !d.Known {
		return &api.Demand{RateMilliPerSec: unknownDemand, BurstMilli: unknownDemand, MaxCostMilli: d.MaxCostMilli}
	}
	return &api.Demand{RateMilliPerSec: d.RateMilliPerSec, BurstMilli: d.BurstMilli, MaxCostMilli: d.MaxCostMilli}
}

// satAdd adds two non-negative int64s, saturating.
func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}

func (c *Client) backoffKey(l *Limiter, err error) {
	if l.fails == 0 && status.Code(err) != codes.Unavailable {
		// A refusal of this key (not the cluster's passing unavailability):
		// said once per run of failures, not on every retry.
		c.log.Warn("lease refused for a key", "limiter", l.id, "err", err)
	}
	l.fails++
	wait := c.cfg.RenewRetryMin << min(l.fails, 6)
	wait = min(wait, c.cfg.RenewRetryMax)
	l.retryAt.Store(c.clock.Precise() + int64(wait))
	e := err
	l.lastErr.Store(&e)
}

func (c *Client) acquire(ls []*Limiter) {
	seq := c.nextSeq()
	tSend := c.clock.Precise()
	req := &api.AcquireRequest{Caller: c.caller(seq)}
	for _, l := range ls {
		req.Keys = append(req.Keys, &api.AcquireKey{Key: &api.Key{Policy: l.policy, Attributes: l.attrs}, Demand: l.demand(tSend)})
	}
	resp, err := call(c, c.stop, tSend+int64(c.cfg.RequestTimeout)*3, func(ctx context.Context, conn *grpc.ClientConn) (*api.LeaseResponse, error) {
		return api.NewLeasesClient(conn).Acquire(ctx, req)
	})
	c.rpcStats.observe(opAcquire, c.clock.Precise()-tSend)
	tSend = c.leaseStart(tSend)
	if err != nil || len(resp.GetLeases()) != len(ls) {
		c.rpcStats.fail(opAcquire, err)
		if status.Code(err) == codes.InvalidArgument && len(ls) > 1 {
			// Refused whole for what some of its keys are (a server's
			// bounds, stricter than this client knows): halves, so that
			// the refusal ends on those keys alone and the others are
			// granted now (at worst 2n−1 requests for n keys, once per
			// backoff of the keys refused).
			c.acquire(ls[:len(ls)/2])
			c.acquire(ls[len(ls)/2:])
			return
		}
		c.log.Warn("acquire failed", "keys", len(ls), "err", err)
		for _, l := range ls {
			c.backoffKey(l, err)
		}
		return
	}
	for i, kl := range resp.GetLeases() {
		l := ls[i]
		if l.evicted.Load() {
			// Merged into its budget's limiter by an earlier grant of this
			// answer: the lease stays unused, held until it expires.
			continue
		}
		if e := kl.GetError(); e != nil {
			if codes.Code(e.GetCode()) == codes.ResourceExhausted {
				c.exhaustedAt.Store(max(c.clock.Precise(), 1)) // PressureKeys
			}
			c.rpcStats.fail(opAcquire, errorFrom(e))
			c.backoffKey(l, errorFrom(e))
			if codes.Code(e.GetCode()) != codes.Unavailable {
				l.firstOnce.Do(func() { close(l.first) }) // do not make callers wait for a refusal
			}
			continue
		}
		if g := kl.GetGrant(); g.GetSlotLease() {
			// A concurrency policy: a rate decision has no release, so a
			// Limiter cannot hold its slots. Refused like a key the
			// cluster refuses; the slot lease goes back at once.
			c.backoffKey(l, fmt.Errorf("%w: policy %q limits requests in flight (its grant is a slot lease); a Limiter's decisions have no release: use Client.Slots", ErrConcurrencyPolicy, l.policy))
			l.firstOnce.Do(func() { close(l.first) })
			rel := &api.ReleaseRequest{Caller: c.caller(c.nextSeq()), Keys: []*api.ReleaseKey{{Key: &api.Key{Policy: l.policy, Attributes: l.attrs}, LeaseId: g.GetLeaseId()}}}
			go func() {
				_, _ = call(c, c.stop, c.clock.Precise()+int64(c.cfg.RequestTimeout)*3, func(ctx context.Context, conn *grpc.ClientConn) (*api.ReleaseResponse, error) {
					return api.NewLeasesClient(conn).Release(ctx, rel)
				})
			}()
			continue
		}
		l.install(tSend, kl.GetGrant())
		if t := l.cur.Load(); t != nil && t.leaseID == kl.GetGrant().GetLeaseId() && t.bucket != l.auditBucket {
			// A new bucket admitted nothing before install published it.
			l.auditBucket, l.auditBase, l.auditSeq = t.bucket, 0, seq
		}
	}
}

// The online audit of the bound (coordinator/audit.go): each renewal and
// release reports what the lease's bucket admitted since the answer to
// an earlier call on the lease (its base: the Acquire that granted it, or
// the last Renew answered with a grant) arrived, read from the bucket's
// counters off the hot path. The base moves only when an answer arrives,
// so a request that fails is covered again by the next one from the same
// base (the coordinator counts only the increase), and a retry repeats
// the same figures. What is admitted while a renewal is in flight, from
// its send to its answer, is in no report: the audit undercounts, never
// overcounts.

// auditReading is what b's admissions consumed, less every charge given
// back (Refund): a lower bound of what stood admitted.
func auditReading(b *lease.AtomicBucket) int64 { return b.ConsumedMilli() - b.RefundedMilli() }

// auditReport returns the report for a call on t's lease: what t's bucket
// admitted since the base, and the base's seq (0, 0: none).
func (l *Limiter) auditReport(t *terms) (admitted int64, since uint64) {
	if t == nil || t.bucket != l.auditBucket || l.auditSeq == 0 {
		return 0, 0
	}
	admitted = max(auditReading(t.bucket)-l.auditBase, 0)
	if faults.Active(faults.ReportDouble) {
		admitted *= 2 // the negative control: a client that over-admits
	}
	return admitted, l.auditSeq
}

// leaseStart is the time a grant's lease is timed from: tSend, when the
// request was sent, since the coordinator may have committed the grant at
// any moment after that. Only a test build breaks this rule
// (faults.TimeFromReceipt times it from the answer's arrival instead).
func (c *Client) leaseStart(tSend int64) int64 {
	if faults.Active(faults.TimeFromReceipt) {
		return c.clock.Precise()
	}
	return tSend
}

// install publishes a new lease's terms (a grant answered to a request sent
// at tSend on the client's clock).
func (l *Limiter) install(tSend int64, g *api.Grant) {
	drift := g.GetDriftPpm()
	deadline := lease.ClientDeadline(tSend, g.GetTtlNanos(), drift)
	now := l.c.clock.Precise()
	l.fails = 0
	l.retryAt.Store(0)
	if now >= deadline {
		return // answered too late to use: its tokens are lost, safely
	}
	rate, period := grantRate(g)
	b, err := lease.NewAtomicBucketWithLevel(lease.BucketConfig{
		CapacityMilli: g.GetCapMilli(), RateMilliPerSec: rate, PeriodNanos: lease.ClientPeriodNanos(period, drift),
	}, now, g.GetStartMilli())
	if err != nil {
		l.c.log.Error("bad grant", "key", l.id, "err", err)
		return
	}
	// The hot path passes floored readings (Clock.Fresh); the take that
	// ends a full spell (the first one, when the grant starts the bucket at
	// its cap) restarts minting from the precise clock, so no time the
	// bucket spent full is minted, however far the reading lags.
	b.SetPreciseClock(l.c.clock.Precise)
	b.SetDebtAllowance(g.GetDebtAllowanceMilli()) // rule (k): how far below zero a charge may take it
	t := &terms{leaseID: g.GetLeaseId(), bucket: b, capMilli: g.GetCapMilli(), rateMilli: g.GetRateMilliPerSec(),
		ttlNanos: g.GetTtlNanos(), driftPPM: drift, shadow: g.GetShadow(), canonical: g.GetCanonicalKey(), version: g.GetVersion(),
		policyBurst: g.GetPolicyBurstMilli(), contended: g.GetContended(), win: windowOf(g, now)}
	t.setTimes(tSend, deadline, g.GetRenewAfterNanos(), l.c.sched.headroom)
	t.lastChunkRenewal(g)
	if g.GetFailureMode() == "fail-open" && g.GetFallbackRateMilliPerSec() > 0 {
		f := g.GetFallbackRateMilliPerSec()
		t.failOpen = true
		t.fallback, _ = lease.NewAtomicBucket(lease.BucketConfig{CapacityMilli: max(f, lease.MilliPerToken), RateMilliPerSec: f, StartFull: true}, now)
	}
	l.cur.Store(t)
	l.noteAnswer(g.GetRateMilliPerSec())
	l.firstOnce.Do(func() { close(l.first) })
	l.c.notifyGrant(l, g, false, deadline-now)
	l.c.learnKeying(l, g)
}

// minRenewAfter is the shortest renewal interval the client accepts from
// an answer: an early renewal (the coordinator asks for one while a key's
// shares converge) is bounded below by the coordinator already; this
// bound keeps a bad answer (0, say) from turning the loop into a storm.
const minRenewAfter = int64(10 * time.Millisecond)

// grantRate returns a grant's share and the period it is per (0: one
// second). The bucket mints it over that period stretched by (1+ρ)
// (lease.ClientPeriodNanos), so no share is rounded down.
func grantRate(g *api.Grant) (rate, periodNanos int64) {
	if p := g.GetRatePeriodNanos(); p > 0 {
		return g.GetRateMilliPerPeriod(), p
	}
	return g.GetRateMilliPerSec(), 0
}

// setTimes derives the renewal time and the guard band from the deadline.
// The answer's renew_after_nanos is honoured (between minRenewAfter and
// half the usable span): an early one while the key's shares converge,
// the policy's again once they have; with jitter, and no later than the
// deadline less the measured headroom (renewTimes, schedule.go).
func (t *terms) setTimes(tSend, deadline, renewAfter, headroom int64) {
	t.deadline = deadline
	span := deadline - tSend
	t.renewAt = renewTimes(tSend, deadline, renewAfter, headroom)
	// The hot path decides on a floored reading (Clock.Fresh) until the last
	// quarter of the usable span (at least 100ms of it), then on a precise one.
	guard := max(span/4, int64(100*time.Millisecond))
	t.guardFrom = max(tSend, deadline-guard)
}

func (c *Client) renew(ls []*Limiter) {
	seq := c.nextSeq()
	tSend := c.clock.Precise()
	req := &api.RenewRequest{Caller: c.caller(seq)}
	sent := make([]*terms, len(ls))
	giveUp := int64(0)
	for i, l := range ls {
		t := l.cur.Load()
		sent[i] = t
		giveUp = max(giveUp, t.deadline)
		// AckedVersion: the terms installed now, before this send. The
		// loop is the only writer of cur and installs an answer (bucket
		// first, then cur) before it sends anything else, so from here on
		// nothing admits under an older version.
		admitted, since := l.auditReport(t)
		demand := l.demand(tSend)
		var level *int64 // a window chunk's, for the ask's floors
		if t.win != nil {
			lv := max(t.bucket.LevelMilli(tSend), 0)
			demand, level = t.win.renewalDemand(demand, lv, tSend), &lv
		}
		req.Keys = append(req.Keys, &api.RenewKey{Key: &api.Key{Policy: l.policy, Attributes: l.attrs}, LeaseId: t.leaseID, Demand: demand,
			AckedVersion: t.version, ClampedMilli: t.clampedMilli, DebtClampedMilli: t.debtLiftedMilli, AdmittedMilli: admitted, AdmittedSinceSeq: since,
			WindowLevelMilli: level})
	}
	resp, err := call(c, c.stop, giveUp, func(ctx context.Context, conn *grpc.ClientConn) (*api.LeaseResponse, error) {
		return api.NewLeasesClient(conn).Renew(ctx, req)
	})
	c.rpcStats.observe(opRenew, c.clock.Precise()-tSend)
	tSend = c.leaseStart(tSend)
	if err != nil || len(resp.GetLeases()) != len(ls) {
		c.rpcStats.fail(opRenew, err)
		c.log.Warn("renew failed", "keys", len(ls), "err", err)
		// Aborted: the cluster refuses this caller outright, above all
		// because a newer incarnation of this ClientID has spoken, which
		// released these leases (their capacity may already be someone
		// else's). Stop using them now, not at their deadlines.
		superseded := status.Code(err) == codes.Aborted
		for _, l := range ls {
			c.backoffKey(l, err)
			if t := l.cur.Load(); t != nil {
				nt := *t
				if superseded {
					nt.expiredAck = true
					nt.deadline = min(nt.deadline, c.clock.Precise())
					nt.guardFrom = min(nt.guardFrom, nt.deadline)
				} else {
					// Try again soon, but never past the deadline: round()
					// turns an expired lease into an acquire.
					nt.renewAt = l.retryAt.Load()
				}
				l.cur.CompareAndSwap(t, &nt)
			}
		}
		return
	}
	for i, kl := range resp.GetLeases() {
		l, old := ls[i], sent[i]
		if e := kl.GetError(); e != nil {
			c.rpcStats.fail(opRenew, errorFrom(e))
			// The coordinator no longer holds this lease: stop using it now
			// (its capacity may be granted again) and acquire afresh.
			nt := *old
			nt.expiredAck = true
			nt.deadline = min(nt.deadline, c.clock.Precise())
			nt.guardFrom = min(nt.guardFrom, nt.deadline)
			l.cur.CompareAndSwap(old, &nt)
			l.lastErr.Store(ptr(errorFrom(e)))
			continue
		}
		// The answer arrived: the audit's base moves to it, read before the
		// answer is installed (so before OnGrant hears of it), less the
		// top-up the install gives back, which is no admission.
		base := auditReading(old.bucket)
		topUp := l.applyRenewal(tSend, old, kl.GetGrant())
		if kl.GetGrant().GetLeaseId() == old.leaseID && old.bucket == l.auditBucket {
			l.auditBase, l.auditSeq = base-topUp, seq
		}
	}
}

// applyRenewal installs renewed terms on the same bucket: it adds no
// tokens but the answer's top-up (debited from the pool for a raised cap,
// rule i); a renewal that arrives after the old deadline mints nothing for
// the gap; the later of the two deadlines applies (the lease was held
// throughout). What a cut cap clamps off the bucket is reported with the
// next renewal's acknowledgement. It returns the top-up it refunded to
// the bucket (for the audit's counts: Refund counts it as given back).
func (l *Limiter) applyRenewal(tSend int64, old *terms, g *api.Grant) (toppedUp int64) {
	if g.GetLeaseId() != old.leaseID {
		return 0
	}
	drift := g.GetDriftPpm()
	newDeadline := max(old.deadline, lease.ClientDeadline(tSend, g.GetTtlNanos(), drift))
	now := l.c.clock.Precise()
	if now >= newDeadline {
		return 0
	}
	if now > old.deadline {
		old.bucket.SetRate(old.deadline, 0)
	}
	rate, period := grantRate(g)
	if per := lease.ClientPeriodNanos(period, drift); per != old.bucket.PeriodNanos() {
		// The bucket's period is fixed (the policy's rate period or drift
		// changed): restate the share over it, rounding down.
		rate = lease.MulDiv(rate, old.bucket.PeriodNanos(), per)
	}
	old.bucket.SetRate(now, rate)
	clamped := old.bucket.SetCapacity(now, g.GetCapMilli())
	// A lowered allowance lifts the level to it; the debt lifted is
	// reported with the acknowledgement (rule k).
	lifted := old.bucket.SetDebtAllowance(g.GetDebtAllowanceMilli())
	if top := g.GetTopUpMilli(); top > 0 {
		old.bucket.Refund(top) // never above the new cap
		toppedUp = top
	}
	nt := *old
	nt.clampedMilli = clamped
	nt.debtLiftedMilli = lifted
	nt.capMilli, nt.rateMilli, nt.ttlNanos, nt.driftPPM, nt.shadow = g.GetCapMilli(), g.GetRateMilliPerSec(), g.GetTtlNanos(), drift, g.GetShadow()
	// The bucket mints at the new rate and holds at most the new cap from
	// here on: these terms are installed, and the next renewal says so.
	nt.version = g.GetVersion()
	nt.policyBurst = g.GetPolicyBurstMilli()
	nt.contended = g.GetContended()
	nt.win = windowOf(g, now)
	nt.setTimes(tSend, newDeadline, g.GetRenewAfterNanos(), l.c.sched.headroom)
	nt.lastChunkRenewal(g)
	l.fails = 0
	l.noteAnswer(g.GetRateMilliPerSec())
	if l.cur.CompareAndSwap(old, &nt) {
		l.c.notifyGrant(l, g, true, newDeadline-now)
		l.c.learnKeying(l, g)
	}
	return toppedUp
}

// notifyGrant tells Config.OnGrant about a grant now in use.
func (c *Client) notifyGrant(l *Limiter, g *api.Grant, renewal bool, usable int64) {
	if c.cfg.OnGrant == nil {
		return
	}
	c.cfg.OnGrant(GrantInfo{
		Policy: l.policy, CanonicalKey: g.GetCanonicalKey(), LeaseID: g.GetLeaseId(), Renewal: renewal,
		RateMilliPerSec: g.GetRateMilliPerSec(), CapMilli: g.GetCapMilli(), StartMilli: g.GetStartMilli(), TopUpMilli: g.GetTopUpMilli(),
		UsableFor: time.Duration(usable), RenewAfter: time.Duration(g.GetRenewAfterNanos()), Version: g.GetVersion(),
		Contended: g.GetContended(),
	})
}

// offeredSinceSeen says whether cost was offered on l since the loop last
// looked, from the demand accounting: the unmet cost and what the lease's
// bucket admitted (its consumed count, which a refund takes back) changed,
// or a WaitN caller waits. A demand report resetting unmet, or a new
// lease, reads as an offer once: that only delays an eviction.
func (l *Limiter) offeredSinceSeen() bool {
	unmet := l.unmet.Load()
	var b *lease.AtomicBucket
	var consumed int64
	if t := l.cur.Load(); t != nil {
		b, consumed = t.bucket, t.bucket.ConsumedMilli()
	}
	changed := unmet != l.seenUnmet || b != l.seenBucket || consumed != l.seenConsumed
	l.seenUnmet, l.seenBucket, l.seenConsumed = unmet, b, consumed
	return changed || l.waiters.Load() > 0
}

// evictIdle evicts the limiters nothing was offered on for IdleTimeout:
// the Client forgets them (calls on a held one go to a live limiter, see
// Limiter), and their leases are released with the unspent tokens in one
// RPC. A release that fails is not retried: the lease then expires at
// the cluster at its deadline, as a crashed client's would.
func (c *Client) evictIdle(now int64) {
	if c.cfg.IdleTimeout < 0 {
		return
	}
	var idle []*Limiter
	for _, l := range c.snapshot() {
		if l.offeredSinceSeen() {
			l.activeAt = now
		} else if now-l.activeAt >= int64(c.cfg.IdleTimeout) {
			idle = append(idle, l)
		}
	}
	if len(idle) == 0 {
		return
	}
	c.evict(now, idle)
	c.log.Debug("evicted idle limiters", "keys", len(idle))
}

// evict forgets the limiters ls and releases their leases with the
// unspent tokens in one RPC (a release that fails is not retried).
func (c *Client) evict(now int64, ls []*Limiter) {
	c.mu.Lock()
	for _, l := range ls {
		delete(c.limiters, l.regID)
		// Before cur is unpublished: a caller that misses the fast path
		// because cur is nil then sees evicted and goes to a live limiter.
		l.evicted.Store(true)
		c.foldEvictedLocked(l)
		c.rememberGone(l, now)
	}
	c.mu.Unlock()
	held := make([]*terms, len(ls))
	for i, l := range ls {
		held[i] = l.cur.Swap(nil)
		l.firstOnce.Do(func() { close(l.first) }) // end first-lease waits: they go to the live limiter
	}
	if err := c.release(c.stop, now, ls, held); err != nil {
		c.log.Warn("release of evicted limiters failed", "keys", len(ls), "err", err)
	}
}

// excessKeys is how many unused keys a round may release instead of
// renewing them (PressureKeys): every one while the cluster has refused
// one of the client's keys RESOURCE_EXHAUSTED within the last
// 2·RenewRetryMax (a refused key retries at least that often, so this
// lasts while it is refused); else the keys held beyond PressureKeys.
func (c *Client) excessKeys(now int64) int {
	if c.cfg.PressureKeys <= 0 {
		return 0
	}
	if at := c.exhaustedAt.Load(); at != 0 && now-at < 2*int64(c.cfg.RenewRetryMax) {
		return math.MaxInt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(len(c.limiters)-c.cfg.PressureKeys, 0)
}

// offeredSinceReport says whether any cost was offered on l since its
// last demand report (its last renewal or acquire): admitted from t's
// bucket, refused or admitted elsewhere (unmet), or waiting.
func (l *Limiter) offeredSinceReport(t *terms) bool {
	if l.unmet.Load() > 0 || l.waiters.Load() > 0 {
		return true
	}
	consumed := t.bucket.ConsumedMilli()
	if t.bucket != l.lastBucket {
		return consumed > 0
	}
	return consumed > l.lastConsumed
}

// releaseAll returns every lease with its unspent tokens (Close).
func (c *Client) releaseAll() error {
	now := c.clock.Precise()
	ls := c.snapshot()
	held := make([]*terms, len(ls))
	for i, l := range ls {
		held[i] = l.cur.Load()
	}
	return c.release(nil, now+2*int64(c.cfg.RequestTimeout), ls, held)
}

// release returns the leases ls hold (held[i] is ls[i]'s terms, nil if
// none) with their unspent tokens, in RPCs of batchLen keys each, every
// one retried until giveUp (local time) or abort; the first error is
// returned. Each bucket stops minting before it is drained, so a caller
// still holding the terms cannot take tokens minted after the release.
func (c *Client) release(abort <-chan struct{}, giveUp int64, ls []*Limiter, held []*terms) error {
	var first error
	for len(ls) > 0 {
		n := batchLen(ls)
		if err := c.releaseBatch(abort, giveUp, ls[:n], held[:n]); err != nil && first == nil {
			first = err
		}
		ls, held = ls[n:], held[n:]
	}
	return first
}

func (c *Client) releaseBatch(abort <-chan struct{}, giveUp int64, ls []*Limiter, held []*terms) error {
	now := c.clock.Precise()
	req := &api.ReleaseRequest{Caller: c.caller(c.nextSeq())}
	var infos []ReleaseInfo // for Config.OnRelease
	for i, l := range ls {
		t := held[i]
		if t == nil || t.expiredAck {
			continue
		}
		admitted, since := l.auditReport(t)
		unspent, debt := int64(0), int64(0)
		if now < t.deadline {
			t.bucket.SetRate(now, 0)
			unspent = t.bucket.Drain()
		} else if l.debtBucket.Load() == t.bucket {
			// Its level at the deadline is not known any more (it may
			// have minted since): report the worst, as the ledger takes
			// at an expiry (docs/design.md §4.1).
			debt = t.bucket.DebtAllowanceMilli()
		}
		if unspent < 0 {
			// In debt when it stopped: the debt stays in the key's budget.
			unspent, debt = 0, -unspent
		}
		req.Keys = append(req.Keys, &api.ReleaseKey{Key: &api.Key{Policy: l.policy, Attributes: l.attrs}, LeaseId: t.leaseID, UnspentMilli: unspent,
			DebtMilli: debt, AdmittedMilli: admitted, AdmittedSinceSeq: since})
		if c.cfg.OnRelease != nil {
			infos = append(infos, ReleaseInfo{Policy: l.policy, CanonicalKey: t.canonical, LeaseID: t.leaseID, UnspentMilli: unspent, DebtMilli: debt})
		}
	}
	if len(req.Keys) == 0 {
		return nil
	}
	_, err := call(c, abort, giveUp, func(ctx context.Context, conn *grpc.ClientConn) (*api.ReleaseResponse, error) {
		return api.NewLeasesClient(conn).Release(ctx, req)
	})
	took := time.Duration(c.clock.Precise() - now)
	for _, ri := range infos {
		ri.Took, ri.Err = took, err
		c.cfg.OnRelease(ri)
	}
	return err
}

func ptr[T any](v T) *T { return &v }

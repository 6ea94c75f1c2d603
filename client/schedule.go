package client

import (
	"math/rand/v2"
	"slices"
)

// The renewal schedule (docs/design.md §3.4 item 4). The loop keeps every
// leased key's current terms in a queue: waiting, ordered by renewAt, and
// ready (renewAt passed), ordered by deadline. Each Renew RPC takes the
// ready keys with the earliest deadlines, at most one batch (batchLen),
// then riders (dueSoon) from the head of waiting; the loop sends one RPC
// at a time (the cluster refuses a caller's seq below one it has applied,
// so two in flight could fail each other) and picks the next batch after
// each answer, alternating with acquires, so no key waits behind a round
// of other keys' RPCs, and under a backlog the keys closest to expiry go
// first. An entry is a key's terms when they were queued: terms replaced
// since (a renewal's answer, an eviction, a failure) leave it dead, and it
// is dropped when it reaches a head. The loop's scan queues any key whose
// current terms are not queued, so none is missed whatever replaced them.

// renewJitterDivisor bounds the jitter added to a key's renewal time: a
// key renews between renew_after and renew_after·(1 + 1/8) after its send
// (never past half the usable span, nor past the deadline less the
// headroom), so keys granted together drift apart instead of falling due
// in one burst, and no key renews earlier than renew_after says.
const renewJitterDivisor = 8

// renewJitter returns the jitter for a renewal span: uniform in
// [0, span/renewJitterDivisor]. A variable so that a test can fix it.
var renewJitter = func(span int64) int64 {
	if span < renewJitterDivisor {
		return 0
	}
	return rand.Int64N(span/renewJitterDivisor + 1)
}

// headroomRTTs and rttSamples set the measured headroom: a key renews no
// later than its deadline less headroomRTTs times the slowest of the last
// rttSamples Renew RPCs (about their p99), so a slow cluster is renewed
// earlier than renew_after says, with time for retries (renewTimes bounds
// how much earlier).
const (
	headroomRTTs = 4
	rttSamples   = 100
)

// noteRenewRTT records a Renew RPC's duration (retries included) and
// updates the headroom.
func (c *Client) noteRenewRTT(d int64) {
	s := &c.sched
	if len(s.rtts) < rttSamples {
		s.rtts = append(s.rtts, d)
	} else {
		s.rtts[s.rttNext] = d
		s.rttNext = (s.rttNext + 1) % rttSamples
	}
	s.headroom = headroomRTTs * slices.Max(s.rtts)
}

// schedEntry is a key's terms as they were queued.
type schedEntry struct {
	l *Limiter
	t *terms
}

// entryHeap is a binary min-heap of entries by a key of their terms.
type entryHeap struct {
	e   []schedEntry
	key func(*terms) int64
}

func (h *entryHeap) less(i, j int) bool { return h.key(h.e[i].t) < h.key(h.e[j].t) }

func (h *entryHeap) push(x schedEntry) {
	h.e = append(h.e, x)
	for i := len(h.e) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h.e[i], h.e[p] = h.e[p], h.e[i]
		i = p
	}
}

func (h *entryHeap) pop() schedEntry {
	top := h.e[0]
	n := len(h.e) - 1
	h.e[0] = h.e[n]
	h.e[n] = schedEntry{}
	h.e = h.e[:n]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		h.e[i], h.e[m] = h.e[m], h.e[i]
		i = m
	}
	return top
}

// renewSched is the loop's renewal queue (owned by the loop goroutine).
type renewSched struct {
	waiting entryHeap // by renewAt
	ready   entryHeap // by deadline
	rise    []*Limiter
	rtts    []int64 // the last Renew RPCs' durations (noteRenewRTT)
	rttNext int
	// headroom: a key renews no later than its deadline less this
	// (noteRenewRTT), set into its terms' renewAt when they are installed.
	headroom int64
}

func newRenewSched() renewSched {
	return renewSched{
		waiting: entryHeap{key: func(t *terms) int64 { return t.renewAt }},
		ready:   entryHeap{key: func(t *terms) int64 { return t.deadline }},
	}
}

// queue puts l's terms t in the schedule unless they are already there (or
// no renewal of them can be sent: none, or gone at the coordinator).
func (s *renewSched) queue(l *Limiter, t *terms) {
	if t == nil || t.expiredAck || l.queued == t {
		return
	}
	l.queued = t
	s.waiting.push(schedEntry{l: l, t: t})
}

// live says whether e is still its key's queued, current terms, usable at
// now.
func (e schedEntry) live(now int64) bool {
	return e.l.queued == e.t && e.l.cur.Load() == e.t && !e.t.expiredAck && now < e.t.deadline && !e.l.evicted.Load()
}

// promote moves the entries whose renewAt has passed to ready, dropping
// dead ones.
func (s *renewSched) promote(now int64) {
	for len(s.waiting.e) > 0 {
		e := s.waiting.e[0]
		if e.live(now) && e.t.renewAt > now {
			return
		}
		s.waiting.pop()
		if e.live(now) {
			s.ready.push(e)
		}
	}
}

// nextDue is when the next waiting entry falls due (promote first), or
// false if none waits.
func (s *renewSched) nextDue(now int64) (int64, bool) {
	for len(s.waiting.e) > 0 {
		if e := s.waiting.e[0]; e.live(now) {
			return e.t.renewAt, true
		}
		s.waiting.pop()
	}
	return 0, false
}

// batch takes the next Renew RPC's keys at now: the keys queued for a
// rise of demand, then the ready keys by earliest deadline, then, if any
// key was due, riders (rideAlong) from the head of waiting, up to one
// request (batchLen's bounds). Under key pressure (excess > 0) a key with
// no cost offered since its last report is left out and requeued by the
// loop's next scan, which releases it instead (PressureKeys). Each key
// taken is unqueued: the loop queues its new terms after the answer.
func (s *renewSched) batch(now int64, excess int) []*Limiter {
	var out []*Limiter
	size := 0
	fits := func(l *Limiter) bool {
		w := l.wireSize()
		if len(out) == maxBatchKeys || (len(out) > 0 && size+w > maxBatchBytes) {
			return false
		}
		size += w
		return true
	}
	take := func(l *Limiter) {
		l.queued = nil
		l.batched = true
		out = append(out, l)
	}
	for len(s.rise) > 0 {
		l := s.rise[0]
		if t := l.cur.Load(); t == nil || t.expiredAck || now >= t.deadline || l.evicted.Load() || l.batched {
			s.rise = s.rise[1:]
			continue
		}
		if !fits(l) {
			break
		}
		s.rise = s.rise[1:]
		take(l)
	}
	s.promote(now)
	for len(s.ready.e) > 0 {
		e := s.ready.e[0]
		if !e.live(now) || e.l.batched {
			s.ready.pop()
			continue
		}
		if excess > 0 && !e.l.offeredSinceReport(e.t) {
			s.ready.pop()
			e.l.queued = nil
			continue
		}
		if !fits(e.l) {
			break
		}
		s.ready.pop()
		take(e.l)
	}
	if len(out) == 0 {
		return nil
	}
	var held []schedEntry // riders left out under key pressure
	for len(s.waiting.e) > 0 {
		e := s.waiting.e[0]
		if !e.live(now) || e.l.batched {
			s.waiting.pop()
			continue
		}
		if !rideAlong(e.l, e.t, now) {
			break
		}
		if excess > 0 && !e.l.offeredSinceReport(e.t) {
			held = append(held, s.waiting.pop())
			continue
		}
		if !fits(e.l) {
			break
		}
		s.waiting.pop()
		take(e.l)
	}
	for _, e := range held {
		s.waiting.push(e)
	}
	return out
}

// renewBatch sends one Renew RPC for ls (a batch) and queues the keys'
// new terms. A key whose terms the answer left unchanged (an answer too
// late to use, say) is requeued by the next scan, not at once, so it does
// not renew in a tight loop.
func (c *Client) renewBatch(ls []*Limiter) {
	sent := make([]*terms, len(ls))
	for i, l := range ls {
		sent[i] = l.cur.Load()
	}
	t0 := c.clock.Precise()
	c.renew(ls)
	c.noteRenewRTT(c.clock.Precise() - t0)
	for i, l := range ls {
		l.batched = false
		if t := l.cur.Load(); t != sent[i] {
			c.sched.queue(l, t)
		}
	}
}

// renewTimes returns a key's renewal time for terms sent at tSend with
// the given deadline and renew_after: renew_after (bounded to
// [minRenewAfter, half the usable span]) plus jitter (renewJitter), never
// past half the usable span, nor past the deadline less headroom unless
// that is before a quarter of the usable span (or renew_after if sooner):
// a slow cluster renews earlier, but a key renews at most four times per
// usable span, however slow the RPCs were (a few seconds of an election).
func renewTimes(tSend, deadline, renewAfter, headroom int64) int64 {
	span := deadline - tSend
	after := min(max(renewAfter, minRenewAfter), span/2)
	at := tSend + min(after+renewJitter(after), span/2)
	return max(min(at, deadline-headroom), tSend+min(after, span/4))
}

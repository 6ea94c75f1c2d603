package client

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// Unit tests of the renewal schedule (schedule.go), on the schedule alone
// with simulated time: no cluster, no clock.

// schedLimiter is a limiter holding terms sent at tSend, as the schedule
// sees them.
func schedLimiter(i int, tSend, span, renewAfter int64) *Limiter {
	l := &Limiter{policy: "p", attrs: map[string]string{"k": strconv.Itoa(i)}, reportedAt: tSend}
	l.cur.Store(&terms{deadline: tSend + span, renewAt: renewTimes(tSend, tSend+span, renewAfter, 0)})
	return l
}

// TestScheduleEarliestDeadlineFirst: the ready keys go in deadline order,
// at most one request's worth per batch, each key once, and a key neither
// due nor due soon never goes.
func TestScheduleEarliestDeadlineFirst(t *testing.T) {
	const n = 3000
	s := newRenewSched()
	now := int64(10 * time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	due := 0
	for i := range n {
		l := &Limiter{policy: "p", attrs: map[string]string{"k": strconv.Itoa(i)}, reportedAt: 0}
		tm := &terms{deadline: now + 1 + rng.Int64N(int64(5*time.Second))}
		if i%3 == 0 {
			tm.renewAt = now + int64(time.Second) + rng.Int64N(int64(time.Second)) // not due, not due soon
		} else {
			tm.renewAt = now - rng.Int64N(int64(time.Second))
			due++
		}
		l.cur.Store(tm)
		s.queue(l, tm)
	}
	seen := map[*Limiter]bool{}
	last := int64(0)
	for {
		b := s.batch(now, 0)
		if len(b) == 0 {
			break
		}
		if len(b) > maxBatchKeys {
			t.Fatalf("a batch of %d keys, more than %d", len(b), maxBatchKeys)
		}
		for _, l := range b {
			tm := l.cur.Load()
			if tm.renewAt > now {
				t.Fatalf("a key due in %v went", time.Duration(tm.renewAt-now))
			}
			if tm.deadline < last {
				t.Fatalf("deadline %d after %d: not earliest deadline first", tm.deadline, last)
			}
			last = tm.deadline
			if seen[l] {
				t.Fatal("a key went twice")
			}
			seen[l] = true
			l.batched = false
		}
	}
	if len(seen) != due {
		t.Fatalf("%d keys renewed, want the %d due", len(seen), due)
	}
}

// TestScheduleJitterBounded: a renewal falls between renew_after and
// renew_after·(1 + 1/renewJitterDivisor) after its send, within half the
// usable span, and the headroom moves it earlier, down to a quarter of
// the span at most.
func TestScheduleJitterBounded(t *testing.T) {
	span, after := int64(5*time.Second), int64(1500*time.Millisecond)
	var lo, hi int64 = span, 0
	for range 10000 {
		at := renewTimes(0, span, after, 0)
		lo, hi = min(lo, at), max(hi, at)
	}
	if lo < after || hi > after+after/renewJitterDivisor {
		t.Fatalf("renewals %v to %v after the send, want within [%v, %v]", time.Duration(lo), time.Duration(hi),
			time.Duration(after), time.Duration(after+after/renewJitterDivisor))
	}
	if hi-lo < after/renewJitterDivisor/2 {
		t.Fatalf("renewals spread over %v only: no jitter", time.Duration(hi-lo))
	}
	if at := renewTimes(0, span, 2*span, 0); at != span/2 {
		t.Fatalf("renew_after past the span: %v, want half the span %v", time.Duration(at), time.Duration(span/2))
	}
	if at := renewTimes(0, span, after, int64(4*time.Second)); at != int64(1250*time.Millisecond) {
		t.Fatalf("a 4s headroom: %v, want a quarter of the span (1.25s)", time.Duration(at))
	}
	if at := renewTimes(0, span, after, int64(3800*time.Millisecond)); at != int64(1200*time.Millisecond) && at > int64(1250*time.Millisecond) {
		t.Fatalf("a 3.8s headroom: %v, want at most 1.25s", time.Duration(at))
	}
	if at := renewTimes(0, span, after, int64(3600*time.Millisecond)); at > int64(1400*time.Millisecond) || at < int64(1250*time.Millisecond) {
		t.Fatalf("a 3.6s headroom: %v, want 1.4s or less", time.Duration(at))
	}
}

// TestScheduleNoLapseAtCapacity simulates the loop on the schedule alone:
// keys all granted at once (the worst burst), one RPC at a time of at most
// maxBatchKeys keys taking rpc each. With the RPCs' capacity above the
// keys' renewal rate, every renewal goes within 2·rpc of its renewAt once
// the first burst is through (measured over the second half); with
// it below (every key renews late) but above keys/(span − rpc), none goes
// after its deadline: the keys closest to expiry go first.
func TestScheduleNoLapseAtCapacity(t *testing.T) {
	span, after := int64(5*time.Second), int64(1500*time.Millisecond)
	for _, tc := range []struct {
		name     string
		keys     int
		rpc      time.Duration
		maxLate  time.Duration // 0: only no lapse
		minMarg  time.Duration
		renewals int // at least, per key
	}{
		{name: "under-capacity", keys: 20000, rpc: 30 * time.Millisecond, maxLate: 60 * time.Millisecond, minMarg: 2500 * time.Millisecond, renewals: 15},
		{name: "over-capacity", keys: 20000, rpc: 150 * time.Millisecond, minMarg: 100 * time.Millisecond, renewals: 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRenewSched()
			ls := make([]*Limiter, tc.keys)
			for i := range ls {
				ls[i] = schedLimiter(i, 0, span, after)
				s.queue(ls[i], ls[i].cur.Load())
			}
			count := map[*Limiter]int{}
			var worstLate, worstMargin int64 = 0, span
			now, end := int64(0), int64(40*time.Second)
			for now < end {
				b := s.batch(now, 0)
				if len(b) == 0 {
					next, ok := s.nextDue(now)
					if !ok {
						t.Fatal("nothing queued")
					}
					now = max(next, now+1)
					continue
				}
				for _, l := range b {
					tm := l.cur.Load()
					if now >= end/2 {
						worstLate = max(worstLate, now-tm.renewAt)
					}
					worstMargin = min(worstMargin, tm.deadline-now)
				}
				sent := now
				now += int64(tc.rpc)
				for _, l := range b {
					l.batched = false
					nt := &terms{deadline: sent + span, renewAt: renewTimes(sent, sent+span, after, 0)}
					l.reportedAt = sent
					l.cur.Store(nt)
					s.queue(l, nt)
					count[l]++
				}
			}
			least := tc.renewals * 10
			for _, l := range ls {
				least = min(least, count[l])
			}
			t.Logf("%d keys, RPCs of %v: renewals per key ≥ %d, worst lateness (second half) %v, least margin %v", tc.keys, tc.rpc, least, time.Duration(worstLate), time.Duration(worstMargin))
			if tc.maxLate > 0 && worstLate > int64(tc.maxLate) {
				t.Errorf("a renewal went %v after its renewAt, want ≤ %v", time.Duration(worstLate), tc.maxLate)
			}
			if worstMargin < int64(tc.minMarg) {
				t.Errorf("a renewal went %v before its deadline, want ≥ %v", time.Duration(worstMargin), tc.minMarg)
			}
			if least < tc.renewals {
				t.Errorf("a key renewed %d times in %v, want ≥ %d", least, time.Duration(end), tc.renewals)
			}
		})
	}
}

package simulate

import (
	"container/heap"
	"fmt"
	"math/big"
	"time"

	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/lease"
)

// AlgConcurrency is the policy algorithm the simulator replays as a
// concurrency limit (docs/concurrency.md): policy.Concurrency
// (`algorithm: concurrency` in a policy file), or Options.Concurrency.
const AlgConcurrency = policy.Concurrency

// Concurrency is a concurrency policy as the simulator replays it: at most
// Limit requests of one key in flight; with MaxDurationNanos > 0 a request
// running longer is cut off at that duration (its context's deadline), and
// its slot is freed then.
type Concurrency struct {
	Limit            int64
	MaxDurationNanos int64
}

// concurrencyOf says whether p is replayed as a concurrency policy: when
// opts.Concurrency names it, or its algorithm is AlgConcurrency (limit
// LimitMilli/1000, max duration its max_duration).
func concurrencyOf(p policy.Policy, opts Options) (Concurrency, bool, error) {
	c, ok := opts.Concurrency[p.Name]
	if !ok && p.Algorithm == AlgConcurrency {
		c, ok = Concurrency{Limit: p.LimitMilli / lease.MilliPerToken, MaxDurationNanos: p.MaxDurationNanos}, true
	}
	if !ok {
		return c, false, nil
	}
	if c.Limit < 0 || c.Limit > lease.MaxSlots {
		return c, true, fmt.Errorf("policy %q: concurrency limit %d is outside [0, %d]", p.Name, c.Limit, lease.MaxSlots)
	}
	if c.MaxDurationNanos < 0 {
		return c, true, fmt.Errorf("policy %q: max_duration %v is negative", p.Name, time.Duration(c.MaxDurationNanos))
	}
	return c, true, nil
}

// endHeap holds the end times of one key's slot chains: an entry per slot
// busy at (or after) the current time, the smallest end first.
type endHeap []int64

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// slotKey is one key's slots.
type slotKey struct {
	ends     endHeap
	maxBusy  int64
	busyNano int64 // slot-time used by admitted requests
	lastEnd  int64
}

// slotState is a concurrency policy's replay state.
type slotState struct {
	cfg       Concurrency
	queueWait int64
	cutOff    int64
	queued    int64 // admitted after waiting
	waitNanos int64 // total wait of the queued ones
}

// claim is an admitted request's hold on a slot, for a chain refund.
type claim struct {
	end, run, wait int64
	cut, queued    bool
}

// admit decides a request of key k arriving at now and running dur.
func (s *slotState) admit(k *slotKey, now, dur int64) (lease.Decision, claim) {
	for len(k.ends) > 0 && k.ends[0] <= now {
		heap.Pop(&k.ends)
	}
	start := now
	var c claim
	if int64(len(k.ends)) >= s.cfg.Limit {
		if s.cfg.Limit == 0 {
			return lease.Decision{Reason: lease.ReasonExceedsCapacity, RetryAfter: lease.RetryNever}, claim{}
		}
		if k.ends[0]-now > s.queueWait {
			return lease.Decision{Reason: lease.ReasonLimit, RetryAfter: time.Duration(k.ends[0] - now)}, claim{}
		}
		start = heap.Pop(&k.ends).(int64) // FIFO: the earliest slot to free
		s.queued++
		s.waitNanos += start - now
		c.queued, c.wait = true, start-now
	}
	run := dur
	if m := s.cfg.MaxDurationNanos; m > 0 && dur > m {
		run = m
		s.cutOff++
		c.cut = true
	}
	// A zero-length request counts as in flight at its start only.
	end := start + run
	heap.Push(&k.ends, end)
	k.busyNano += run
	remaining := (s.cfg.Limit - int64(len(k.ends))) * lease.MilliPerToken
	c.end, c.run = end, run
	return lease.Decision{Allowed: true, Reason: lease.ReasonOK, RemainingMilli: max(0, remaining)}, c
}

// settle records the key's figures once the request's claim c stands
// (after the chain's verdict).
func (k *slotKey) settle(c claim) {
	k.maxBusy = max(k.maxBusy, int64(len(k.ends)))
	k.lastEnd = max(k.lastEnd, c.end)
}

// refund removes claim c (a later chain policy rejected the request).
func (s *slotState) refund(k *slotKey, c claim) {
	for i, e := range k.ends {
		if e == c.end {
			heap.Remove(&k.ends, i)
			break
		}
	}
	k.busyNano -= c.run
	if c.cut {
		s.cutOff--
	}
	if c.queued {
		s.queued--
		s.waitNanos -= c.wait
	}
}

// ConcurrencyResult is a concurrency policy's figures.
type ConcurrencyResult struct {
	Limit int64 `json:"limit"`
	// MaxDurationMs is the max_duration in milliseconds, 0 when none.
	MaxDurationMs float64 `json:"max_duration_ms,omitempty"`
	Keys          int     `json:"keys"`
	// MaxInFlight is the most requests of one key running at once.
	MaxInFlight int64 `json:"max_in_flight"`
	// Utilisation is the slot-time admitted requests used divided by the
	// slot-time available: Limit × keys × the span from the trace start to
	// the last admitted request's end, in percent with one decimal.
	Utilisation string `json:"utilisation"`
	// CutOff counts admitted requests whose duration exceeded max_duration.
	CutOff int64 `json:"cut_off"`
	// Queued counts requests admitted after waiting for a slot
	// (Options.QueueWait), and QueuedWaitMs their total wait.
	Queued       int64   `json:"queued,omitempty"`
	QueuedWaitMs float64 `json:"queued_wait_ms,omitempty"`
}

func (s *slotState) result(keys []*slotKey, base int64) *ConcurrencyResult {
	r := &ConcurrencyResult{Limit: s.cfg.Limit, Keys: len(keys), CutOff: s.cutOff, Queued: s.queued,
		MaxDurationMs: float64(s.cfg.MaxDurationNanos) / 1e6, QueuedWaitMs: float64(s.waitNanos) / 1e6}
	var busy, last int64
	for _, k := range keys {
		r.MaxInFlight = max(r.MaxInFlight, k.maxBusy)
		busy += k.busyNano
		last = max(last, k.lastEnd)
	}
	span := last - base
	r.Utilisation = "-"
	if span > 0 && s.cfg.Limit > 0 {
		r.Utilisation = percentBig(busy, new(big.Int).Mul(big.NewInt(span), big.NewInt(s.cfg.Limit*int64(len(keys)))))
	}
	return r
}

// percentBig is Percent with a whole that may exceed int64.
func percentBig(part int64, whole *big.Int) string {
	if whole.Sign() <= 0 || part < 0 || big.NewInt(part).Cmp(whole) > 0 {
		return "-"
	}
	n := new(big.Int).Mul(big.NewInt(part), big.NewInt(2000))
	n.Add(n, whole)
	d := new(big.Int).Lsh(whole, 1)
	tenths := n.Quo(n, d).Int64()
	return fmt.Sprintf("%d.%d%%", tenths/10, tenths%10)
}

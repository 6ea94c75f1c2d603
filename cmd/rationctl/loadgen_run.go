package main

import (
	"context"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/costmix"
)

// loadSpec is what loadgen offers: replicas × rate requests/s, changed by
// shifts, with costs drawn from mix, for duration.
type loadSpec struct {
	replicas int
	rate     float64
	shifts   []shift
	mix      costmix.Mix
	duration time.Duration
}

// segment: from from on, a replica offers rate requests/s.
type segment struct {
	from time.Duration
	rate float64
}

// segments returns replica i's (0-based) offered rate over time, in order.
func (s loadSpec) segments(i int) []segment {
	var sh []shift
	for _, x := range s.shifts {
		if x.replica == i+1 {
			sh = append(sh, x)
		}
	}
	sort.SliceStable(sh, func(a, b int) bool { return sh[a].at < sh[b].at })
	out := []segment{{0, s.rate}}
	for _, x := range sh {
		if x.at == 0 {
			out[0].rate = x.rate
			continue
		}
		out = append(out, segment{x.at, x.rate})
	}
	return out
}

// rateAt is the offered rate of segs at t.
func rateAt(segs []segment, t time.Duration) float64 {
	r := 0.0
	for _, s := range segs {
		if s.from <= t {
			r = s.rate
		}
	}
	return r
}

// requestsDue is how many requests segs has offered by el: the integral of
// its rate over [0, el], rounded down (a hair of slack absorbs the
// floating-point error of a whole number).
func requestsDue(segs []segment, el time.Duration) int64 {
	total := 0.0
	for k, s := range segs {
		if s.from >= el {
			break
		}
		end := el
		if k+1 < len(segs) && segs[k+1].from < el {
			end = segs[k+1].from
		}
		total += s.rate * (end - s.from).Seconds()
	}
	return int64(math.Floor(total + 1e-9))
}

// admission is one recorded admission: when (since the run's start) and
// what it cost.
type admission struct {
	at        int64 // nanoseconds since the start
	costMilli int64
}

// reasonSlots bounds the Reason values counted per replica.
const reasonSlots = 16

// replicaRun is what one replica did. The per-second counters are read
// live by the reporter; the rest only after the run.
type replicaRun struct {
	offered, admitted []atomic.Int64 // milli-tokens per second of the run
	requests, granted int64          // requests offered, admitted
	offeredMilli      int64
	reasons           [reasonSlots]int64
	hist              []admission
}

// loadRun is a finished run.
type loadRun struct {
	spec    loadSpec
	elapsed time.Duration // the run's length: the duration, unless interrupted
	reps    []*replicaRun
}

// secondRow is one row of the live table: what was offered and admitted in
// [from, to).
type secondRow struct {
	from, to          time.Duration
	offered, admitted []int64 // per replica, milli-tokens
}

// interval is the pacing ticker's period for a replica whose highest rate
// is maxRate: one request per tick up to 1000/s, then several per tick.
func interval(maxRate float64) time.Duration {
	d := time.Duration(float64(time.Second) / maxRate)
	return min(max(d, time.Millisecond), 100*time.Millisecond)
}

// runLoad runs spec: replica i calls allow[i] for each request. live, if
// not nil, gets every second's row in order: each as soon as the second
// (plus a short grace) is over, the last when the run ends. Every replica
// stops at the duration, or when ctx ends, having offered at most the
// requests its schedule holds.
func runLoad(ctx context.Context, spec loadSpec, allow []func(int64) client.Decision, live func(secondRow)) *loadRun {
	nsec := int((spec.duration + time.Second - 1) / time.Second)
	run := &loadRun{spec: spec, reps: make([]*replicaRun, spec.replicas)}
	for i := range run.reps {
		run.reps[i] = &replicaRun{offered: make([]atomic.Int64, nsec), admitted: make([]atomic.Int64, nsec)}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, r := range run.reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.drive(ctx, start, spec, i, allow[i])
		}()
	}
	done := make(chan struct{})
	reported := make(chan struct{})
	row := func(s int, end time.Duration) secondRow {
		sr := secondRow{from: time.Duration(s) * time.Second, to: min(time.Duration(s+1)*time.Second, end)}
		for _, r := range run.reps {
			sr.offered = append(sr.offered, r.offered[s].Load())
			sr.admitted = append(sr.admitted, r.admitted[s].Load())
		}
		return sr
	}
	go func() {
		defer close(reported)
		const grace = 30 * time.Millisecond
		s := 0
		for ; s < nsec; s++ {
			end := min(time.Duration(s+1)*time.Second, spec.duration)
			if end == spec.duration {
				break // the last row waits for the end of the run
			}
			t := time.NewTimer(time.Until(start.Add(end + grace)))
			select {
			case <-t.C:
				if live != nil {
					live(row(s, spec.duration))
				}
				continue
			case <-done:
				t.Stop()
			}
			break
		}
		<-done
		for ; s < nsec && time.Duration(s)*time.Second < run.elapsed; s++ {
			if live != nil {
				live(row(s, run.elapsed))
			}
		}
	}()
	wg.Wait()
	// The run lasts the whole duration (T in B + r·T) even when the
	// replicas' last requests came earlier, unless ctx ends it.
	end := time.NewTimer(time.Until(start.Add(spec.duration)))
	select {
	case <-end.C:
		run.elapsed = spec.duration
	case <-ctx.Done():
		end.Stop()
		run.elapsed = min(time.Since(start), spec.duration)
	}
	close(done)
	<-reported
	return run
}

// drive paces replica i: at each tick it offers the requests its schedule
// holds by then, and records each decision.
func (r *replicaRun) drive(ctx context.Context, start time.Time, spec loadSpec, i int, allow func(int64) client.Decision) {
	segs := spec.segments(i)
	total := requestsDue(segs, spec.duration)
	if total == 0 {
		return
	}
	maxRate := 0.0
	for _, s := range segs {
		maxRate = max(maxRate, s.rate)
	}
	rng := rand.New(rand.NewPCG(uint64(i)+1, 0x6c6f616467656e))
	last := len(r.offered) - 1
	tick := time.NewTicker(interval(maxRate))
	defer tick.Stop()
	for r.requests < total {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		el := time.Since(start)
		due := min(requestsDue(segs, el), total)
		for ; r.requests < due; r.requests++ {
			cost := spec.mix.Draw(rng)
			d := allow(cost)
			at := time.Since(start)
			slot := min(int(at/time.Second), last)
			costMilli := cost * 1000
			r.offeredMilli += costMilli
			r.offered[slot].Add(costMilli)
			r.reasons[min(int(d.Reason), reasonSlots-1)]++
			if d.Allowed && !d.Shadow {
				r.granted++
				r.admitted[slot].Add(costMilli)
				r.hist = append(r.hist, admission{at: at.Nanoseconds(), costMilli: costMilli})
			}
		}
		if el >= spec.duration {
			return
		}
	}
}

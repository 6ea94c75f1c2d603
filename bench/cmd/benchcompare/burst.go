package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ration-dev/ration/internal/quotacheck"
)

// Section 6: bursts (docs/design.md §3.2, "Leftover burst"). A holder
// whose demand steps up far below the limit must not be refused:
//   - alone: one client on r = B = 10^6 offers 100 calls/s, then
//     20 000/s for 2 s: refused calls in those 2 s (goal 0);
//   - four: four clients at 100/s on r = B = 10^4, one steps to 5 000/s
//     for 2 s: its admitted fraction in each 100 ms from the step (goal
//     ≥ 99% from the first), the others' refusals, and the most admitted
//     in any window against B + r·W.
//
// ration runs on the section's rationd cluster through client.Client
// (default leases: duration 5 s, renew_after 5s/3), each replica its own
// client; Redis GCRA on the same redis-server, each replica its own
// connection pool. Both systems run one after the other on their own keys.
// The load is open-loop: due calls are made by burstWorkers goroutines per
// replica, each pacing its share by the clock.

const (
	burstWorkers = 8
	burstTenth   = 100 * time.Millisecond
)

type burstCase struct {
	Name         string     `json:"name"`
	RatePerSec   int64      `json:"rate_per_sec"`
	Burst        int64      `json:"burst"`
	Replicas     int        `json:"replicas"`
	Before       int64      `json:"before_per_sec"`
	After        int64      `json:"after_per_sec"`
	WarmupNanos  int64      `json:"warmup_ns"`
	StepForNanos int64      `json:"step_for_ns"`
	Rows         []burstRow `json:"systems"`
}

type burstRow struct {
	System         string  `json:"system"`
	Offered        int64   `json:"stepper_offered"`
	Refused        int64   `json:"stepper_refused"`
	Errors         int64   `json:"errors"`
	PerTenth       []int64 `json:"stepper_admitted_per_100ms"`
	OfferedTenth   []int64 `json:"stepper_offered_per_100ms"`
	WorstTenth     float64 `json:"worst_100ms_admitted_fraction"`
	OthersOffered  int64   `json:"others_offered"`
	OthersRefused  int64   `json:"others_refused"`
	BoundHeld      bool    `json:"bound_held_every_window"`
	WorstWindowPct float64 `json:"fullest_1s_window_pct_of_bound"`
}

type burstResult struct {
	Cases []burstCase `json:"cases"`
}

// burstReplica paces one replica's calls: before/s until stepAt, after/s
// from then on (after == before: no step), until end.
func burstReplica(d decide, who int, start time.Time, before, after int64, stepAt, end time.Duration, rec func(who int, at time.Duration, ok bool, err error)) {
	var wg sync.WaitGroup
	for w := range burstWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			due := func(now time.Duration) int64 {
				n := int64(min(now, stepAt)) * before / int64(time.Second)
				if now > stepAt {
					n += int64(now-stepAt) * after / int64(time.Second)
				}
				return n
			}
			made := int64(0) // this worker's calls: every burstWorkers-th of the due ones
			for {
				now := time.Since(start)
				if now >= end {
					return
				}
				total := due(now)
				mine := total / burstWorkers
				if int64(w) < total%burstWorkers {
					mine++
				}
				if made >= mine {
					time.Sleep(500 * time.Microsecond)
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ok, err := d(ctx)
				cancel()
				rec(who, time.Since(start), ok, err)
				made++
			}
		}()
	}
	wg.Wait()
}

func (e *env) burstSection() (*burstResult, error) {
	res := &burstResult{}
	for _, c := range []struct {
		name, policy  string
		q             quota
		replicas      int
		before, after int64
	}{
		{"alone", "burst-alone", quota{1_000_000, 1_000_000}, 1, 100, 20_000},
		{"four", "burst-four", quota{10_000, 10_000}, 4, 100, 5_000},
	} {
		bc := burstCase{Name: c.name, RatePerSec: c.q.ratePerSec, Burst: c.q.burst, Replicas: c.replicas, Before: c.before, After: c.after,
			WarmupNanos: int64(e.o.burstWarmup), StepForNanos: int64(2 * time.Second)}
		for _, sys := range []string{sysRation, sysRedis} {
			var ds []decide
			var closers []func()
			for i := range c.replicas {
				switch sys {
				case sysRation:
					d, closeFn, err := rationDecider(e.cluster.servers(), fmt.Sprintf("%s-%d-%d", c.name, i, time.Now().UnixNano()), c.policy, c.name)
					if err != nil {
						return nil, err
					}
					ds, closers = append(ds, d), append(closers, closeFn)
				case sysRedis:
					rdb := newRedisClient(e.redis.addr, burstWorkers)
					ds, closers = append(ds, redisDecider(rdb, "burst-"+c.name, c.q)), append(closers, func() { rdb.Close() })
				}
			}
			row := runBurst(ds, c.q, c.before, c.after, e.o.burstWarmup, 2*time.Second)
			row.System = sys
			for _, f := range closers {
				f()
			}
			fmt.Fprintf(os.Stderr, "  burst %s: %-24s stepper refused %d of %d (worst 100 ms %.1f%% admitted), others refused %d of %d, bound held %v\n",
				c.name, sys, row.Refused, row.Offered, 100*row.WorstTenth, row.OthersRefused, row.OthersOffered, row.BoundHeld)
			bc.Rows = append(bc.Rows, row)
		}
		res.Cases = append(res.Cases, bc)
	}
	return res, nil
}

func runBurst(ds []decide, q quota, before, after int64, warmup, stepFor time.Duration) burstRow {
	start := time.Now()
	end := warmup + stepFor
	n := int((stepFor + burstTenth - 1) / burstTenth)
	row := burstRow{PerTenth: make([]int64, n), OfferedTenth: make([]int64, n)}
	var mu sync.Mutex
	var hist []quotacheck.Admission
	rec := func(who int, at time.Duration, ok bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			row.Errors++
		}
		if ok {
			hist = append(hist, quotacheck.Admission{AtNanos: int64(at), CostMilli: 1000, Who: fmt.Sprint(who)})
		}
		if at < warmup {
			return
		}
		if who == 0 {
			row.Offered++
			b := min(int((at-warmup)/burstTenth), n-1)
			row.OfferedTenth[b]++
			if ok {
				row.PerTenth[b]++
			} else {
				row.Refused++
			}
		} else {
			row.OthersOffered++
			if !ok {
				row.OthersRefused++
			}
		}
	}
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := before
			if i == 0 {
				a = after
			}
			burstReplica(d, i, start, before, a, warmup, end, rec)
		}()
	}
	wg.Wait()
	row.WorstTenth = 1
	for b := range row.PerTenth {
		if row.OfferedTenth[b] > 0 {
			row.WorstTenth = min(row.WorstTenth, float64(row.PerTenth[b])/float64(row.OfferedTenth[b]))
		}
	}
	bound := quotacheck.Bound{CapacityMilli: q.burst * 1000, RateMilliPerSec: q.ratePerSec * 1000}
	row.BoundHeld = quotacheck.Check(hist, bound) == nil
	ts := make([]int64, len(hist))
	for i, a := range hist {
		ts[i] = a.AtNanos
	}
	sort.Slice(ts, func(a, b int) bool { return ts[a] < ts[b] })
	row.WorstWindowPct = 100 * float64(maxIn(ts, time.Second)) / float64(q.burst+q.ratePerSec)
	return row
}

func writeBurstMarkdown(p func(string, ...any), r *burstResult) {
	p("## 6. Bursts\n\n")
	for _, c := range r.Cases {
		p("**%s**: r = %d/s, B = %d, %d replica(s) at %d calls/s for %v, then replica 0 at %d/s for %v.\n\n",
			c.Name, c.RatePerSec, c.Burst, c.Replicas, c.Before, time.Duration(c.WarmupNanos), c.After, time.Duration(c.StepForNanos))
		p("| system | stepper refused | worst 100 ms admitted | others refused | fullest 1 s window (of B + r·W) | B + r·W held | errors |\n|---|---:|---:|---:|---:|---|---:|\n")
		for _, x := range c.Rows {
			p("| %s | %d of %d | %.1f%% | %d of %d | %.1f%% | %v | %d |\n", x.System, x.Refused, x.Offered, 100*x.WorstTenth,
				x.OthersRefused, x.OthersOffered, x.WorstWindowPct, x.BoundHeld, x.Errors)
		}
		p("\nAdmitted/offered by replica 0 per 100 ms from the step:\n\n")
		for _, x := range c.Rows {
			var b strings.Builder
			for i := range x.PerTenth {
				fmt.Fprintf(&b, " %d/%d", x.PerTenth[i], x.OfferedTenth[i])
			}
			p("- %s:%s\n", x.System, b.String())
		}
		p("\n")
	}
}

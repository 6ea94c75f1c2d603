package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/ration-dev/ration/internal/quotacheck"
)

// Section 2: global accuracy. Four replicas share one quota (r = 200
// tokens/s, B = 200) and together offer three times r: each offers 150
// requests/s of cost 1, paced open-loop, until T/2, when replica 1 stops
// (the demand shift) and the other three go on. Every admission's time is
// recorded on this process's monotonic clock, and the history is checked
// exactly, as rationctl loadgen does:
//   - utilization: admitted ÷ (B + r·T);
//   - for W in {100ms, 1s, 10s}: the most admitted in any window of length
//     W (exact, every window), against B + r·W;
//   - whether B + r·W held for every W at once (internal/quotacheck);
//   - re-convergence: from the shift to the first 1s window in which the
//     three remaining replicas admit >= 90% of r·1s (loadgen's definition).
// All systems run at the same time (the load is light: 600 decisions/s
// each), each on its own key, so they share one machine state.

var sharedQuota = quota{ratePerSec: 200, burst: 200}

const (
	accReplicas      = 4
	accPerReplicaRPS = 150.0 // 4 × 150 = 3 × r
	convergeShare    = 0.9
)

// accuracyResult is section 2.
type accuracyResult struct {
	RatePerSec    int64         `json:"rate_per_sec"`
	Burst         int64         `json:"burst"`
	DurationNanos int64         `json:"duration_ns"`
	ShiftAtNanos  int64         `json:"shift_at_ns"`
	Offered       string        `json:"offered"`
	Rows          []accuracyRow `json:"systems"`
}

type windowJSON struct {
	WindowNanos int64   `json:"window_ns"`
	MostMilli   int64   `json:"most_admitted"` // tokens
	Bound       int64   `json:"bound"`         // B + r·W, tokens
	Ratio       float64 `json:"ratio"`         // most ÷ bound
}

type accuracyRow struct {
	System             string       `json:"system"`
	Offered            int64        `json:"offered"`
	Admitted           int64        `json:"admitted"`
	Errors             int64        `json:"errors"`
	Utilization        float64      `json:"utilization"`
	Windows            []windowJSON `json:"windows"`
	BoundHeld          bool         `json:"bound_held_every_window"`
	WorstExcess        int64        `json:"worst_excess_tokens,omitempty"`
	Converged          bool         `json:"converged"`
	ConvergenceNanos   int64        `json:"convergence_ns"`
	PerReplicaAdmitted []int64      `json:"per_replica_admitted"`
}

// accTarget is one system: one decide per replica.
type accTarget struct {
	name    string
	replica []decide
}

func (e *env) accuracy() (*accuracyResult, error) {
	T := e.o.accuracyFor
	var targets []accTarget
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()

	// ration: four client.Client replicas, each with its own ID and lease.
	rt := accTarget{name: sysRation}
	for i := range accReplicas {
		d, closeFn, err := rationDecider(e.cluster.servers(), fmt.Sprintf("acc-replica-%d", i+1), "shared", "acc")
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeFn)
		rt.replica = append(rt.replica, d)
	}
	targets = append(targets, rt)

	rd := accTarget{name: sysRedis}
	for range accReplicas {
		rdb := newRedisClient(e.redis.addr, 4)
		closers = append(closers, func() { rdb.Close() })
		rd.replica = append(rd.replica, redisDecider(rdb, "acc", sharedQuota))
	}
	targets = append(targets, rd)

	for _, global := range []bool{true, false} {
		name, gname := sysGuberLocal, "acc-local"
		if global {
			name, gname = sysGuberGlobal, "acc-global"
		}
		t := accTarget{name: name}
		for i := range accReplicas {
			t.replica = append(t.replica, e.guber.decider(i, gname, "acc", sharedQuota, global))
		}
		targets = append(targets, t)
	}

	x4 := accTarget{name: sysXRate4}
	split := accTarget{name: sysXRateSplit}
	for range accReplicas {
		x4.replica = append(x4.replica, xrateDecider(sharedQuota))
		split.replica = append(split.replica, xrateDecider(quota{sharedQuota.ratePerSec / accReplicas, sharedQuota.burst / accReplicas}))
	}
	targets = append(targets, x4, split)

	shiftAt := T / 2
	res := &accuracyResult{RatePerSec: sharedQuota.ratePerSec, Burst: sharedQuota.burst, DurationNanos: int64(T),
		ShiftAtNanos: int64(shiftAt), Offered: fmt.Sprintf("4 replicas × %.0f req/s (3 × r); replica 1 stops at T/2", accPerReplicaRPS)}
	rows := make([]accuracyRow, len(targets))
	var wg sync.WaitGroup
	fmt.Fprintf(os.Stderr, "  accuracy: %d systems at once for %v (shift at %v)\n", len(targets), T, shiftAt)
	for k, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows[k] = runAccuracy(t, T, shiftAt)
		}()
	}
	wg.Wait()
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "  accuracy: %-26s utilization %.3f  worst 1s %.2f× of B+r·W  bound held %v  re-converged %v after %v\n",
			r.System, r.Utilization, r.Windows[1].Ratio, r.BoundHeld, r.Converged, time.Duration(r.ConvergenceNanos))
	}
	res.Rows = rows
	return res, nil
}

// stamp is one admission, nanoseconds since the run's start.
type stamp = int64

func runAccuracy(t accTarget, T, shiftAt time.Duration) accuracyRow {
	row := accuracyRow{System: t.name, PerReplicaAdmitted: make([]int64, len(t.replica))}
	hists := make([][]stamp, len(t.replica))
	offered := make([]int64, len(t.replica))
	errs := make([]int64, len(t.replica))
	start := time.Now()
	var wg sync.WaitGroup
	for i, d := range t.replica {
		wg.Add(1)
		go func() {
			defer wg.Done()
			until := T
			if i == 0 {
				until = shiftAt
			}
			n := int64(accPerReplicaRPS * until.Seconds())
			interval := time.Duration(int64(time.Second) * 10 / int64(accPerReplicaRPS*10))
			// Replicas start out of phase so their requests do not all arrive at once.
			phase := time.Duration(i) * interval / time.Duration(len(t.replica))
			for k := range n {
				due := phase + time.Duration(k)*interval
				if wait := due - time.Since(start); wait > 0 {
					time.Sleep(wait)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				ok, err := d(ctx)
				cancel()
				at := time.Since(start)
				offered[i]++
				if err != nil {
					errs[i]++
				} else if ok {
					hists[i] = append(hists[i], int64(at))
				}
			}
		}()
	}
	wg.Wait()

	var all []stamp
	var remaining []stamp // replicas 2..4, for re-convergence
	for i, h := range hists {
		row.PerReplicaAdmitted[i] = int64(len(h))
		row.Offered += offered[i]
		row.Errors += errs[i]
		all = append(all, h...)
		if i > 0 {
			remaining = append(remaining, h...)
		}
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	sort.Slice(remaining, func(a, b int) bool { return remaining[a] < remaining[b] })
	r, b := sharedQuota.ratePerSec, sharedQuota.burst
	row.Admitted = int64(len(all))
	row.Utilization = float64(row.Admitted) / (float64(b) + float64(r)*T.Seconds())
	for _, w := range []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second} {
		most := mostInWindow(all, int64(w))
		bound := b + r*int64(w)/int64(time.Second)
		row.Windows = append(row.Windows, windowJSON{WindowNanos: int64(w), MostMilli: most, Bound: bound, Ratio: float64(most) / float64(bound)})
	}
	h := make([]quotacheck.Admission, len(all))
	for k, at := range all {
		h[k] = quotacheck.Admission{AtNanos: at, CostMilli: 1000}
	}
	v := quotacheck.Check(h, quotacheck.Bound{CapacityMilli: b * 1000, RateMilliPerSec: r * 1000})
	row.BoundHeld = v == nil
	if v != nil {
		row.WorstExcess = (v.AdmittedMilli - v.AllowedMilli) / 1000
	}
	target := int64(convergeShare*float64(r) + 0.999999)
	if a, ok := convergeAt(remaining, int64(shiftAt), int64(T), int64(time.Second), target); ok {
		row.Converged, row.ConvergenceNanos = true, a-int64(shiftAt)
	}
	return row
}

// mostInWindow is the most admissions in any closed window [a, a+w] of the
// sorted times h: the tightest such window starts at an admission.
func mostInWindow(h []stamp, w int64) int64 {
	var most int64
	j := 0
	for i := range h {
		for j < len(h) && h[j]-h[i] <= w {
			j++
		}
		most = max(most, int64(j-i))
	}
	return most
}

// convergeAt returns the earliest a >= from with a+w <= end at which the
// closed window [a, a+w] of the sorted times h holds at least target
// admissions (rationctl loadgen's definition).
func convergeAt(h []stamp, from, end, w, target int64) (int64, bool) {
	cands := []int64{from}
	for _, at := range h {
		if c := at - w; c > from {
			cands = append(cands, c)
		}
	}
	lo := sort.Search(len(h), func(k int) bool { return h[k] >= from })
	hi := lo
	var sum int64
	for _, a := range cands {
		if a+w > end {
			return 0, false
		}
		for hi < len(h) && h[hi] <= a+w {
			sum++
			hi++
		}
		for lo < hi && h[lo] < a {
			sum--
			lo++
		}
		if sum >= target {
			return a, true
		}
	}
	return 0, false
}

package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Section 1: the cost of one decision. Each system answers cost-1
// decisions on one key whose quota is far above what the run can offer, so
// every decision takes the admitting path. For each concurrency, two
// closed-loop phases run one after the other:
//   - throughput: the callers decide as fast as they can, untimed; the
//     decisions per second, and per CPU-second of everything the system
//     runs (this process plus its server processes), come from here;
//   - latency: the same, each call timed (time.Now before and after, which
//     adds ~20-40 ns to every figure, ration's and x/time/rate's most).

// decisionRow is one system at one concurrency.
type decisionRow struct {
	System           string  `json:"system"`
	Callers          int     `json:"callers"`
	DecisionsPerSec  float64 `json:"decisions_per_sec"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	DecisionsPerCPUs float64 `json:"decisions_per_cpu_second"`
	P50Nanos         float64 `json:"p50_ns"`
	P99Nanos         float64 `json:"p99_ns"`
	P999Nanos        float64 `json:"p999_ns"`
	Samples          int64   `json:"latency_samples"`
	Errors           int64   `json:"errors"`
	Denied           int64   `json:"denied"`
}

// decisionTarget is one system under section 1.
type decisionTarget struct {
	name string
	// deciders returns one decide per caller (they may share state).
	deciders func(callers int) []decide
	// serverPIDs are the processes besides this one that serve it.
	serverPIDs func() []int
	// serverOnly counts only serverPIDs' CPU, not this process's (section
	// 5: the service under test runs in other processes; this one is the
	// load generator, the same for every system).
	serverOnly bool
}

// maxOpsPerCaller bounds each phase in count as well as in time.
const maxOpsPerCaller = 20_000_000

func runDecisionCost(targets []decisionTarget, callers []int, throughputFor, latencyFor time.Duration) []decisionRow {
	var rows []decisionRow
	for _, t := range targets {
		for _, n := range callers {
			row := measureDecisions(t, n, throughputFor, latencyFor)
			fmt.Fprintf(os.Stderr, "  decision cost: %-26s callers=%-4d %12.0f decisions/s  p50 %8.0f ns  p99 %9.0f ns  p99.9 %9.0f ns  errors %d\n",
				t.name, n, row.DecisionsPerSec, row.P50Nanos, row.P99Nanos, row.P999Nanos, row.Errors)
			rows = append(rows, row)
		}
	}
	return rows
}

func measureDecisions(t decisionTarget, n int, throughputFor, latencyFor time.Duration) decisionRow {
	ds := t.deciders(n)
	ctx := context.Background()
	row := decisionRow{System: t.name, Callers: n}

	// Warm up: connections open, leases held, caches filled.
	for _, d := range ds {
		for range 10 {
			_, _ = d(ctx)
		}
	}

	// Throughput, untimed.
	var stop atomic.Bool
	var ops, errs, denied atomic.Int64
	var wg sync.WaitGroup
	cpu0, srv0 := selfCPU(), cpuOf(t.serverPIDs()...)
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func(d decide) {
			defer wg.Done()
			var k, e, no int64
			for k < maxOpsPerCaller && (k&63 != 0 || !stop.Load()) {
				ok, err := d(ctx)
				k++
				if err != nil {
					e++
				} else if !ok {
					no++
				}
			}
			ops.Add(k)
			errs.Add(e)
			denied.Add(no)
		}(ds[i])
	}
	time.Sleep(throughputFor)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	row.CPUSeconds = cpuOf(t.serverPIDs()...) - srv0
	if !t.serverOnly {
		row.CPUSeconds += selfCPU() - cpu0
	}
	row.DecisionsPerSec = float64(ops.Load()) / elapsed.Seconds()
	if row.CPUSeconds > 0 {
		row.DecisionsPerCPUs = float64(ops.Load()) / row.CPUSeconds
	}

	// Latency, every call timed.
	stop.Store(false)
	hs := make([]hist, n)
	for i := range n {
		wg.Add(1)
		go func(d decide, h *hist) {
			defer wg.Done()
			var k, e, no int64
			for k < maxOpsPerCaller && (k&63 != 0 || !stop.Load()) {
				t0 := time.Now()
				ok, err := d(ctx)
				h.record(time.Since(t0))
				k++
				if err != nil {
					e++
				} else if !ok {
					no++
				}
			}
			errs.Add(e)
			denied.Add(no)
		}(ds[i], &hs[i])
	}
	time.Sleep(latencyFor)
	stop.Store(true)
	wg.Wait()
	var all hist
	for i := range hs {
		all.merge(&hs[i])
	}
	row.P50Nanos, row.P99Nanos, row.P999Nanos = all.quantile(0.5), all.quantile(0.99), all.quantile(0.999)
	row.Samples = all.n
	row.Errors, row.Denied = errs.Load(), denied.Load()
	return row
}

// Names of the systems, as the tables and the chart show them.
const (
	sysRation      = "ration"
	sysRedis       = "Redis GCRA (redis_rate)"
	sysGuberGlobal = "Gubernator GLOBAL"
	sysGuberLocal  = "Gubernator"
	sysXRate       = "x/time/rate"
	sysXRate4      = "4 × x/time/rate"
	sysXRateSplit  = "4 × x/time/rate at r/4"
)

var hotQuota = quota{ratePerSec: 1_000_000_000, burst: 1_000_000_000}

func (e *env) decisionCost() ([]decisionRow, error) {
	ration, closeRation, err := rationDecider(e.cluster.servers(), "bench-decide", "hot", "hot")
	if err != nil {
		return nil, err
	}
	defer closeRation()
	rdb := newRedisClient(e.redis.addr, 256)
	defer rdb.Close()
	redisD := redisDecider(rdb, "hot", hotQuota)
	xr := xrateDecider(hotQuota)
	same := func(d decide) func(int) []decide {
		return func(n int) []decide {
			out := make([]decide, n)
			for i := range out {
				out[i] = d
			}
			return out
		}
	}
	guber := func(global bool) func(int) []decide {
		return func(n int) []decide {
			out := make([]decide, n)
			for i := range out {
				out[i] = e.guber.decider(i, "hot", "hot", hotQuota, global)
			}
			return out
		}
	}
	none := func() []int { return nil }
	targets := []decisionTarget{
		{name: sysRation, deciders: same(ration), serverPIDs: e.cluster.pids},
		{name: sysXRate, deciders: same(xr), serverPIDs: none},
		{name: sysRedis, deciders: same(redisD), serverPIDs: func() []int { return []int{e.redis.pid()} }},
		{name: sysGuberLocal, deciders: guber(false), serverPIDs: none},
		{name: sysGuberGlobal, deciders: guber(true), serverPIDs: none},
	}
	return runDecisionCost(targets, e.o.callers, e.o.throughputFor, e.o.latencyFor), nil
}

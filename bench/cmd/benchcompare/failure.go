package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Section 4: what a failure costs. Eight callers offer 4000 decisions/s in
// all (paced, open loop) on a key with ample quota, for failureFor; at a
// quarter of the run the fault strikes:
//   - ration: SIGKILL to the Raft leader (the other two elect a new one;
//     the killed node stays down);
//   - Redis: SIGKILL to redis-server, restarted 2s later (no persistence:
//     the limiter's state is gone, as after a restart without AOF).
// Per second: decisions answered (allowed), failed (an error, or ration's
// Unavailable/NoLease), and the p99 latency of all calls.

const (
	failCallers  = 8
	failRatePerS = 4000
	redisDown    = 2 * time.Second
)

type failureSecond struct {
	Second   int     `json:"second"`
	Allowed  int64   `json:"allowed"`
	Failed   int64   `json:"failed"`
	P99Nanos float64 `json:"p99_ns"`
}

type failureResult struct {
	System        string          `json:"system"`
	Fault         string          `json:"fault"`
	FaultAtNanos  int64           `json:"fault_at_ns"`
	Offered       int64           `json:"offered"`
	Allowed       int64           `json:"allowed"`
	Failed        int64           `json:"failed"`
	WorstSecond   int64           `json:"worst_second_allowed"`
	P99Nanos      float64         `json:"p99_ns"`
	P99FaultNanos float64         `json:"p99_fault_second_ns"`
	Seconds       []failureSecond `json:"seconds"`
}

func (e *env) failureCost() ([]failureResult, error) {
	var out []failureResult
	ration, closeRation, err := rationDecider(e.cluster.servers(), "bench-failover", "failover", "failover")
	if err != nil {
		return nil, err
	}
	r, err := runFailure(sysRation, "SIGKILL to the Raft leader", ration, e.o.failureFor, func() error {
		leader, err := e.cluster.waitLeader(10 * time.Second)
		if err != nil {
			return err
		}
		e.cluster.kill(leader)
		return nil
	})
	closeRation()
	if err != nil {
		return nil, err
	}
	out = append(out, r)

	rdb := newRedisClient(e.redis.addr, 32)
	defer rdb.Close()
	r, err = runFailure(sysRedis, fmt.Sprintf("SIGKILL to redis-server, restarted %v later", redisDown), redisDecider(rdb, "failover", hotQuota), e.o.failureFor, func() error {
		e.redis.kill()
		time.Sleep(redisDown)
		return e.redis.start()
	})
	if err != nil {
		return nil, err
	}
	out = append(out, r)
	return out, nil
}

func runFailure(name, fault string, d decide, T time.Duration, inject func() error) (failureResult, error) {
	res := failureResult{System: name, Fault: fault, FaultAtNanos: int64(T / 4)}
	secs := int(T / time.Second)
	allowed := make([]atomic.Int64, secs+1)
	failed := make([]atomic.Int64, secs+1)
	hs := make([][]hist, failCallers)
	for i := range hs {
		hs[i] = make([]hist, secs+1)
	}
	start := time.Now()
	perCaller := int64(failRatePerS / failCallers * T.Seconds())
	interval := time.Second * failCallers / failRatePerS
	var wg sync.WaitGroup
	for c := range failCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			phase := time.Duration(c) * interval / failCallers
			for k := range perCaller {
				due := phase + time.Duration(k)*interval
				if wait := due - time.Since(start); wait > 0 {
					time.Sleep(wait)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				t0 := time.Now()
				ok, err := d(ctx)
				lat := time.Since(t0)
				cancel()
				s := min(int(time.Since(start)/time.Second), secs)
				hs[c][s].record(lat)
				if err == nil && ok {
					allowed[s].Add(1)
				} else {
					failed[s].Add(1)
				}
			}
		}()
	}
	time.Sleep(T / 4)
	injectErr := inject()
	wg.Wait()
	if injectErr != nil {
		return res, fmt.Errorf("%s: injecting %s: %w", name, fault, injectErr)
	}
	var all hist
	res.WorstSecond = -1
	for s := range secs {
		var h hist
		for c := range hs {
			h.merge(&hs[c][s])
		}
		all.merge(&h)
		fs := failureSecond{Second: s, Allowed: allowed[s].Load(), Failed: failed[s].Load(), P99Nanos: h.quantile(0.99)}
		res.Seconds = append(res.Seconds, fs)
		res.Allowed += fs.Allowed
		res.Failed += fs.Failed
		if res.WorstSecond < 0 || fs.Allowed < res.WorstSecond {
			res.WorstSecond = fs.Allowed
		}
		if s == int(T/4/time.Second) {
			res.P99FaultNanos = fs.P99Nanos
		}
	}
	res.Allowed += allowed[secs].Load()
	res.Failed += failed[secs].Load()
	res.Offered = res.Allowed + res.Failed
	res.P99Nanos = all.quantile(0.99)
	fmt.Fprintf(os.Stderr, "  failure: %-26s %s: allowed %d, failed %d, worst second %d allowed, p99 %.0f ns (fault second %.0f ns)\n",
		name, fault, res.Allowed, res.Failed, res.WorstSecond, res.P99Nanos, res.P99FaultNanos)
	return res, nil
}

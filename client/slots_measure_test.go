package client_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestSlotUtilizationAtThreeTimesLoad (a concurrency policy's measured
// utilization on a real cluster; docs/concurrency.md §5): four replicas
// with 3N request workers between them, each request holding its slot for
// 20 ms, against a real 3-server cluster. It reports the busy fraction of
// the N slots (the in-flight count sampled every millisecond over 10 s) and
// fails if more than N ever ran at once.
//
//	RATION_MEASURE=1 go test -count=1 -v -run TestSlotUtilizationAtThreeTimesLoad ./client
func TestSlotUtilizationAtThreeTimesLoad(t *testing.T) {
	if os.Getenv("RATION_MEASURE") == "" {
		t.Skip("a measurement: set RATION_MEASURE=1")
	}
	const N, replicas = 12, 4
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(slotYAML, N))
	var f inflight
	var stop atomic.Bool
	var wg sync.WaitGroup
	per := make([]atomic.Int64, replicas)
	for i := range replicas {
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("replica-%d", i)})
		s := newSlots(t, cl, "acme")
		for range 3 * N / replicas {
			wg.Add(1)
			go func() { defer wg.Done(); f.run(t, s, 20*time.Millisecond, &stop, &per[i]) }()
		}
	}
	// Warm-up: every replica has run requests.
	testcluster.WaitFor(t, 60*time.Second, func() error {
		for i := range per {
			if per[i].Load() < 20 {
				return fmt.Errorf("replica-%d ran %d requests", i, per[i].Load())
			}
		}
		return nil
	})
	var samples, sum int64
	tick := time.NewTicker(time.Millisecond)
	end := time.Now().Add(10 * time.Second)
	done0 := f.done.Load()
	for now := range tick.C {
		if now.After(end) {
			break
		}
		samples++
		sum += f.now.Load()
	}
	tick.Stop()
	stop.Store(true)
	wg.Wait()
	util := float64(sum) / float64(samples) / N
	t.Logf("N = %d, %d replicas × %d workers, 20 ms requests: %.1f%% of the slots busy over 10 s (%d samples), %d requests, at most %d in flight",
		N, replicas, 3*N/replicas, 100*util, samples, f.done.Load()-done0, f.max.Load())
	if f.max.Load() > N {
		t.Fatalf("%d requests ran at once, more than the limit %d", f.max.Load(), N)
	}
}

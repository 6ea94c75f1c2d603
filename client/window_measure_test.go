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

// TestWindowUtilizationAtThreeTimesLoad is the figure of docs/design.md
// §8: four replicas each offering 3/4 of L per window (3× L together,
// paced evenly) on 2 s windows of L = 200; per window, what the cluster
// admitted (never more than L) and its share of L. A measurement, so
// timing-dependent: run it with
//
//	RATION_MEASURE=1 go test -count=1 -v -run TestWindowUtilizationAtThreeTimesLoad ./client
func TestWindowUtilizationAtThreeTimesLoad(t *testing.T) {
	if os.Getenv("RATION_MEASURE") == "" {
		t.Skip("a measurement: set RATION_MEASURE=1")
	}
	const L, W, replicas, windows = 200, 2 * time.Second, 4, 8
	c := startCluster(t, "policies:\n  - {name: other, algorithm: token-bucket, rate: 1, burst: 1}\n")
	applyWindowPolicy(t, c, fmt.Sprintf(windowYAML, L, "2s"))
	adm := &windowAdmissions{sure: map[int64]int64{}, edge: map[int64]int64{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	period := time.Duration(int64(W) * replicas / (3 * L)) // each replica offers 3L/replicas per window
	for i := range replicas {
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("replica-%d", i)})
		lim := cl.Limiter("win", client.Key{"tenant": "acme"})
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(period) // the offered load's pace
			defer tk.Stop()
			for !stop.Load() {
				<-tk.C
				before := time.Now()
				if lim.AllowN(1).Allowed {
					adm.note(before, time.Now(), W)
				}
			}
		}()
	}
	first := int64(-1)
	testcluster.WaitFor(t, time.Duration(windows+4)*W+30*time.Second, func() error {
		adm.mu.Lock()
		defer adm.mu.Unlock()
		for k := range adm.sure {
			if first < 0 || k < first {
				first = k
			}
		}
		if first < 0 || time.Now().UnixNano()/int64(W) < first+windows+1 {
			return fmt.Errorf("waiting for %d windows", windows)
		}
		return nil
	})
	stop.Store(true)
	wg.Wait()
	adm.mu.Lock()
	defer adm.mu.Unlock()
	least := 2.0
	for k := first + 1; k <= first+windows; k++ {
		sure, edge := adm.sure[k], adm.edge[k]
		share := float64(sure+edge) / L
		least = min(least, share)
		t.Logf("window %d: %d admitted (+%d at its edges), %.1f%% of L", k, sure, edge, 100*share)
		if sure > L {
			t.Errorf("window %d admitted %d, more than L = %d", k, sure, L)
		}
	}
	t.Logf("least window: %.1f%% of L over %d windows", 100*least, windows)
}

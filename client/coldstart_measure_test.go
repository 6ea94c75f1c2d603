package client_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// TestColdStartFourMeasure (RATION_MEASURE=1): four new clients start at
// once on an unused key, r = B = 10^4, each offering 100 calls/s from its
// first call; prints what each was refused in every 100 ms of its first
// second.
func TestColdStartFourMeasure(t *testing.T) {
	if os.Getenv("RATION_MEASURE") == "" {
		t.Skip("a measurement: RATION_MEASURE=1")
	}
	c := startCluster(t, burstPolicy)
	h := newHistory()
	var lims []*client.Limiter
	var logs []*grantLog
	for i := range 4 {
		log := &grantLog{start: time.Now()}
		logs = append(logs, log)
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: fmt.Sprintf("r%d", i), OnGrant: log.on})
		lims = append(lims, cl.Limiter("four", client.Key{"tenant": "cold"}))
	}
	var wg sync.WaitGroup
	res := make([][2][]int, 4)
	start := h.since()
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, r := stepLoad(h, fmt.Sprintf("r%d", i), lims[i], 100, 100, start, start+time.Second)
			res[i] = [2][]int{o, r}
		}()
	}
	wg.Wait()
	for i, r := range res {
		for _, g := range logs[i].all() {
			t.Logf("  client %d grant at %v: rate %d cap %d start %d top-up %d renew after %v v%d", i, g.at, g.RateMilliPerSec, g.CapMilli, g.StartMilli, g.TopUpMilli, g.RenewAfter, g.Version)
		}
		t.Logf("client %d: admitted/offered per 100 ms from the start:%s (refused %d of %d)", i, perTenth(r[0], r[1]), sumInts(r[1]), sumInts(r[0]))
	}
	checkBound(t, "four", h.snapshot(), quotacheck.Bound{CapacityMilli: 10_000_000, RateMilliPerSec: 10_000_000})
}

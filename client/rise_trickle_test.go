package client_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestTrickleBunchesAreNotARise (docs/design.md §3.4 item 3, "A rise"):
// four holders of a key with r = 1000/s and B = 8 (caps of about two
// tokens) each make two calls back to back every 500 ms. The two empty
// the bucket, which read as a rise of 20/s or more, reported unsmoothed;
// a rise on a bucket below half its cap now needs four costs offered in
// the look, so the shares granted follow the demand, about 5/s with the
// reports' headroom. Once every holder has renewed ten times (past the
// start's unknown and idle reports) it records the largest rate granted
// in the next 40 renewals.
func TestTrickleBunchesAreNotARise(t *testing.T) {
	t.Parallel()
	most := bunchedLargestRate(t)
	if most > maxBunchedRate {
		t.Fatalf("a holder offered 4 calls/s in bunches was granted %d milli-tokens/s: its bunches were reported as a rise", most)
	}
}

// maxBunchedRate is the largest rate share a bunched trickle of 4 calls/s
// may be granted: its demand with the reports' 25% headroom is 5/s, and
// the estimate's rises are smoothed.
const maxBunchedRate = 12_000

// bunchedLargestRate runs TestTrickleBunchesAreNotARise's load and
// returns the largest rate granted (milli-tokens/s).
func bunchedLargestRate(t *testing.T) int64 {
	t.Helper()
	c := startCluster(t, "policies:\n  - {name: bunch, algorithm: token-bucket, rate: 1000, burst: 8, key: [tenant], lease: {duration: 4s, renew_after: 500ms}}\n")
	var mu sync.Mutex
	renewals := map[string]int{}
	var most int64
	counted := 0
	settled := func() bool {
		for i := range 4 {
			if renewals[fmt.Sprint("bunch-", i)] < 10 {
				return false
			}
		}
		return true
	}
	var lims []*client.Limiter
	for i := range 4 {
		id := fmt.Sprint("bunch-", i)
		cl := newClient(t, client.Config{Servers: servers(c), ClientID: id, NoRemote: true, OnGrant: func(g client.GrantInfo) {
			if !g.Renewal {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if settled() {
				counted++
				most = max(most, g.RateMilliPerSec)
			}
			renewals[id]++
		}})
		lims = append(lims, cl.Limiter("bunch", client.Key{"tenant": "t"}))
	}
	pace := time.NewTicker(500 * time.Millisecond)
	defer pace.Stop()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, l := range lims {
			l.AllowN(1)
			l.AllowN(1)
		}
		mu.Lock()
		n, err := counted, fmt.Errorf("%d renewals counted, %v by holder", counted, renewals)
		mu.Unlock()
		if n < 40 {
			<-pace.C // the load's pace: two calls per holder every 500 ms
			return err
		}
		return nil
	})
	t.Logf("largest rate granted in %d renewals: %d milli-tokens/s", counted, most)
	return most
}

package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
)

const steadyPolicy = `
policies:
  - name: writes
    algorithm: token-bucket
    rate: 100
    burst: 50
    key: [tenant]
    lease: {duration: 2s, renew_after: 400ms, drift_ppm: 1000}
`

type recorder struct {
	mu    sync.Mutex
	start time.Time
	h     []quotacheck.Admission
}

func (r *recorder) add(who string, costMilli int64) {
	at := time.Since(r.start).Nanoseconds()
	r.mu.Lock()
	r.h = append(r.h, quotacheck.Admission{AtNanos: at, CostMilli: costMilli, Who: who})
	r.mu.Unlock()
}

// TestSteadyLoadKeepsBound: four clients offer 3x the quota with weighted
// costs; every window keeps B + r·W and the steady state uses >= 95% of r.
func TestSteadyLoadKeepsBound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	c := testcluster.New(t, 3, testcluster.WithPolicies(steadyPolicy))
	c.WaitForLeader(t)
	servers := []string{}
	for i := 0; i < 3; i++ {
		servers = append(servers, c.Server(i).GRPCAddr())
	}
	const clients, dur, steadyFrom = 4, 8 * time.Second, 3 * time.Second
	rec := &recorder{start: time.Now()}
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		cl, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: fmt.Sprintf("replica-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		lim := cl.Limiter("writes", client.Key{"tenant": "acme"})
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer cl.Close()
			// 3x the quota in total: each offers 75 tokens/s, costs 1 or 2.
			tick := time.NewTicker(time.Second / 50)
			defer tick.Stop()
			for n := 0; time.Since(rec.start) < dur; n++ {
				<-tick.C
				cost := int64(1 + n%3/2) // 1,1,2: 1.33 tokens per request on average
				if d := lim.AllowN(cost); d.Allowed {
					rec.add(fmt.Sprint(i), cost*1000)
				}
			}
		}(i)
	}
	wg.Wait()
	if v := quotacheck.Check(rec.h, quotacheck.Bound{CapacityMilli: 50_000, RateMilliPerSec: 100_000}); v != nil {
		t.Fatalf("bound broken: %v", v)
	}
	var steady int64
	for _, a := range rec.h {
		if a.AtNanos >= steadyFrom.Nanoseconds() && a.AtNanos < dur.Nanoseconds() {
			steady += a.CostMilli
		}
	}
	want := int64(100_000 * (dur - steadyFrom).Seconds())
	t.Logf("steady state admitted %d milli-tokens, r·T = %d (%.1f%%)", steady, want, 100*float64(steady)/float64(want))
	if steady < want*95/100 {
		t.Errorf("utilization %.1f%% of r, want >= 95%%", 100*float64(steady)/float64(want))
	}
}

func servers(c *testcluster.Cluster) []string {
	var out []string
	for i := 0; i < c.Len(); i++ {
		out = append(out, c.Server(i).GRPCAddr())
	}
	return out
}

// TestHotPathRace: 64 goroutines on one leased key while the loop renews;
// run under -race. Admissions must still keep the bound.
func TestHotPathRace(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(steadyPolicy))
	c.WaitForLeader(t)
	cl, err := client.New(context.Background(), client.Config{Servers: servers(c), ClientID: "racer"})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lim := cl.Limiter("writes", client.Key{"tenant": "race"})
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if d := lim.AllowN(1); d.Reason == client.NoLease {
			return fmt.Errorf("no lease yet")
		}
		return nil
	})
	rec := &recorder{start: time.Now()}
	rec.add("warm", 1000) // the probe above may have admitted one token
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(rec.start) < 1500*time.Millisecond {
				if lim.AllowN(1).Allowed {
					rec.add("g", 1000)
				}
			}
		}()
	}
	wg.Wait()
	if v := quotacheck.Check(rec.h, quotacheck.Bound{CapacityMilli: 50_000, RateMilliPerSec: 100_000}); v != nil {
		t.Fatalf("bound broken: %v", v)
	}
}

func TestNoLeaseThenUnknownPolicy(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(steadyPolicy))
	c.WaitForLeader(t)
	cl, err := client.New(context.Background(), client.Config{Servers: servers(c), ClientID: "x", FirstLeaseWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	lim := cl.Limiter("nope", client.Key{"tenant": "a"})
	if d := lim.AllowN(1); d.Allowed || d.Reason != client.NoLease {
		t.Fatalf("unknown policy: %+v", d)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if lim.Err() == nil {
			return fmt.Errorf("no error recorded yet")
		}
		return nil
	})
	t.Logf("error for an unknown policy: %v", lim.Err())
}

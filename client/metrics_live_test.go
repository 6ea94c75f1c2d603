package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestCollectorLive: against a real cluster, the loop's acquire and
// renewals show up in the histogram and the decisions in the counters.
func TestCollectorLive(t *testing.T) {
	tc := testcluster.New(t, 3, testcluster.WithPolicies(`
policies:
  - name: writes
    algorithm: token-bucket
    rate: 100
    burst: 50
    key: [tenant]
    lease: {duration: 1s, renew_after: 200ms}
`))
	tc.WaitForLeader(t)
	var servers []string
	for i := 0; i < tc.Len(); i++ {
		servers = append(servers, tc.Server(i).GRPCAddr())
	}
	c, err := client.New(context.Background(), client.Config{Servers: servers, ClientID: "metrics"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := c.Limiter("writes", client.Key{"tenant": "acme"})
	col := client.NewCollector(c)
	allowed := 0
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if l.AllowN(1).Allowed {
			allowed++
		}
		if n := client.Renewals(c); n < 2 {
			return fmt.Errorf("%d renewals yet, want 2", n)
		}
		return nil
	})
	if got := gatherValue(t, col, "ration_client_decisions_total", "reason", "allowed"); int(got) != allowed {
		t.Errorf("decisions_total{allowed} = %v, want %d", got, allowed)
	}
	if n := testutil.CollectAndCount(col, "ration_client_leases"); n != 1 {
		t.Errorf("%d lease series, want 1", n)
	}
}

// gatherValue gathers col and returns the value of the one series of name
// with label = v (a counter's or a gauge's); it fails the test if there is
// none.
func gatherValue(t *testing.T, col prometheus.Collector, name, label, v string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == v {
					if cnt := m.GetCounter(); cnt != nil {
						return cnt.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, v)
	return 0
}

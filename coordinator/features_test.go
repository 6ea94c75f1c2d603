package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
)

// quotaPolicy sets max_keys_per_value (FeatureKeyQuota).
const quotaPolicy = `
policies:
  - name: quota
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [tenant, route]
    max_keys_per_value: 3
`

const featurePolicy = `
policies:
  - name: acked
    algorithm: token-bucket
    rate: 100
    burst: 100
    key: [tenant]
    lease: {duration: 10s, renew_after: 1s}
`

func acquireOne(t *testing.T, c *testcluster.Cluster, tenant, id string) *api.Grant {
	t.Helper()
	resp := retry(t, "acquire "+id, func(ctx context.Context) (*api.LeaseResponse, error) {
		return c.Client(0).Acquire(ctx, &api.AcquireRequest{Caller: caller(id, 1, 1), Keys: []*api.AcquireKey{
			{Key: key("acked", tenant), Demand: &api.Demand{RateMilliPerSec: 1 << 40, BurstMilli: 1 << 40}},
		}})
	})
	return grantIn(t, resp)
}

func renewOne(t *testing.T, c *testcluster.Cluster, tenant, id string, seq, lease, acked uint64) *api.Grant {
	t.Helper()
	resp := retry(t, "renew "+id, func(ctx context.Context) (*api.LeaseResponse, error) {
		return c.Client(1).Renew(ctx, &api.RenewRequest{Caller: caller(id, 1, seq), Keys: []*api.RenewKey{
			{Key: key("acked", tenant), LeaseId: lease, Demand: &api.Demand{RateMilliPerSec: 1 << 40, BurstMilli: 1 << 40}, AckedVersion: acked},
		}})
	})
	return grantIn(t, resp)
}

func grantIn(t *testing.T, resp *api.LeaseResponse) *api.Grant {
	t.Helper()
	if len(resp.GetLeases()) != 1 || resp.GetLeases()[0].GetGrant() == nil {
		t.Fatalf("answer %v", resp)
	}
	return resp.GetLeases()[0].GetGrant()
}

// heldRateOf is what server 0's ledger holds for id's lease on tenant.
func heldRateOf(t *testing.T, c *testcluster.Cluster, tenant, id string) int64 {
	t.Helper()
	resp := retry(t, "leases", func(ctx context.Context) (*api.ListLeasesResponse, error) {
		return c.Admin(0).ListLeases(ctx, &api.ListLeasesRequest{Policy: "acked"})
	})
	for _, le := range resp.GetLeases() {
		if le.GetClientId() == id && le.GetKey() == tenant {
			return le.GetHeldRateMilliPerSec()
		}
	}
	t.Fatalf("no lease of %s in %v", id, resp)
	return 0
}

// TestBaselineOnFromTheFirstEntry: a new cluster turns every switch of
// the v0.1.0 baseline on before anything else, even with a voter that
// advertises none of them (the advertisement only gates switches added
// after 0.1.0): terms are versioned from the first grant, acknowledgements
// free superseded shares at once, and max_keys_per_value is stored.
func TestBaselineOnFromTheFirstEntry(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	none := uint64(0)
	c := testcluster.New(t, 3, testcluster.WithPolicies(featurePolicy),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			if i == 2 {
				cfg.AdvertiseFeatures = &none
			}
		}))
	c.WaitForStableLeader(t)
	c1 := acquireOne(t, c, "beta", "c")
	acquireOne(t, c, "beta", "d")
	c2 := renewOne(t, c, "beta", "c", 2, c1.GetLeaseId(), c1.GetVersion())
	if got := heldRateOf(t, c, "beta", "c"); c1.GetVersion() != 1 || c2.GetRateMilliPerSec() != 50_000 || got != 100_000 {
		t.Fatalf("version %d, reduced to %d, held %d; want version 1, 50000 held at 100000 until acknowledged", c1.GetVersion(), c2.GetRateMilliPerSec(), got)
	}
	renewOne(t, c, "beta", "c", 3, c1.GetLeaseId(), c2.GetVersion())
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		// Server 0 may apply the entry after the answer.
		if got := heldRateOf(t, c, "beta", "c"); got != 50_000 {
			return fmt.Errorf("held %d after the acknowledgement, want 50000", got)
		}
		return nil
	})
	retry(t, "apply max_keys_per_value", func(ctx context.Context) (*api.ApplyPoliciesResponse, error) {
		return c.Admin(1).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: quotaPolicy})
	})
	c.WaitForConsistentState(t)
	for _, s := range c.Servers() {
		if f := s.FSM().Features(); f != fsm.BaselineFeatures {
			t.Fatalf("%s has features %#x, want the baseline %#x", s.ID(), f, fsm.BaselineFeatures)
		}
		if p, ok := s.FSM().Policy("quota"); !ok || p.MaxKeysPerValue != 3 {
			t.Fatalf("%s stored %+v (%v), want max_keys_per_value 3", s.ID(), p, ok)
		}
	}
}

package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// quotaPolicy sets max_keys_per_value, which waits for FeatureKeyQuota.
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

// TestFeatureSwitchWaitsForEveryVoter: with one voter that does not
// advertise acknowledgements (as a server that predates them would), the
// switch stays off, renewals' acked_version is ignored by every server
// alike (equal state), and terms carry no versions. Once that server
// advertises it too (restarted, as after its upgrade), the leader turns
// the switch on, and acknowledgements free superseded shares at once.
func TestFeatureSwitchWaitsForEveryVoter(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	old := uint64(0)
	c := testcluster.New(t, 3, testcluster.WithPolicies(featurePolicy),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			if i == 2 {
				cfg.AdvertiseFeatures = &old
			}
		}))
	leader := c.WaitForStableLeader(t) // it may be s2 itself
	// The leader sees every voter's gossip, s2 without the switch: from
	// here on its leader loop (every ReconcileInterval) must keep it off.
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		resp, err := c.Admin(c.Index(leader)).Members(context.Background(), &api.MembersRequest{})
		if err != nil {
			return err
		}
		seen := map[string]string{}
		for _, m := range resp.GetMembers() {
			if m.GetStatus() == "alive" {
				seen[m.GetMeta()["id"]] = m.GetMeta()["features"]
			}
		}
		if len(seen) != 3 || seen["s2"] != "0" || seen["s0"] != fmt.Sprint(fsm.KnownFeatures) {
			return fmt.Errorf("the leader's gossip view: %v", seen)
		}
		return nil
	})

	a1 := acquireOne(t, c, "acme", "a")
	b1 := acquireOne(t, c, "acme", "b")
	a2 := renewOne(t, c, "acme", "a", 2, a1.GetLeaseId(), a1.GetVersion())
	a3 := renewOne(t, c, "acme", "a", 3, a1.GetLeaseId(), 2) // acknowledges the halved terms
	if a2.GetRateMilliPerSec() != 50_000 || a1.GetVersion()|a3.GetVersion()|b1.GetVersion() != 0 {
		t.Fatalf("switch off: %v %v %v", a1, a2, a3)
	}
	if got := heldRateOf(t, c, "acme", "a"); got != 100_000 {
		t.Fatalf("switch off: a's held rate is %d after an acknowledgement, want the superseded 100000", got)
	}
	c.WaitForConsistentState(t)
	for _, s := range c.Servers() {
		if f := s.FSM().Features(); f != 0 {
			t.Fatalf("%s has features %#x with a voter that does not support them", s.ID(), f)
		}
	}
	// A policy that sets max_keys_per_value is refused, not stored
	// without it, until the key-quota switch is on.
	_, err := c.Admin(0).ApplyPolicies(rpcCtx(t), &api.ApplyPoliciesRequest{Yaml: quotaPolicy})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "FeatureKeyQuota is off") {
		t.Fatalf("max_keys_per_value with the switch off: %v, want FailedPrecondition naming FeatureKeyQuota", err)
	}

	// The older server is upgraded: stopped (as a follower: shutting down
	// a leader right after it hands leadership over can hang in
	// hashicorp/raft, a pipelined AppendEntries blocked on a decoder that
	// has exited), and started again with support.
	if l := c.Leader(); l != nil && l.ID() == c.ID(2) {
		if err := l.Raft().LeadershipTransfer().Error(); err != nil {
			t.Fatalf("leadership transfer away from s2: %v", err)
		}
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if l := c.Leader(); l == nil || l.ID() == c.ID(2) {
			return fmt.Errorf("leader %v", l)
		}
		return nil
	})
	c.Shutdown(2)
	old = fsm.KnownFeatures
	c.Restart(2)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if s.FSM().Features() != fsm.KnownFeatures {
				return fmt.Errorf("%s: features %#x", s.ID(), s.FSM().Features())
			}
		}
		return nil
	})
	// Terms from before the switch are unversioned and stay held until
	// they expire, whatever is acknowledged.
	a4 := renewOne(t, c, "acme", "a", 4, a1.GetLeaseId(), 0)
	a5 := renewOne(t, c, "acme", "a", 5, a1.GetLeaseId(), a4.GetVersion())
	if a4.GetVersion() != 1 || a5.GetVersion() != 2 {
		t.Fatalf("switch on: versions %d, %d; want 1, 2", a4.GetVersion(), a5.GetVersion())
	}
	if got := heldRateOf(t, c, "acme", "a"); got != 100_000 {
		t.Fatalf("switch on: unversioned superseded terms dropped early (held %d)", got)
	}
	// On a new key, the acknowledgement of the halved terms frees the
	// full ones at its commit.
	c1 := acquireOne(t, c, "beta", "c")
	acquireOne(t, c, "beta", "d")
	c2 := renewOne(t, c, "beta", "c", 2, c1.GetLeaseId(), c1.GetVersion())
	if got := heldRateOf(t, c, "beta", "c"); c2.GetRateMilliPerSec() != 50_000 || got != 100_000 {
		t.Fatalf("switch on: reduced to %d, held %d; want 50000 held at 100000 until acknowledged", c2.GetRateMilliPerSec(), got)
	}
	retry(t, "apply max_keys_per_value with the switch on", func(ctx context.Context) (*api.ApplyPoliciesResponse, error) {
		return c.Admin(1).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: quotaPolicy})
	})

	renewOne(t, c, "beta", "c", 3, c1.GetLeaseId(), c2.GetVersion())
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		// Server 0 may apply the entry after the answer.
		if got := heldRateOf(t, c, "beta", "c"); got != 50_000 {
			return fmt.Errorf("held %d after the acknowledgement, want 50000", got)
		}
		return nil
	})
	c.WaitForConsistentState(t)
	for _, s := range c.Servers() {
		if p, ok := s.FSM().Policy("quota"); !ok || p.MaxKeysPerValue != 3 {
			t.Fatalf("switch on: %s stored %+v (%v), want max_keys_per_value 3", s.ID(), p, ok)
		}
	}
}

package coordinator_test

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
)

const deferredWindowPolicies = `
policies:
  - name: rate
    algorithm: token-bucket
    rate: 10/s
    burst: 10
    key: [tenant]
  - name: daily
    algorithm: fixed-window
    limit: 100
    period: day
    timezone: Europe/Paris
    key: [tenant]
  - name: inflight
    algorithm: concurrency
    limit: 8
    key: [tenant]
`

// TestInitialWindowPolicyWaitsForTheSwitch: rationd --config with a window
// policy, on a cluster where one voter does not support leased windows
// yet: the token bucket is applied at once, the window policy is deferred
// (not dropped), and once that voter advertises the switch (restarted, as
// after its upgrade) the leader turns it on and applies the window policy.
func TestInitialWindowPolicyWaitsForTheSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	adv := fsm.KnownFeatures &^ (fsm.FeatureWindows | fsm.FeatureConcurrency)
	c := testcluster.New(t, 3, testcluster.WithPolicies(deferredWindowPolicies),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			if i == 2 {
				cfg.AdvertiseFeatures = &adv
			}
		}))
	// WaitForLeader would wait for every policy: wait for the bucket only.
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		l := c.Leader()
		if l == nil {
			return fmt.Errorf("no leader")
		}
		if _, ok := l.FSM().Policy("rate"); !ok {
			return fmt.Errorf("the token bucket is not applied yet")
		}
		return nil
	})
	for _, s := range c.Servers() {
		if _, ok := s.FSM().Policy("inflight"); ok || s.FSM().Features()&fsm.FeatureConcurrency != 0 {
			t.Fatalf("%s: the concurrency policy applied (features %#x) with a voter that does not support it", s.ID(), s.FSM().Features())
		}
		if _, ok := s.FSM().Policy("daily"); ok || s.FSM().Features()&fsm.FeatureWindows != 0 {
			t.Fatalf("%s: the window policy applied (features %#x) with a voter that does not support leased windows", s.ID(), s.FSM().Features())
		}
	}
	// Upgrade s2: stopped as a follower (see TestFeatureSwitchWaitsForEveryVoter).
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
	adv = fsm.KnownFeatures
	c.Restart(2)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if s.FSM().Features()&fsm.FeatureWindows == 0 {
				return fmt.Errorf("%s: leased windows still off", s.ID())
			}
			p, ok := s.FSM().Policy("daily")
			if !ok {
				return fmt.Errorf("%s: the initial window policy is not applied yet", s.ID())
			}
			if p.Period != "day" || p.Timezone != "Europe/Paris" {
				return fmt.Errorf("%s: daily is %+v", s.ID(), p)
			}
			if _, ok := s.FSM().Policy("inflight"); !ok {
				return fmt.Errorf("%s: the initial concurrency policy is not applied yet", s.ID())
			}
		}
		return nil
	})
	c.WaitForConsistentState(t)
}

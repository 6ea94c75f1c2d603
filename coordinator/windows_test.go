package coordinator_test

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
)

const initialPolicies = `
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

// TestInitialPoliciesApplyAtOnce: rationd --config with a token bucket, a
// calendar window and a concurrency policy, on a new cluster where one
// voter advertises no feature switch at all: the baseline switches are on
// unconditionally (every 0.1.0 server supports them), so every initial
// policy is applied at once, nothing deferred.
func TestInitialPoliciesApplyAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster")
	}
	none := uint64(0)
	c := testcluster.New(t, 3, testcluster.WithPolicies(initialPolicies),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
			if i == 2 {
				cfg.AdvertiseFeatures = &none
			}
		}))
	c.WaitForLeader(t)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if !s.FSM().BaselineOn() || s.FSM().Features() != fsm.BaselineFeatures {
				return fmt.Errorf("%s: features %#x", s.ID(), s.FSM().Features())
			}
			for _, name := range []string{"rate", "daily", "inflight"} {
				if _, ok := s.FSM().Policy(name); !ok {
					return fmt.Errorf("%s: initial policy %s not applied", s.ID(), name)
				}
			}
			if p, _ := s.FSM().Policy("daily"); p.Period != "day" || p.Timezone != "Europe/Paris" {
				return fmt.Errorf("%s: daily is %+v", s.ID(), p)
			}
		}
		return nil
	})
	c.WaitForConsistentState(t)
}

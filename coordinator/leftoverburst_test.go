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

// TestLeftoverBurstWaitsForItsSwitch: with one voter that does not
// advertise FeatureLeftoverBurst (a server that predates it), the leader
// turns every other switch on but not that one, and a lone holder asking
// for a tenth of the burst gets a tenth, the rest staying in the pool, as
// an older server divides (docs/design.md §3.6); every server's state
// hash is equal. On a cluster where every voter advertises it, the same
// holder gets its tenth and half of the other nine (the pool keeps the
// other half for newcomers; docs/design.md §3.2).
func TestLeftoverBurstWaitsForItsSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("real clusters")
	}
	for _, tc := range []struct {
		name    string
		mixed   bool
		wantCap int64
	}{{"mixed cluster", true, 10_000}, {"every voter", false, 55_000}} {
		t.Run(tc.name, func(t *testing.T) {
			want := fsm.KnownFeatures
			var opts []testcluster.Option
			if tc.mixed {
				adv := fsm.KnownFeatures &^ fsm.FeatureLeftoverBurst
				want = adv
				opts = append(opts, testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
					if i == 2 {
						cfg.AdvertiseFeatures = &adv
					}
				}))
			}
			c := testcluster.New(t, 3, append(opts, testcluster.WithPolicies(featurePolicy))...)
			c.WaitForStableLeader(t)
			testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
				for _, s := range c.Servers() {
					if f := s.FSM().Features(); f != want {
						return fmt.Errorf("%s: features %#x, want %#x", s.ID(), f, want)
					}
				}
				return nil
			})
			resp := retry(t, "acquire", func(ctx context.Context) (*api.LeaseResponse, error) {
				return c.Client(0).Acquire(ctx, &api.AcquireRequest{Caller: caller("a", 1, 1), Keys: []*api.AcquireKey{
					{Key: key("acked", "acme"), Demand: &api.Demand{RateMilliPerSec: 10_000, BurstMilli: 10_000}},
				}})
			})
			g := grantIn(t, resp)
			if g.GetCapMilli() != tc.wantCap || g.GetRateMilliPerSec() != 10_000 {
				t.Fatalf("a lone holder asking for 10 of B = 100: rate %d cap %d, want rate 10000 cap %d", g.GetRateMilliPerSec(), g.GetCapMilli(), tc.wantCap)
			}
			c.WaitForConsistentState(t)
			testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
				var first string
				var firstIx uint64
				for i, s := range c.Servers() {
					ix, h := s.FSM().StateHash()
					if i == 0 {
						first, firstIx = h, ix
					} else if h != first || ix != firstIx {
						return fmt.Errorf("%s: state hash %s at %d, %s: %s at %d", s.ID(), h, ix, c.Servers()[0].ID(), first, firstIx)
					}
				}
				return nil
			})
		})
	}
}

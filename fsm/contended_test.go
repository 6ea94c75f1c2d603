package fsm

import (
	"testing"

	"github.com/ration-dev/ration/api"
)

// TestContendedWaitsForItsSwitch: with FeatureContended a token-bucket
// grant or renewal says whether the key's holders together ask for more
// than its rate (r = 10/s here), after the operation; with the switch off
// no answer says so, as from a server that predates it (docs/design.md
// §3.4, "A contended key").
func TestContendedWaitsForItsSwitch(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := newHarnessAt(t, 0)
		if on {
			h.enableFeatures(BaselineFeatures | FeatureContended)
		}
		if on != (h.f.Features()&FeatureContended != 0) {
			t.Fatalf("features %#x", h.f.Features())
		}
		acquireAt := func(at int64, id string, rate int64) *api.Grant {
			op := &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: caller(id, 1, 1), Keys: []*api.AcquireKey{
				{Key: tenant("acme"), Demand: &api.Demand{RateMilliPerSec: rate, BurstMilli: 5_000}}}}}}
			return grantOf(t, h.batch(at, op))
		}
		a := acquireAt(sec, "a", 1e9)
		steps := []struct {
			what      string
			g         func() *api.Grant
			contended bool
		}{
			{"a alone, asking for all of r", func() *api.Grant { return a }, false},
			{"a renewing at 6/s", func() *api.Grant {
				a = grantOf(t, h.batch(2*sec, renewDemand(caller("a", 1, 2), a.GetLeaseId(), a.GetVersion(), 6_000, 5_000)))
				return a
			}, false},
			{"b arriving, asking for all of r", func() *api.Grant { return acquireAt(5*sec/2, "b", 1e9) }, true},
			{"a renewing at 6/s beside b", func() *api.Grant {
				a = grantOf(t, h.batch(3*sec, renewDemand(caller("a", 1, 3), a.GetLeaseId(), a.GetVersion(), 6_000, 5_000)))
				return a
			}, true},
			{"a renewing at 0/s", func() *api.Grant {
				a = grantOf(t, h.batch(4*sec, renewDemand(caller("a", 1, 4), a.GetLeaseId(), a.GetVersion(), 0, 0)))
				return a
			}, false},
		}
		for _, s := range steps {
			g := s.g()
			if want := on && s.contended; g.GetContended() != want {
				t.Errorf("on=%v: %s: contended %v, want %v", on, s.what, g.GetContended(), want)
			}
		}
	}
}

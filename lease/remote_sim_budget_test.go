package lease

// The switch budget's model (docs/design.md §3.4, "The switch budget";
// coordinator/promotions.go): replicas decide a key remotely and ask a
// server for its promotion (a new lease) in any order, at any times, at
// any of the servers (the key's home, or another while it is down); each
// server grants from a token bucket of its own, ρ per second with a burst
// of ρ, and a replica takes a lease only with a grant. Whatever the
// interleaving, the grants, and so the leases the promotions acquire,
// are at most S·ρ·(1 + t) in any t seconds: quotacheck's B + r·W with
// B = r = S·ρ. The negative control (remote_sim_budget_faults_test.go)
// grants every request and must be caught.

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/internal/quotacheck"
	"pgregory.net/rapid"
)

// switchBudgetModel runs one drawn interleaving and returns what broke,
// "" if nothing; ignoreBudget grants every request (the broken variant).
func switchBudgetModel(rt *rapid.T, ignoreBudget bool) string {
	servers := rapid.IntRange(1, 5).Draw(rt, "servers")
	rho := rapid.Int64Range(1, 50).Draw(rt, "rho")
	replicas := rapid.IntRange(1, 300).Draw(rt, "replicas")
	buckets := make([]*TokenBucket, servers)
	for i := range buckets {
		b, err := NewTokenBucket(BucketConfig{CapacityMilli: rho * MilliPerToken, RateMilliPerSec: rho * MilliPerToken, StartFull: true}, 0)
		if err != nil {
			return err.Error()
		}
		buckets[i] = b
	}
	local := make([]bool, replicas) // every replica starts remote
	var grants []quotacheck.Admission
	acquires := 0
	now := int64(0)
	steps := rapid.IntRange(1, 2000).Draw(rt, "steps")
	for range steps {
		// Many asks at one instant (a storm), or spread out.
		now += rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, NanosPerSecond/100), rapid.Int64Range(0, 2*NanosPerSecond)).Draw(rt, "dt")
		i := rapid.IntRange(0, replicas-1).Draw(rt, "replica")
		if local[i] {
			// A demotion: the lease is released, the key goes remote.
			if rapid.Bool().Draw(rt, "demote") {
				local[i] = false
			}
			continue
		}
		s := rapid.IntRange(0, servers-1).Draw(rt, "server")
		d, err := buckets[s].Admit(now, MilliPerToken)
		if err != nil {
			return err.Error()
		}
		if !d.Allowed && !ignoreBudget {
			continue // denied: the key stays remote and asks again later
		}
		grants = append(grants, quotacheck.Admission{AtNanos: now, CostMilli: MilliPerToken, Who: fmt.Sprintf("s%d", s)})
		local[i] = true
		acquires++
	}
	if acquires != len(grants) {
		return fmt.Sprintf("%d lease acquires for %d grants", acquires, len(grants))
	}
	budget := int64(servers) * rho * MilliPerToken
	if v := quotacheck.Check(grants, quotacheck.Bound{CapacityMilli: budget, RateMilliPerSec: budget}); v != nil {
		return fmt.Sprintf("switch budget broken (%d servers at %d/s, %d replicas): %v", servers, rho, replicas, v)
	}
	return ""
}

// TestRemoteSimSwitchBudget: for any interleaving of promotion requests
// by any number of replicas at any of the servers, the promotions stay
// within S·ρ·(1 + t).
func TestRemoteSimSwitchBudget(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		if f := switchBudgetModel(rt, false); f != "" {
			rt.Fatal(f)
		}
	})
}

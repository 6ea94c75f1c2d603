//go:build ration_faults

package lease

import (
	"testing"
)

// TestShareSimNegativeControls: with plain fair shares (no floors, no
// leftovers) the same simulations must fall short, or they prove nothing.
func TestShareSimNegativeControls(t *testing.T) {
	if testing.Short() {
		t.Skip("a 40 s simulation of 1000 replicas")
	}
	res := manyReplicas(faultSliverShares).run(t)
	t.Logf("sliver shares, 1000 replicas: %.1f%% of r", 100*res.ofRate)
	if res.ofRate >= 0.90 {
		t.Fatalf("the simulation did not catch sliver shares: %.1f%% of r", 100*res.ofRate)
	}
}

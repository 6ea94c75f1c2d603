//go:build ration_faults

package lease

import "testing"

// TestRemoteSimNegativeControl: remote calls served without the edge's
// lease (while the edge is down and has none) must break the bound check
// of TestRemoteSimSwitches, or the model proves nothing about remote
// decisions.
func TestRemoteSimNegativeControl(t *testing.T) {
	p := switchSim()
	p.remoteNoLease = true
	res := p.run(t)
	if res.broken == nil {
		t.Fatalf("remote decisions without a lease went unnoticed (%.1f%% of r)", 100*res.ofRate)
	}
	t.Logf("caught as expected: %v", res.broken)
}

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

// TestRemoteSimContendedNegativeControl: with seats thin by their caps
// only (ignoreContended, the routing before Grant.contended),
// TestRemoteSimContendedTrickle's key must stay below its bound.
func TestRemoteSimContendedNegativeControl(t *testing.T) {
	p := contendedSim()
	p.ignoreContended = true
	res := p.run(t)
	if res.broken != nil {
		t.Fatalf("bound broken: %v", res.broken)
	}
	if res.ofRate >= minContendedShare {
		t.Fatalf("the control was not caught: %.1f%% of r with the cap rule alone, want below %.0f%%", 100*res.ofRate, 100*minContendedShare)
	}
	t.Logf("caught as expected: %.1f%% of r, %d remote at the end", 100*res.ofRate, res.remoteAtEnd)
}

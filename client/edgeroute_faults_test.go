//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestEdgeRouteSwitchNegativeControl: a client that admits a key locally
// while the key's own lease is on its way after a promotion (admitted by
// no lease holder) must break the bound check of
// TestEdgeRouteBoundAcrossSwitches.
func TestEdgeRouteSwitchNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a cluster through three switch cycles")
	}
	faultstest.Use(t, faults.AdmitBeforeLease)
	spans, stats := switchCycles(t)
	x, y, sum, broken := certainViolation(spans, edgeRouteBound)
	if !broken {
		t.Fatalf("the bound held with admissions during the switch (%d admissions, stats %+v): the check cannot fail", len(spans), stats)
	}
	t.Logf("caught as expected: %d milli-tokens decided within [%d, %d] ns", sum, x, y)
}

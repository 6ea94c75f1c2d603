//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestPolicyChangeNegativeControl: with the old rule back (a deleted
// policy's idle budgets dropped, re-created keys starting full), the
// release case of TestPolicyChangeKeepsBudget must break the bound.
func TestPolicyChangeNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	faultstest.Use(t, faults.ForgetRetired)
	c := startCluster(t, lifetimePolicy) // the servers' state machines read the fault now
	h := lifetimeCase(t, c, "release")
	x, y, sum, broken := certainViolation(h.spanSnapshot(), lifetimeBound)
	if !broken {
		t.Fatal("the bound held with re-created budgets starting full: the check cannot fail")
	}
	t.Logf("caught as expected: %d milli-tokens decided within [%d, %d] ns", sum, x, y)
}

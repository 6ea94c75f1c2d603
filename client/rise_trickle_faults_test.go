//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestTrickleBunchesAreNotARiseNegativeControl: a client that renews for a
// rise whenever its bucket is below half its cap (rise-any-low, the rule
// before four costs in the look): TestTrickleBunchesAreNotARise's check
// must catch the bunched trickle's inflated shares.
func TestTrickleBunchesAreNotARiseNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.RiseAnyLow)
	most := bunchedLargestRate(t)
	if most <= maxBunchedRate {
		t.Fatalf("the control was not caught: with any low bucket a rise, the largest rate granted was %d milli-tokens/s, within %d", most, maxBunchedRate)
	}
}

//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestSwitchBudgetNegativeControl: servers that grant every promotion
// (faults.PromoteBudgetIgnored) let the storm of
// TestSwitchBudgetBoundsPromotionStorm through, and its check catches it.
func TestSwitchBudgetNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.PromoteBudgetIgnored)
	r := promotionStorm(t)
	t.Logf("storm, budget ignored: %d remote keys, %d asks, %d denied, %d promoted (%d forced) in %v; budget bound %.1f", r.remote, r.asks, r.denials, r.promoted, r.forced, r.elapsed, r.bound())
	if float64(r.promoted) <= r.bound() {
		t.Fatalf("%d promotions in %v within the bound %.1f with the budget ignored: the check cannot fail", r.promoted, r.elapsed, r.bound())
	}
}

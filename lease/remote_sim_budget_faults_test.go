//go:build ration_faults

package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestRemoteSimSwitchBudgetCaught: servers that grant every promotion
// request (the budget ignored, as faults.PromoteBudgetIgnored does on a
// real cluster) must break TestRemoteSimSwitchBudget's check.
func TestRemoteSimSwitchBudgetCaught(t *testing.T) {
	rapidcontrol.ControlFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "promote-budget-ignored", "switch budget broken", func(rt *rapid.T) {
		if f := switchBudgetModel(rt, true); f != "" {
			rt.Fatal(f)
		}
	})
}

//go:build ration_faults

package fsm

import (
	"github.com/ration-dev/ration/internal/rapidcontrol"
	"testing"

	"pgregory.net/rapid"
)

// TestBudgetLifetimeNegativeControl: the same property against the old
// rule (a deleted policy's idle budgets dropped, re-created and re-keyed
// policies starting fresh) must be caught.
func TestBudgetLifetimeNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "20000")
	rapidcontrol.ExpectCaught(t, "budgets that start full again", "quota bound broken", func(rt *rapid.T) {
		if v := runLifetime(rt, t, faultForgetRetired).check(); v != nil {
			rt.Fatalf("%v", v)
		}
	})
}

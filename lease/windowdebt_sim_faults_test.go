//go:build ration_faults

package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// The window debt model's negative controls (docs/design.md §8.6): each
// breaks a rule on purpose and must be caught by the check of settled
// costs against m·L + D.

func windowDebtCaught(t *testing.T, what string, f WindowFault) {
	rapidcontrol.ControlFlags(t, "20000")
	rapidcontrol.ExpectCaught(t, what, "over m·L + D", func(rt *rapid.T) {
		if msg := windowDebtModel(rt, f); msg != "" {
			rt.Fatal(msg)
		}
	})
}

// TestWindowDebtNotCarriedCaught: rule w3 broken, a new window forgets
// the overshoot of the one before.
func TestWindowDebtNotCarriedCaught(t *testing.T) {
	windowDebtCaught(t, "overshoot not carried", windowFaultDebtNotCarried)
}

// TestWindowAllowanceUncountedCaught: rule w2 broken, a chunk's end frees
// its allowance without counting the debt used.
func TestWindowAllowanceUncountedCaught(t *testing.T) {
	windowDebtCaught(t, "allowance used not counted", windowFaultAllowanceUncounted)
}

// TestWindowDebtDroppedAtExpiryCaught: a chunk that ends without a
// release (expiry, replacement, revocation) takes its debt with it.
func TestWindowDebtDroppedAtExpiryCaught(t *testing.T) {
	windowDebtCaught(t, "debt dropped at chunk expiry", windowFaultDebtDroppedAtExpiry)
}

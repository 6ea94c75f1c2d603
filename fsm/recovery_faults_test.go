//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

// TestRecoveryNegativeControl: a recovery that keeps the stale state as
// it was (no hold) grants budgets the lost servers had granted: caught.
func TestRecoveryNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "200")
	rapidcontrol.ExpectCaught(t, "a recovery without the hold", "more than B + r·W", recoveryHistory(t, faultRecoveryNoHold))
}

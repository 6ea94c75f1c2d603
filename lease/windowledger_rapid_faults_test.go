//go:build ration_faults

package lease

import (
	"fmt"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

func TestWindowDefinitionChangeForgetSpentCaught(t *testing.T) {
	withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "20000", "rapid.shrinktime": "1ms"})
	rapidcontrol.ExpectCaught(t, "forget-spent", "more than its limit", func(rt *rapid.T) {
		runWindowModelOpts(rt, windowModelOpts{slews: true, specChanges: true, fault: windowFaultForgetSpent})
	})
}

// TestWindowNegativeControls: the same checker must catch a ledger whose
// dead holders' chunks return their units, and one whose renewals are not
// counted.
func TestWindowNegativeControls(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fault  WindowFault
		approx bool
	}{
		{"dead-returns", WindowFaultDeadReturns, false},
		{"renew-uncounted", windowFaultRenewUncounted, false},
		{"approx-ignores-prev", windowFaultApproxIgnoresPrev, true},
		// Forward re-syncs of window time let live chunks outlive their
		// window: a new window that does not count them admits more than L.
		{"jump-without-carry", windowFaultNoCarry, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "20000", "rapid.shrinktime": "1ms"})
			rapidcontrol.ExpectCaught(t, tc.name, "more than its limit", func(rt *rapid.T) { runWindowModel(rt, tc.fault, tc.approx) })
		})
	}
}

// TestWindowBackwardResyncCaught: the never-backward rule's negative
// control. Re-syncs that may move window time back (the ledger refuses
// the earlier time, but a key collected once its window was over starts
// afresh in the window it already spent) must be caught.
func TestWindowBackwardResyncCaught(t *testing.T) {
	withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "20000", "rapid.shrinktime": "1ms"})
	rapidcontrol.ExpectCaught(t, "backward-resync", "more than its limit", func(rt *rapid.T) { runWindowModelClock(rt, windowFaultNone, false, true) })
}

// TestWindowIdleIgnoresCarryCaught: Idle's carry check's negative
// control. A key collected while it still holds an expired chunk that a
// forward re-sync let outlive its window forgets the units spent with it
// in later windows: a fresh ledger grants them again (fixed-window) or
// does not weigh them (sliding-window-approx). The search is targeted
// (windowModelOpts.collects) and still rare: caught after 393 to 19169
// checks for fixed-window, 14777 to 48671 for sliding-window-approx
// (three runs each, 2026-12-03), so the cap is far above both.
func TestWindowIdleIgnoresCarryCaught(t *testing.T) {
	for _, approx := range []bool{false, true} {
		t.Run(fmt.Sprint("approx=", approx), func(t *testing.T) {
			withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "500000", "rapid.shrinktime": "1ms"})
			rapidcontrol.ExpectCaught(t, "idle-ignores-carry", "more than its limit", func(rt *rapid.T) {
				runWindowModelOpts(rt, windowModelOpts{fault: windowFaultIdleIgnoresCarry, approx: approx, slews: true, collects: true})
			})
		})
	}
}

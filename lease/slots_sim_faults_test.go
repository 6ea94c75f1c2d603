//go:build ration_faults

package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestSlotNegativeControls: each broken rule must be caught by the same
// property: by the held-while-used oracle, and (bound only) by the in-flight
// count alone where another holder can be relied on to fill the slots freed
// too early within 20 000 histories.
func TestSlotNegativeControls(t *testing.T) {
	for _, c := range []struct {
		name      string
		mode      slotMode
		fault     SlotFault
		model     int
		boundOnly bool // also caught with the oracle off
		checks    string
		// boundOnlyHistory replaces the random search of the bound-only
		// variant by a targeted history that must be caught.
		boundOnlyHistory func(*testing.T)
	}{
		{"lowered grant freed before the client's acknowledgement", slotModeMaxDuration, SlotFaultForgetLowered, slotModelFaultNone, true, "", nil},
		{"acknowledgement drops the acknowledged version", slotModeMaxDuration, slotFaultAckDropsAcked, slotModelFaultNone, true, "", nil},
		// Bound only: 40 to 11 000 histories to the first catch over seeds
		// 1-50 (mean about 3000, 2026-12-02); a clean-clone CI run missed it
		// within 20 000. The search stops at the first catch.
		{"dead holder's slots returned before its expiry", slotModeMaxDuration, slotFaultEarlyExpiry, slotModelFaultNone, true, "100000", nil},
		{"replaced lease's slots freed at once", slotModeMaxDuration, slotFaultForgetReplaced, slotModelFaultNone, true, "", nil},
		{"client acknowledges before dropping to the new count", slotModeMaxDuration, slotFaultNone, slotModelAckAtOnce, true, "", nil},
		{"client starts ignoring max_duration", slotModeMaxDuration, slotFaultNone, slotModelIgnoreMaxDuration, false, "", nil},
		// The rarest: about one history in 3000 has a lease reclaimed within
		// the drift margin while its holder runs a request.
		{"client deadline without the drift margin", slotModeMaxDuration, slotFaultNone, slotModelNoDriftMargin, false, "60000", nil},
		// Bound only, at random about one history in 10 000 (288 to 23 400
		// to the first catch on 8 seeds, and once not within 60 000): the
		// bound-only variant is the targeted history of slots_overrun_test.go.
		{"deadline cancel without grace", slotModeCancel, slotFaultNone, slotModelCancelNoGrace, true, "", slotOverrunControl},
		{"no rule, checked as if the term were zero", slotModeNone, slotFaultNone, slotModelStrict, true, "", nil},
		{"restore without the hold", slotModeMaxDuration, slotFaultNone, slotModelRestoreNoHold, true, "", nil},
		// A grant installed after a refused renewal (restore, deleted
		// policy) extends the old lease's requests; the bound-only variant
		// is the targeted history of slots_reapply_test.go.
		{"new grant extends the old lease's requests", slotModeCancel, slotFaultNone, slotModelInstallExtendsOld, true, "", slotReapplyControl},
		// Rare too: 1 866 to 7 243 histories to the first catch on 6 seeds
		// (missed once within 20 000); the search stops at the first catch,
		// so the larger cap costs nothing when it is caught.
		{"restore keeping the restored leases", slotModeCancel, slotFaultNone, slotModelRestoreKeepLeases, false, "60000", nil},
	} {
		for _, oracle := range []bool{true, false} {
			if !oracle && !c.boundOnly {
				continue
			}
			name := c.name
			if !oracle {
				name += " (bound only)"
			}
			t.Run(name, func(t *testing.T) {
				if !oracle && c.boundOnlyHistory != nil {
					c.boundOnlyHistory(t)
					return
				}
				checks := c.checks
				if checks == "" {
					checks = "20000"
				}
				withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": checks, "rapid.shrinktime": "1ms"})
				rapidcontrol.ExpectCaught(t, "the broken slot protocol", "concurrency bound broken", func(t *rapid.T) {
					runSlotSim(t, c.mode, c.fault, c.model, oracle)
				})
			})
		}
	}
}

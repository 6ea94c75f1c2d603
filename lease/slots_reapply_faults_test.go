//go:build ration_faults

package lease

import (
	"testing"
)

// slotReapplyControl is the deterministic form of the negative control
// "new grant extends the old lease's requests (bound only)": the same
// histories, with the client cancelling every running request at the new
// lease's cancel time (the old behaviour), must break the bound, every
// time. (6 in flight against 4, as on a real cluster.)
func slotReapplyControl(t *testing.T) {
	for _, reapply := range []bool{false, true} {
		got, end, deadline := slotRefusedRenewalHistory(t, SlotClientFaultInstallExtendsOld, reapply)
		if got <= 4 {
			t.Fatalf("reapply %v: the checker did not catch a new grant extending the old lease's requests: %d in flight (they end at %d, their lease's deadline is %d)", reapply, got, end, deadline)
		}
		t.Logf("reapply %v: caught as expected: concurrency bound broken: %d in flight > N 4 (A's old requests end %d ns after their lease's deadline)", reapply, got, end-deadline)
	}
}

//go:build ration_faults

package lease

import "testing"

// TestInjectSlotFault: the fault-suite build's export switches a slot
// ledger to a broken variant (the jepsen-like in-flight control's
// slot-forget-lowered): a lowered count is then free at the renewal that
// lowers it, where the correct ledger holds it until acknowledged.
func TestInjectSlotFault(t *testing.T) {
	for _, tc := range []struct {
		fault SlotFault
		free  int64
	}{{slotFaultNone, 0}, {SlotFaultForgetLowered, 2}} {
		l := newSlots(t, 4)
		InjectSlotFault(l, tc.fault)
		a := slotGrant(t, l, 1, "a", 1, 4)
		slotGrant(t, l, 2, "b", 1, 4)
		if a2 := slotRenew(t, l, 3, "a", a, 4, 1); a2.Slots != 2 {
			t.Fatalf("fault %d: a lowered to %d, want 2", tc.fault, a2.Slots)
		}
		if got := l.Free(); got != tc.free {
			t.Fatalf("fault %d: %d slots free after a's count was lowered, want %d", tc.fault, got, tc.free)
		}
	}
}

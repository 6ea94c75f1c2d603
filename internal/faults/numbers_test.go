package faults

import (
	"strings"
	"testing"
)

type testFault uint8

// TestNumberRefusesDuplicate: a second fault with a number its type has
// already given panics, naming both; the same number of another type is a
// different fault. (A registry of its own, so that the test can run again
// in one process: -count.)
func TestNumberRefusesDuplicate(t *testing.T) {
	r := newRegistry()
	r.add("fsm.fault", 0x41, "faultWindowClockBackward")
	r.add("lease.Fault", 0x41, "otherA")
	r.add("fsm.fault", 0x40, "faultWindowSnapshotDropsKeys")
	func() {
		defer func() {
			msg, _ := recover().(string)
			want := "faults: faultWindowClockBackward and faultSlotSnapshotDropsKeys are both fault number 0x41 of fsm.fault"
			if !strings.Contains(msg, want) {
				t.Fatalf("duplicate number: recovered %q, want a panic saying %q", msg, want)
			}
		}()
		r.add("fsm.fault", 0x41, "faultSlotSnapshotDropsKeys")
	}()
	if got := r.names("fsm.fault"); len(got) != 2 || got[0x41] != "faultWindowClockBackward" || got[0x40] != "faultWindowSnapshotDropsKeys" {
		t.Fatalf("names = %v", got)
	}
	if got := r.names("lease.Fault"); len(got) != 1 || got[0x41] != "otherA" {
		t.Fatalf("names of another type = %v", got)
	}
}

// TestNumberKeysByType: Number registers under the fault's Go type, and
// Numbers reads them back.
func TestNumberKeysByType(t *testing.T) {
	if got := typeKey[testFault](); got != "faults.testFault" {
		t.Fatalf("typeKey = %q", got)
	}
	if got := Numbers[testFault](); len(got) != 1 || got[7] != "testFaultSeven" {
		t.Fatalf("Numbers = %v", got)
	}
}

// Registered when the test binary loads, as a package's faults are.
var _ = Number(testFault(7), "testFaultSeven")

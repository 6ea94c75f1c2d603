package faults

import (
	"strings"
	"testing"
)

type testFault uint8

type otherFault uint8

// TestNumberRefusesDuplicate: a second fault with a number its type has
// already given panics, naming both; the same number of another type is a
// different fault.
func TestNumberRefusesDuplicate(t *testing.T) {
	a := Number(testFault(0x41), "faultA")
	if a != 0x41 {
		t.Fatalf("Number returned %#x", a)
	}
	Number(otherFault(0x41), "otherA")
	Number(testFault(0x42), "faultB")
	func() {
		defer func() {
			msg, _ := recover().(string)
			if !strings.Contains(msg, "faultA and faultC are both fault number 0x41 of faults.testFault") {
				t.Fatalf("duplicate number: recovered %q, want a panic naming both", msg)
			}
		}()
		Number(testFault(0x41), "faultC")
	}()
	got := Numbers[testFault]()
	if len(got) != 2 || got[0x41] != "faultA" || got[0x42] != "faultB" {
		t.Fatalf("Numbers = %v", got)
	}
	if got := Numbers[otherFault](); len(got) != 1 || got[0x41] != "otherA" {
		t.Fatalf("Numbers of another type = %v", got)
	}
}

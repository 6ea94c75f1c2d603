package faults

import "testing"

func TestSetRejectsUnknownFault(t *testing.T) {
	if err := Set("no-such-fault"); err == nil {
		t.Fatal("Set accepted an unknown fault")
	}
	if err := Set(); err != nil {
		t.Fatalf("Set() with no faults: %v", err)
	}
	if Active(AckBeforeCommit) {
		t.Fatal("a fault is active without Set")
	}
}

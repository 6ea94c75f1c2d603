//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
)

// TestSlotsLoweredCountWaitsForDrainNegativeControl: client a acknowledges
// a lowered slot count as soon as it arrives (faults.SlotAckAtOnce), while
// its requests still run under the old count: the cluster frees the old
// count, b takes the slots, and more than N run at once.
//
//	go test -tags ration_faults -run TestSlotsLoweredCountWaitsForDrainNegativeControl ./client
func TestSlotsLoweredCountWaitsForDrainNegativeControl(t *testing.T) {
	breakA := func() func() {
		if err := faults.Set(string(faults.SlotAckAtOnce)); err != nil {
			t.Fatal(err)
		}
		return func() { _ = faults.Set() }
	}
	t.Cleanup(func() { _ = faults.Set() })
	if got := loweredCountMax(t, breakA, true); got <= 4 {
		t.Fatalf("the control (a acknowledging at once) was not caught: at most %d at once", got)
	} else {
		t.Logf("caught as expected: %d at once, limit 4", got)
	}
}

//go:build ration_faults

package client_test

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestSlotsLoweredCountWaitsForDrainNegativeControl: client a acknowledges
// a lowered slot count as soon as it arrives (faults.SlotAckAtOnce), while
// its requests still run under the old count: the cluster frees the old
// count, b takes the slots, and more than N run at once.
//
//	go test -tags ration_faults -run TestSlotsLoweredCountWaitsForDrainNegativeControl ./client
func TestSlotsLoweredCountWaitsForDrainNegativeControl(t *testing.T) {
	breakA := faultstest.Later(t, faults.SlotAckAtOnce)
	if got := loweredCountMax(t, breakA, true); got <= 4 {
		t.Fatalf("the control (a acknowledging at once) was not caught: at most %d at once", got)
	} else {
		t.Logf("caught as expected: %d at once, limit 4", got)
	}
}

// TestSlotsAcrossRestoreNegativeControl and
// TestSlotsAcrossReapplyNegativeControl: client a cancels its running
// requests at its installed lease's cancel time, whatever lease they
// started under (faults.SlotInstallExtendsOld, the rule before rule 7 of
// docs/concurrency.md §3): after the refused renewal its new grant extends
// the old requests, b takes the slots the cluster freed, and more than N
// run at once.
//
//	go test -tags ration_faults -run 'TestSlotsAcross.*NegativeControl' ./client
//
// Not parallel: faults.Set is process-wide.
func TestSlotsAcrossRestoreNegativeControl(t *testing.T) {
	slotsAcrossControl(t, slotRestore)
}

func TestSlotsAcrossReapplyNegativeControl(t *testing.T) {
	slotsAcrossControl(t, slotReapply)
}

func slotsAcrossControl(t *testing.T, ev slotEvent) {
	breakA := faultstest.Later(t, faults.SlotInstallExtendsOld)
	if got, above := slotsAcrossEvent(t, ev, breakA, true); got <= 4 {
		t.Fatalf("the control (a new grant extending the old lease's requests) was not caught: at most %d at once", got)
	} else {
		t.Logf("caught as expected: %d at once, limit 4, above it for %v", got, above.Round(100*time.Millisecond))
	}
}

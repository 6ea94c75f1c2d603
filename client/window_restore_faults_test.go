//go:build ration_faults

package client_test

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestWindowRestoreAfterElectionsNegativeControl: with the old restore
// rule back (the snapshot's window clock as it was: faults
// window-restore-clock-back), window time goes back across the restore by
// the re-syncs since the snapshot, and the spent window admits L again.
// The checks of TestWindowRestoreAfterElections must catch it: the step
// (unless the leader's next reconcile, 200 ms on, re-synced window time
// forward before the reading: window time was back in between) or the
// count (the window spent before the restore, no longer full when window
// time comes back to it).
func TestWindowRestoreAfterElectionsNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster for about 30 s")
	}
	faultstest.Use(t, faults.WindowRestoreClockBack)
	step, perWindow := restoreAfterElections(t)
	k, sure := fullestWindow(perWindow)
	t.Logf("control: window time's step across the restore: %v; the fullest 4 s window (%d) admitted %d for certain (L = 20)", step, k, sure)
	if step >= -200*time.Millisecond && sure <= 20 {
		t.Fatalf("the control was not caught: window time stepped %v across the restore, the fullest window admitted %d", step, sure)
	}
}

// TestWindowDefinitionRoundTripNegativeControl: with the old rule back (a
// definition change forgets the count of the window it leaves: faults
// window-forget-spent), month -> 1s -> month admits the month again.
func TestWindowDefinitionRoundTripNegativeControl(t *testing.T) {
	if testing.Short() {
		t.Skip("a real cluster for about 15 s")
	}
	faultstest.Use(t, faults.WindowForgetSpent)
	before, after := definitionRoundTrip(t)
	t.Logf("control: the month admitted %d, then %d after month -> 1s -> month (L = 20)", before, after)
	if after == 0 {
		t.Fatal("the control was not caught: the month admitted nothing more")
	}
}

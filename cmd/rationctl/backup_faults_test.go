//go:build ration_faults

package main

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestSnapshotSaveNegativeControl: with faults.SnapshotSaveHere the server
// asked saves its own state, as before saves went to the leader: backups
// saved through a follower right after an apply lack the policy, and
// TestSnapshotSaveHoldsAcknowledgedChanges's check must see it.
//
//	go test -tags ration_faults -run TestSnapshotSaveNegativeControl ./cmd/rationctl
func TestSnapshotSaveNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.SnapshotSaveHere)
	const tries = 20
	missing, _, _ := newBackupRun(t).saveRightAfterApply(tries)
	if len(missing) == 0 {
		t.Fatalf("the control (saving on the follower asked) was not caught: all %d backups hold their policy", tries)
	}
	t.Logf("caught as expected: %d of %d backups lack their policy", len(missing), tries)
}

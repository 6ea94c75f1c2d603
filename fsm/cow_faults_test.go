//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestSnapshotCopyOnWriteNegativeControl: a renewal that changes its
// ledger in place (skipping state.mut) must be caught by the same check.
func TestSnapshotCopyOnWriteNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "a renewal that skips the copy-on-write", "is not the state at its capture", func(rt *rapid.T) {
		runPointInTime(rt, t, faultRenewSkipsCopy, nil)
	})
}

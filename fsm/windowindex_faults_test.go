//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

func TestWindowIndexNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "a release that does not re-index", "differ", windowIndexHistories(t, faultWindowIndexSkipsRelease))
}

// TestWindowRevokeIndexNegativeControl: the same differential histories
// (new incarnations revoke through the holder index on one FSM, by a scan
// of every window key on the other) catch a holder index that keeps only
// a key's first holders.
func TestWindowRevokeIndexNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "a holder index that misses later holders", "differ", windowIndexHistories(t, faultWindowIndexSkipsHolder))
}

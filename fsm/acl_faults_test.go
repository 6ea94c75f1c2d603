//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

// TestACLNegativeControl: a snapshot that forgets the tokens (the state
// would fall back to "bootstrapped, no tokens") is caught.
func TestACLNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "")
	rapidcontrol.ExpectCaught(t, "snapshots that drop ACL tokens", "ACL state differs from the model", aclHistories(t, faultSnapshotDropsTokens))
}

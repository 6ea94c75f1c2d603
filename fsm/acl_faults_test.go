//go:build ration_faults

package fsm

import (
	"flag"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

// TestACLNegativeControl: a snapshot that forgets the tokens (the state
// would fall back to "bootstrapped, no tokens") is caught.
func TestACLNegativeControl(t *testing.T) {
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "1ms"} {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	rapidcontrol.ExpectCaught(t, "snapshots that drop ACL tokens", "ACL state differs from the model", aclHistories(t, faultSnapshotDropsTokens))
}

//go:build ration_faults

package fsm

import (
	"flag"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestSnapshotCopyOnWriteNegativeControl: a renewal that changes its
// ledger in place (skipping state.mut) must be caught by the same check.
func TestSnapshotCopyOnWriteNegativeControl(t *testing.T) {
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.checks": "2000", "rapid.shrinktime": "1ms"} {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	rapidcontrol.ExpectCaught(t, "a renewal that skips the copy-on-write", "is not the state at its capture", func(rt *rapid.T) {
		runPointInTime(rt, t, faultRenewSkipsCopy, nil)
	})
}

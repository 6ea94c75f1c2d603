//go:build ration_faults

package fsm

import (
	"flag"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

func TestWindowRandomHistoriesNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "100")
	rapidcontrol.ExpectCaught(t, "snapshots that drop window keys", "more than its limit", windowHistories(t, faultWindowSnapshotDropsKeys))
	// A restore that takes the snapshot's window clock (the rule before)
	// moves window time back by the re-syncs since the snapshot.
	rapidcontrol.ExpectCaught(t, "a restore that takes the snapshot's window clock", "window time went back", windowHistories(t, faultWindowRestoreSnapshotClock))
	// A definition change that forgets the count of the window it leaves
	// (the rule before FeatureWindowSpent) grants it a second count.
	if err := flag.Set("rapid.checks", "10000"); err != nil {
		t.Fatal(err)
	}
	rapidcontrol.ExpectCaught(t, "a definition change that forgets the window it leaves", "more than its limit", windowHistories(t, faultWindowForgetSpent))
}

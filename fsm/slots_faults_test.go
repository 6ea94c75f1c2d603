//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

func TestSlotRandomHistoriesNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "")
	rapidcontrol.ExpectCaught(t, "snapshots that drop slot keys", "more than the limit", slotHistories(t, faultSlotSnapshotDropsKeys))
}

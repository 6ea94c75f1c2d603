//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestTrickleKeysRenewAtTheirIntervalNegativeControl: servers that ask for
// an early acknowledgement after any cut (ack-any-cut, as before
// fsm.FeatureQuietAck): TestTrickleKeysRenewAtTheirInterval's check must
// catch the trickle's renewals asking for one.
func TestTrickleKeysRenewAtTheirIntervalNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.AckAnyCut)
	early, all := trickleEarlyShare(t)
	share := float64(early) / float64(all)
	t.Logf("control: %d of %d renewals (%.1f%%) asked for an early acknowledgement", early, all, 100*share)
	if share <= maxTrickleAckShare {
		t.Fatalf("the control was not caught: with any cut acknowledged early, %.1f%% of the trickle's renewals asked, within %.0f%%", 100*share, 100*maxTrickleAckShare)
	}
}

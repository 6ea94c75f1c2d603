//go:build ration_faults

package grpclimit_test

import (
	"testing"

	"github.com/ration-dev/ration/client/inflight"
)

// TestSlotsInterceptorsNegativeControls breaks the release and the
// refusal of inflight.ClusterLimiter.RunKey, the code path the
// interceptors share with every concurrency layer, and checks that the
// tests of TestSlotsInterceptors catch each break.
func TestSlotsInterceptorsNegativeControls(t *testing.T) {
	e := startSlotEnv(t)
	t.Run("KeepOnPanic", func(t *testing.T) {
		defer inflight.InjectFault(inflight.FaultKeepOnPanic)()
		if running := grpcAfterPanic(t, e); running == 0 {
			t.Fatal("the control (no release on panic) was not caught: no slot taken after the panics")
		} else {
			t.Logf("caught as expected: %d slots still taken", running)
		}
	})
	t.Run("RunOnRefusal", func(t *testing.T) {
		defer inflight.InjectFault(inflight.FaultRunOnRefusal)()
		if peak := grpcClusterWide(t, e, true); peak <= 3 {
			t.Fatalf("the control (refused calls run anyway) was not caught: at most %d at once", peak)
		} else {
			t.Logf("caught as expected: %d at once, limit 3", peak)
		}
	})
}

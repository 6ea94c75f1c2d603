//go:build ration_faults

package httplimit_test

import (
	"testing"

	"github.com/ration-dev/ration/client/inflight"
)

// TestSlotsMiddlewareNegativeControls breaks the release and the refusal
// of the one code path every concurrency layer shares
// (inflight.ClusterLimiter.RunKey) and checks that each test of
// TestSlotsMiddleware catches its break.
func TestSlotsMiddlewareNegativeControls(t *testing.T) {
	e := startSlotEnv(t)
	t.Run("KeepOnPanic", func(t *testing.T) {
		defer inflight.InjectFault(inflight.FaultKeepOnPanic)()
		if running := slotsAfterPanic(t, e, "panic-control"); running == 0 {
			t.Fatal("the control (no release on panic) was not caught: no slot taken after the panics")
		} else {
			t.Logf("caught as expected: %d slots still taken", running)
		}
	})
	t.Run("KeepOnCancel", func(t *testing.T) {
		defer inflight.InjectFault(inflight.FaultKeepOnCancel)()
		if running := slotsAfterCancel(t, e, "cancel-control"); running == 0 {
			t.Fatal("the control (no release on cancel) was not caught: no slot taken after the cancel")
		} else {
			t.Logf("caught as expected: %d slots still taken", running)
		}
	})
	t.Run("RunOnRefusal", func(t *testing.T) {
		defer inflight.InjectFault(inflight.FaultRunOnRefusal)()
		if peak := slotsClusterWide(t, e, "limit-control", true); peak <= 3 {
			t.Fatalf("the control (refused requests run anyway) was not caught: at most %d at once", peak)
		} else {
			t.Logf("caught as expected: %d at once, limit 3", peak)
		}
	})
}

// TestSlotsCancelGraceNegativeControl: with the handler under the
// request's context, not the slot's, nothing cancels it when its replica
// is cut off: TestSlotsCancelGrace's check catches it (about 7 s).
func TestSlotsCancelGraceNegativeControl(t *testing.T) {
	defer inflight.InjectFault(inflight.FaultRequestContext)()
	if ended, after := slotsCutOff(t); ended != nil {
		t.Fatalf("the control (the request's context) was not caught: the handler's context ended (%v) %v after the cut", ended, after)
	} else {
		t.Logf("caught as expected: still running %v after the cut", after)
	}
}

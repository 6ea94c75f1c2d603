//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestWindowChunkHoldsAboutTwoIntervalsNegativeControl: a client that
// reports its whole demand at every renewal of a window chunk
// (window-ask-ignores-chunk) piles each top-up on what the chunk still
// holds: TestWindowChunkHoldsAboutTwoIntervals' check must catch it.
func TestWindowChunkHoldsAboutTwoIntervalsNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.WindowAskIgnoresChunk)
	most := chunkHoard(t)
	t.Logf("control: the chunk held at most %.1f renewal intervals of its demand", most)
	if most <= maxChunkIntervals {
		t.Fatalf("the control was not caught: a chunk whose renewals ignore what it holds held at most %.1f intervals, within %v", most, maxChunkIntervals)
	}
}

// TestWindowSlowHolderDoesNotHoardNegativeControl: servers whose renewal
// asks for the floor whatever the chunk holds (window-ask-floor-kept, as
// before fsm.FeatureWindowAskLevel): TestWindowSlowHolderDoesNotHoard's
// check must catch the slow holder's chunk growing.
func TestWindowSlowHolderDoesNotHoardNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.WindowAskFloorKept)
	most := slowHolderHoard(t)
	t.Logf("control: a holder offering 2 units/s held at most %d units of its chunk", most)
	if most <= maxSlowHolderUnits {
		t.Fatalf("the control was not caught: with the floor kept, the slow holder held at most %d units, within %d", most, maxSlowHolderUnits)
	}
}

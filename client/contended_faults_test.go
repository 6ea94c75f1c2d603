//go:build ration_faults

package client_test

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestContendedTrickleGoesRemoteNegativeControl: with the contended rule
// broken (contended-ignored: a seat is thin by its cap alone), the pod of
// TestContendedTrickleGoesRemote keeps its seat through ten contended
// renewals (4 s, thirteen times the 300 ms a thin lease waits), which
// that test must catch.
func TestContendedTrickleGoesRemoteNegativeControl(t *testing.T) {
	faultstest.Use(t, faults.ContendedIgnored)
	pod, contended := contendedPod(t, 10)
	if s := pod.EdgeStats(); s.Remote != 0 || s.Demotions != 0 {
		t.Fatalf("the pod's key went remote with the contended rule broken (%+v): the control cannot tell", s)
	}
	t.Logf("caught as expected: the pod kept its seat through %d contended renewals", contended.Load())
}

//go:build ration_faults

package edge

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/faults/faultstest"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestCheckReserveNegativeControl breaks the end of a reservation's hold
// (faults.ReservationExpiryRefunds: an unsettled reservation is charged
// nothing) and checks that TestCheckReserveSettle's expiry check catches
// it. Not parallel: faults.Set is process-wide.
func TestCheckReserveNegativeControl(t *testing.T) {
	c := startCluster(t, reservePolicies)
	h := startEdge(t, servers(c), nil, "edge-reserve-control")
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)
	faultstest.Use(t, faults.ReservationExpiryRefunds)
	if !expiredThenCheck(t, h, "control") {
		t.Fatal("the control (expiry refunds the estimate) was not caught: the key still refused after the hold")
	}
	t.Log("caught as expected: the key admitted again after its reservation expired unsettled")
}

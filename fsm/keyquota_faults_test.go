//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestKeyQuotaFaultNegativeControl: the key-quota property against a
// build with faults.KeyQuotaIgnored on (what rationd -fault
// key-quota-ignored runs) must be caught: the fault reaches the state
// machine through New, as on a server.
func TestKeyQuotaFaultNegativeControl(t *testing.T) {
	if err := faults.Set(string(faults.KeyQuotaIgnored)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = faults.Set() })
	setRapidFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "faults.KeyQuotaIgnored", "key quota broken", func(rt *rapid.T) {
		runKeyQuota(rt, t, faultNone)
	})
}

//go:build ration_faults

package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestLeftoverBurstToPoolCaught: the demand-step model's negative
// control. A ledger that divides as before FeatureLeftoverBurst (the
// burst no demand claims back in the pool, or with the idle holders
// only) though the switch is on must be caught by the utilization check.
func TestLeftoverBurstToPoolCaught(t *testing.T) {
	withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "2000", "rapid.shrinktime": "1ms"})
	rapidcontrol.ExpectCaught(t, "leftover-burst-to-pool", "unclaimed", func(rt *rapid.T) {
		if f := burstStepModel(rt, faultLeftoverBurstToPool, true); f != "" {
			rt.Fatal(f)
		}
	})
}

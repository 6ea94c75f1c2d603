//go:build ration_faults

package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestLedgerIndexNegativeControl: broken index upkeep is caught by the
// same differential property: a renewal that leaves its lease's old held
// terms in the sums (a sum not decremented on one path), and a subset
// division that keeps one member too many.
func TestLedgerIndexNegativeControl(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault Fault
	}{
		{"a renewal's old held terms left in the sums", faultIndexHeldNotReduced},
		{"the subset keeps the member it should push out", faultSubsetKeepsBoundary},
	} {
		t.Run(c.name, func(t *testing.T) {
			withRapidFlags(t, map[string]string{"rapid.nofailfile": "true", "rapid.checks": "20000", "rapid.shrinktime": "1ms"})
			rapidcontrol.ExpectCaught(t, "the index with "+c.name, "differ", func(t *rapid.T) {
				runDiff(t, c.fault)
			})
		})
	}
}

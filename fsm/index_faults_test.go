//go:build ration_faults

package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestIndexNegativeControl: a build whose release forgets to update the
// indexes must be caught by the same property.
func TestIndexNegativeControl(t *testing.T) {
	rapidcontrol.ControlFlags(t, "2000")
	rapidcontrol.ExpectCaught(t, "a release that skips the indexes", "stale index", func(rt *rapid.T) {
		runIndexProperty(rt, t, faultIndexSkipsRelease, nil)
	})
}

//go:build ration_faults

package fsm

import (
	"flag"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// TestIndexNegativeControl: a build whose release forgets to update the
// indexes must be caught by the same property.
func TestIndexNegativeControl(t *testing.T) {
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.checks": "2000", "rapid.shrinktime": "1ms"} {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	rapidcontrol.ExpectCaught(t, "a release that skips the indexes", "stale index", func(rt *rapid.T) {
		runIndexProperty(rt, t, faultIndexSkipsRelease, nil)
	})
}

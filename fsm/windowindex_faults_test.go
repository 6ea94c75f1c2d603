//go:build ration_faults

package fsm

import (
	"flag"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
)

func TestWindowIndexNegativeControl(t *testing.T) {
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "1ms", "rapid.checks": "2000"} {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	rapidcontrol.ExpectCaught(t, "a release that does not re-index", "differ", windowIndexHistories(t, faultWindowIndexSkipsRelease))
}

// TestWindowRevokeIndexNegativeControl: the same differential histories
// (new incarnations revoke through the holder index on one FSM, by a scan
// of every window key on the other) catch a holder index that keeps only
// a key's first holders.
func TestWindowRevokeIndexNegativeControl(t *testing.T) {
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.shrinktime": "1ms", "rapid.checks": "2000"} {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	rapidcontrol.ExpectCaught(t, "a holder index that misses later holders", "differ", windowIndexHistories(t, faultWindowIndexSkipsHolder))
}

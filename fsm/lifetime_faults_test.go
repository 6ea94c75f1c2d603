//go:build ration_faults

package fsm

import (
	"flag"
	"github.com/ration-dev/ration/internal/rapidcontrol"
	"testing"

	"pgregory.net/rapid"
)

// TestBudgetLifetimeNegativeControl: the same property against the old
// rule (a deleted policy's idle budgets dropped, re-created and re-keyed
// policies starting fresh) must be caught.
func TestBudgetLifetimeNegativeControl(t *testing.T) {
	for name, v := range map[string]string{"rapid.nofailfile": "true", "rapid.checks": "20000", "rapid.shrinktime": "1ms"} {
		fl := flag.Lookup(name)
		old := fl.Value.String()
		if err := flag.Set(name, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flag.Set(name, old) })
	}
	rapidcontrol.ExpectCaught(t, "budgets that start full again", "quota bound broken", func(rt *rapid.T) {
		if v := runLifetime(rt, t, faultForgetRetired).check(); v != nil {
			rt.Fatalf("%v", v)
		}
	})
}

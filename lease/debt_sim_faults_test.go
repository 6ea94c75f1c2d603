//go:build ration_faults

package lease

import (
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/rapidcontrol"
	"pgregory.net/rapid"
)

// The debt model's negative controls (docs/design.md §4.1): each breaks
// rule (k) or the reservation rule on purpose and must be caught by the
// window check of settled costs against B + r·W + D.

// TestDebtForgottenAtExpiryCaught: a lease that ends without a release
// (expiry, replacement, revocation) takes its possible debt with it.
func TestDebtForgottenAtExpiryCaught(t *testing.T) {
	rapidcontrol.ControlFlags(t, "5000")
	rapidcontrol.ExpectCaught(t, "debt forgotten at lease expiry", "settled cost over", func(rt *rapid.T) {
		if f := debtModel(rt, FaultForgetDebt, debtClientOK); f != "" {
			rt.Fatal(f)
		}
	})
}

// TestDebtUnreportedAtReleaseCaught: the debt a release reports never
// reaches the ledger (a settlement never reported to the cluster).
func TestDebtUnreportedAtReleaseCaught(t *testing.T) {
	// 5000 histories missed it in 4 of 20 runs (about 1 s each); a
	// history that meets it is found within the first few thousand, so
	// ten times as many cost nothing when it is caught.
	rapidcontrol.ControlFlags(t, "50000")
	rapidcontrol.ExpectCaught(t, "settlement never reported", "settled cost over", func(rt *rapid.T) {
		if f := debtModel(rt, faultReleaseDebtUnreported, debtClientOK); f != "" {
			rt.Fatal(f)
		}
	})
}

// TestDebtLoweredAtOnceCaught: a renewal that lowers an allowance frees
// the old one at once, before the client has lifted its level and
// reported the debt beyond the new one. The random model meets it only
// in some tens of thousands of histories; the scripted history
// (loweredScenario) always does.
func TestDebtLoweredAtOnceCaught(t *testing.T) {
	f := loweredScenario(faultDebtLoweredAtOnce)
	if f == "" || !strings.Contains(f, "settled cost over") {
		t.Fatalf("the checker did not catch a lowered allowance freed at once: %q", f)
	}
	t.Logf("caught as expected: %s", f)
}

// TestReservationExpiredFreeCaught: a reservation that ends unsettled is
// charged nothing (its estimate goes back to the bucket) though its work
// was admitted.
func TestReservationExpiredFreeCaught(t *testing.T) {
	rapidcontrol.ControlFlags(t, "5000")
	rapidcontrol.ExpectCaught(t, "reservation charged nothing at its deadline", "settled cost over", func(rt *rapid.T) {
		if f := debtModel(rt, faultNone, debtClientExpiredFree); f != "" {
			rt.Fatal(f)
		}
	})
}

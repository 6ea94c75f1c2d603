//go:build ration_faults

package lease

import (
	"testing"
)

// TestNegativeControls proves the checker can fail: each deliberately
// broken ledger must be caught by the very same property.
func TestNegativeControls(t *testing.T) {
	for _, c := range []struct {
		name     string
		fault    Fault
		noOracle bool
		checks   int // histories searched; 0: negativeControlChecks
	}{
		{"start full without debit", FaultStartFullNoDebit, false, 0},
		{"forget superseded shares", faultForgetSuperseded, false, 0},
		{"clock resumes from its own reading", faultClockResumeOwnReading, false, 0},
		{"acknowledgement drops the acknowledged version", faultAckDropsAcked, false, 0},
		{"acknowledgement drops newer versions", faultAckDropsNewer, false, 0},
		{"forget replaced leases", FaultForgetReplaced, false, 0},
		// The window check alone catches it too, not only the oracle.
		{"forget replaced leases (bound only)", FaultForgetReplaced, true, 0},
		{"cap floor over held caps", faultFloorOverHeld, false, 0},
		{"cut credited before the clamp", FaultCreditAtReduction, true, 0},
		// The rarest: 82 to 10 737 histories to the first catch over seeds
		// 1-8 (mean about 4 000), and once not caught within 20 000. At
		// 80 000 a miss is about e^-20 (the search stops at the first
		// catch, so the time a run takes on average does not change).
		{"top-up without debit", faultTopUpNoDebit, true, 80_000},
		{"restore without the hold", faultRestoreNoHold, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) { negativeControlN(t, c.fault, !c.noOracle, c.checks) })
	}
}

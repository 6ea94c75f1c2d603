package fsm

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestFaultNumbersRegistered: every fault declared in this package has
// its number registered, so that two sharing a number panic when the
// package loads (fault.go; window and slot faults once shared 0x41).
func TestFaultNumbersRegistered(t *testing.T) {
	faultstest.AllRegistered[fault](t, "fault")
}

// TestFaultChecksCompileOut: every fault check of this package's
// production files is guarded by faultsBuilt (fault.go: has), so that a
// build without -tags ration_faults carries no broken branch.
func TestFaultChecksCompileOut(t *testing.T) {
	faultstest.AllGuarded(t)
}

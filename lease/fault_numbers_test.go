package lease

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestFaultNumbersRegistered: every fault declared in this package (its
// tests' too) has its number registered, so that two faults of one type
// sharing a number panic when the package loads (fault.go).
func TestFaultNumbersRegistered(t *testing.T) {
	faultstest.AllRegistered[Fault](t, "Fault")
	faultstest.AllRegistered[WindowFault](t, "WindowFault")
	faultstest.AllRegistered[SlotFault](t, "SlotFault")
	faultstest.AllRegistered[SlotClientFault](t, "SlotClientFault")
}

// TestFaultChecksCompileOut: every fault check of this package's
// production files is guarded by faultsBuilt (fault.go: has), so that a
// build without -tags ration_faults carries no broken branch.
func TestFaultChecksCompileOut(t *testing.T) {
	faultstest.AllGuarded(t)
}

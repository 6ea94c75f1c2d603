package inflight

import (
	"testing"

	"github.com/ration-dev/ration/internal/faults/faultstest"
)

// TestFaultNumbersRegistered: every fault declared in this package has
// its number registered (so a number given twice panics at load).
func TestFaultNumbersRegistered(t *testing.T) {
	faultstest.AllRegistered[fault](t, "fault")
}

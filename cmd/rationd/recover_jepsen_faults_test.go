//go:build jepsen && ration_faults

package main

import (
	"strings"
	"testing"

	"github.com/ration-dev/ration/internal/faults"
)

// TestRecoverLostQuorumNegativeControl: recovering without the hold
// (recovery-without-hold) hands the lost lease's burst out again at once:
// the checker catches it.
func TestRecoverLostQuorumNegativeControl(t *testing.T) {
	t.Cleanup(func() { _ = faults.Set() })
	err := recoverLostQuorum(t, []string{"--fault", string(faults.RecoveryWithoutHold)})
	if err == nil || !strings.Contains(err.Error(), "the bound is broken") {
		t.Fatalf("recovery without the hold: %v, want the bound broken", err)
	}
	t.Logf("caught as expected: %v", err)
}

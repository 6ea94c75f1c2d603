//go:build ration_faults

package coordinator_test

import (
	"strings"
	"testing"

	"github.com/ration-dev/ration/coordinator"
)

// TestBuiltinEdgeACLNegativeControl: with the server identity check
// skipped (any secret leases as rationd/<ID>; coordinator.SkipServerIdentity,
// -tags ration_faults only), the refusals of TestServerIdentityFromOutside
// catch the forged lease. make test runs it.
func TestBuiltinEdgeACLNegativeControl(t *testing.T) {
	defer coordinator.SkipServerIdentity()()
	at := aclCluster(t)
	joined := strings.Join(identityRefusals(t, at, false), "\n")
	if !strings.Contains(joined, "forged secret leased as rationd/") {
		t.Fatalf("the skipped identity check went unnoticed: %q", joined)
	}
	t.Logf("caught: %s", joined)
}

//go:build ration_faults

package coordinator_test

import (
	"strings"
	"testing"

	"github.com/ration-dev/ration/coordinator"
)

// TestACLNegativeControl: with the client-ID rule broken (any client ID
// allowed; coordinator.BreakACLClientIDs, -tags ration_faults only), the
// scope checks of TestACLClientTokenScope catch the forged incarnation. make
// test runs it.
func TestACLNegativeControl(t *testing.T) {
	defer coordinator.BreakACLClientIDs()()
	at := aclCluster(t)
	bad := clientScopeRefusals(t, at)
	joined := strings.Join(bad, "\n")
	if !strings.Contains(joined, "acme acquires as globex-1") || !strings.Contains(joined, "globex-1's lease is gone") {
		t.Fatalf("the broken rule went unnoticed: %q", joined)
	}
	t.Logf("caught: %s", joined)
}

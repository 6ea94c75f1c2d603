package coordinator

import (
	"fmt"

	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// windowsReady refuses a fixed-window policy until the leased-windows
// switch is on (every voter supports it; docs/design.md §3.6 and §8): a
// server that predates it would store the policy without leasing it, or
// refuse a calendar period, and apply later entries differently.
func (s *Server) windowsReady(p policy.Policy) error {
	if (p.Algorithm != policy.FixedWindow && p.Algorithm != policy.SlidingWindowApprox) || s.fsm.Features()&fsm.FeatureWindows != 0 {
		return nil
	}
	return fmt.Errorf("%w: policy %q is a %s, which the cluster leases only once every voter supports leased windows (feature switch FeatureWindows is off; upgrade every server)",
		rpcerr.ErrPrecondition, p.Name, p.Algorithm)
}

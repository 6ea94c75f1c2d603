package coordinator

import (
	"fmt"

	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// slotsReady refuses a concurrency policy until the cluster-wide
// concurrency switch is on (every voter supports it; docs/concurrency.md):
// a server that predates it does not know the algorithm and would refuse
// the whole command.
func (s *Server) slotsReady(p policy.Policy) error {
	if p.Algorithm != policy.Concurrency || s.fsm.Features()&fsm.FeatureConcurrency != 0 {
		return nil
	}
	return fmt.Errorf("%w: policy %q is a %s policy, which the cluster leases only once every voter supports cluster-wide concurrency (feature switch FeatureConcurrency is off; upgrade every server)",
		rpcerr.ErrPrecondition, p.Name, p.Algorithm)
}

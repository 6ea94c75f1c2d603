package coordinator

import (
	"fmt"

	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// keyQuotaReady refuses a policy that sets max_keys_per_value until the
// key-quota switch is on (every voter supports it; fsm.FeatureKeyQuota):
// until then the state machine stores the policy without it, as a server
// that predates the field does, and the setting would be lost. A policy
// that leaves it out (the default cap) is applied at once and capped when
// the switch turns on.
func (s *Server) keyQuotaReady(p policy.Policy) error {
	if p.MaxKeysPerValue == 0 || s.fsm.Features()&fsm.FeatureKeyQuota != 0 {
		return nil
	}
	return fmt.Errorf("%w: policy %q sets max_keys_per_value, which the cluster enforces only once every voter supports key quotas (feature switch FeatureKeyQuota is off; upgrade every server, or leave it out for the default)",
		rpcerr.ErrPrecondition, p.Name)
}

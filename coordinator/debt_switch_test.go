package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const debtSwitchPolicy = `
policies:
  - name: llm
    algorithm: token-bucket
    rate: 10
    burst: 10
    max_debt: 5
`

// TestDebtWaitsForItsSwitch: with one voter that does not advertise
// FeatureDebt (a server that predates it, which would apply the policy
// without its max_debt), applying a policy that sets max_debt is refused
// FAILED_PRECONDITION and nothing is proposed (docs/design.md §3.6, §4.1).
func TestDebtWaitsForItsSwitch(t *testing.T) {
	if testing.Short() {
		t.Skip("real clusters")
	}
	adv := fsm.KnownFeatures &^ fsm.FeatureDebt
	c := testcluster.New(t, 3, testcluster.WithConfig(func(i int, cfg *coordinator.Config) {
		if i == 2 {
			cfg.AdvertiseFeatures = &adv
		}
	}))
	c.WaitForStableLeader(t)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			if f := s.FSM().Features(); f != adv {
				return fmt.Errorf("%s: features %#x, want %#x", s.ID(), f, adv)
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Admin(0).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: debtSwitchPolicy})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a max_debt policy on a cluster without the debt switch: %v, want FAILED_PRECONDITION", err)
	}
	if _, ok := c.Leader().FSM().Policy("llm"); ok {
		t.Fatal("the refused policy was applied")
	}
}

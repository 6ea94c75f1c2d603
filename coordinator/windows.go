package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ration-dev/ration/api"
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

// isWindowPolicy: a policy the cluster leases only with FeatureWindows on.
func isWindowPolicy(p policy.Policy) bool {
	return p.Algorithm == policy.FixedWindow || p.Algorithm == policy.SlidingWindowApprox
}

// deferredPolicies are the initial (--config) policies that wait for a
// feature switch this entry turns on (want): window policies for
// FeatureWindows, concurrency policies for FeatureConcurrency. The entry
// that turns the switch on applies them (SetFeaturesCommand's
// initial_window_policies, applied by the FSM once leased windows are on),
// so no leader change between two entries can lose them. With a switch
// off, nobody can have applied such a policy, so one absent from the state
// was never applied (nil: none).
func (s *Server) deferredPolicies(want uint64) *api.ApplyPoliciesCommand {
	if s.cfg.Policies == nil {
		return nil
	}
	on := s.fsm.Features()
	if (on|want)&fsm.FeatureWindows == 0 {
		return nil // the FSM applies the field only with leased windows on
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range s.cfg.Policies.Policies {
		var bit uint64
		switch {
		case isWindowPolicy(p):
			bit = fsm.FeatureWindows
		case p.Algorithm == policy.Concurrency:
			bit = fsm.FeatureConcurrency
		}
		if bit == 0 || on&bit != 0 || want&bit == 0 {
			continue
		}
		if _, ok := s.fsm.Policy(p.Name); !ok && p.Leasable() == nil {
			cmd.Policies = append(cmd.Policies, p.ToProto())
		}
	}
	if len(cmd.Policies) == 0 {
		return nil
	}
	return cmd
}

// windowClockMinLag: the leader re-syncs window time to its wall clock
// (fsm.CmdWindowClock) once window time lags it by more than this.
const windowClockMinLag = 100 * time.Millisecond

// syncWindowClock re-syncs window time forward to this leader's wall
// clock if it lags (elections freeze cluster time, so it falls behind at
// every leader change; docs/design.md §8.2). A lag above
// fsm.MaxWindowClockStepNanos is not proposed (the FSM would refuse it): it
// is logged, loudly when loud (once per term), as a wrong wall clock or a
// whole-cluster outage needs an operator's eye.
func (s *Server) syncWindowClock(loud bool) {
	now := s.clusterNow()
	if now == 0 {
		return
	}
	wall := time.Now().UnixNano()
	lag, ok := s.fsm.WindowClockLag(now, wall)
	if !ok || lag < windowClockMinLag.Nanoseconds() {
		return
	}
	if lag > fsm.MaxWindowClockStepNanos {
		lvl := slog.LevelDebug
		if loud {
			lvl = slog.LevelError
		}
		s.log.Log(context.Background(), lvl, "window time lags this leader's wall clock by more than a re-sync may step; not re-synced (check this server's clock)",
			"lag", time.Duration(lag), "max_step", time.Duration(fsm.MaxWindowClockStepNanos))
		return
	}
	if _, _, err := s.propose(fsm.CmdWindowClock, &api.WindowClockCommand{WallUnixNanos: time.Now().UnixNano()}); err != nil {
		s.log.Warn("re-syncing window time to the wall clock", "lag", time.Duration(lag), "err", err)
		return
	}
	s.log.Info("window time re-synced to the leader's wall clock", "lag", time.Duration(lag))
}

package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
)

// windowClockMinLag: the leader re-syncs window time to its wall clock
// (fsm.CmdWindowClock) once window time lags it by more than this, and
// slews it back once it is ahead by more than this (FeatureWindowSlew).
const windowClockMinLag = 100 * time.Millisecond

// wallNow is this server's wall clock (Config.WallClock).
func (s *Server) wallNow() int64 {
	if s.cfg.WallClock != nil {
		return s.cfg.WallClock().UnixNano()
	}
	return time.Now().UnixNano()
}

// windowClockAction is what a re-sync does at lag (wall clock less window
// time) with a slew of slewLeft in progress: "step" (window time behind:
// forward by the lag), "slew" (ahead, and still ahead by more than
// windowClockMinLag once the slew in progress is done, or that slew would
// overshoot: take the excess back from now), or "none"; and by how much.
func windowClockAction(st fsm.WindowClockState) (string, int64) {
	minLag := windowClockMinLag.Nanoseconds()
	after := st.LagNanos + st.SlewLeftNanos // the lag once the slew in progress is done
	switch {
	case st.LagNanos >= minLag:
		return "step", st.LagNanos
	case st.LagNanos < 0 && (after <= -minLag || st.SlewLeftNanos > 0 && after >= minLag):
		return "slew", -st.LagNanos
	}
	return "none", 0
}

// syncWindowClock re-syncs window time to this leader's wall clock:
// forward if it lags (elections freeze cluster time, so it falls behind at
// every leader change; docs/design.md §8.2), by a slew if it is ahead (a
// fast leader clock, or a wall clock ahead at the switch; with
// FeatureWindowSlew). A lag or excess above fsm.MaxWindowClockStepNanos is
// not proposed (the FSM would refuse it): it is logged, loudly when loud
// (once per term), as a wrong wall clock or a whole-cluster outage needs
// an operator's eye (Admin.WindowResync with a larger max_step_nanos:
// rationctl windows resync).
func (s *Server) syncWindowClock(loud bool) {
	if !s.windowClockMu.TryLock() {
		return // a snapshot restore is in progress; the next round re-syncs
	}
	defer s.windowClockMu.Unlock()
	now := s.clusterNow()
	if now == 0 {
		return
	}
	st := s.fsm.WindowClock(now, s.wallNow())
	if !st.Set {
		return
	}
	action, amount := windowClockAction(st)
	if action == "none" {
		return
	}
	if amount > fsm.MaxWindowClockStepNanos {
		lvl := slog.LevelDebug
		if loud {
			lvl = slog.LevelError
		}
		msg := "window time lags this leader's wall clock by more than a re-sync may step; not re-synced (check this server's clock, or re-sync with a larger max step: rationctl windows resync)"
		if action == "slew" {
			msg = "window time is ahead of this leader's wall clock by more than a slew takes back; not slewed (check this server's clock)"
		}
		s.log.Log(context.Background(), lvl, msg, "lag", time.Duration(st.LagNanos), "max_step", time.Duration(fsm.MaxWindowClockStepNanos))
		return
	}
	if _, _, err := s.propose(fsm.CmdWindowClock, &api.WindowClockCommand{WallUnixNanos: s.wallNow(), Slew: action == "slew"}); err != nil {
		s.log.Warn("re-syncing window time to the wall clock", "action", action, "lag", time.Duration(st.LagNanos), "err", err)
		return
	}
	if action == "slew" {
		s.log.Info("window time ahead of the leader's wall clock: slewing it back", "excess", time.Duration(amount),
			"takes", time.Duration(amount*lease.WindowSlewDivisor))
		return
	}
	s.log.Info("window time re-synced to the leader's wall clock", "lag", time.Duration(st.LagNanos))
}

// windowResync is an operator's re-sync (Admin.WindowResync), on the
// leader: as syncWindowClock, with a forward step or a slew of up to
// maxStep (bounded by fsm.MaxWindowClockOperatorStepNanos) instead of
// fsm.MaxWindowClockStepNanos; dryRun only reports.
func (s *Server) windowResync(req *api.WindowResyncRequest) (*api.WindowResyncResponse, error) {
	s.windowClockMu.Lock()
	defer s.windowClockMu.Unlock()
	maxStep := req.GetMaxStepNanos()
	now := s.clusterNow()
	if now == 0 {
		return nil, fmt.Errorf("%w: this leader is still taking over", rpcerr.ErrUnavailable)
	}
	wall := s.wallNow()
	st := s.fsm.WindowClock(now, wall)
	if !st.Set {
		return nil, fmt.Errorf("%w: window time is not in use (leased windows are off, or no window policy or key exists)", rpcerr.ErrPrecondition)
	}
	action, amount := windowClockAction(st)
	resp := &api.WindowResyncResponse{Leader: s.cfg.ID, LeaderWallUnixNanos: wall, WindowUnixNanos: st.WindowNanos, LagNanos: st.LagNanos,
		Action: action, AmountNanos: amount, SlewLeftNanos: st.SlewLeftNanos}
	limit := max(fsm.MaxWindowClockStepNanos, maxStep)
	if amount > limit {
		err := fmt.Errorf("%w: window time %s %v (leader %s's wall clock %s), more than the %v allowed; refused (after checking the leader's clock, raise max_step_nanos for a step)",
			rpcerr.ErrPrecondition, map[string]string{"step": "lags by", "slew": "is ahead by"}[action], time.Duration(amount), s.cfg.ID,
			time.Unix(0, wall).UTC().Format(time.RFC3339Nano), time.Duration(limit))
		if !req.GetDryRun() {
			return nil, err
		}
		resp.Refused = err.Error()
	}
	if req.GetDryRun() || action == "none" {
		return resp, nil
	}
	_, idx, err := s.propose(fsm.CmdWindowClock, &api.WindowClockCommand{WallUnixNanos: s.wallNow(), Slew: action == "slew", MaxStepNanos: maxStep})
	if err != nil {
		return nil, err
	}
	resp.Applied, resp.Index = true, idx
	resp.SlewLeftNanos = s.fsm.WindowClock(s.clusterNow(), s.wallNow()).SlewLeftNanos
	// An operator's override of the clock is an admin action: logged at
	// warning level, with what it did.
	s.log.Warn("operator re-synced window time", "action", action, "amount", time.Duration(amount), "max_step", time.Duration(maxStep),
		"lag_before", time.Duration(st.LagNanos), "index", idx)
	return resp, nil
}

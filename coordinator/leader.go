package coordinator

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
	"github.com/ration-dev/ration/internal/coarseclock"
	"github.com/ration-dev/ration/internal/faults"
	"github.com/ration-dev/ration/internal/policy"
	"github.com/ration-dev/ration/internal/rpcerr"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/protobuf/proto"
)

// clusterClock stamps cluster time into commands on the leader: the last
// committed cluster time when it took over, plus its monotonic time since.
// Within a term it never goes backwards and it ignores wall-clock jumps
// (Config.Clock reads Go's monotonic clock). The time of an election is not
// counted, so cluster time lags real time after a leader change: reclaims
// come later, never earlier.
//
// Each term starts from the committed cluster time, never from this
// server's own readings in an earlier term. A leader reads its clock while
// nothing commits (the expire loop, ListLeases), so after an idle spell its
// last reading can be far past the committed time. Another leader then
// continues from the committed time and grants leases against it; resuming
// from the old reading on winning leadership back would reclaim those live
// leases at once and grant their shares again. Readings that were never
// committed were seen by nobody that leases depend on: every answer to a
// client is computed from committed state.
//
// The clock is valid only in the Raft term it was taken over in, after the
// leader loop's barrier. Before that (a new leader still applying earlier
// terms' entries) the zero clock reads about 292 years; a clock left from
// an earlier term of this server counts the elections since as cluster
// time. Either would make leases expire early, so nothing is stamped until
// the clock is ready for the current term.
type clusterClock struct {
	mu    sync.Mutex
	src   *coarseclock.Clock // the monotonic source (Config.Clock)
	base  int64
	start int64 // src.Precise() at takeOver
	last  int64
	term  uint64
	ready bool
}

// takeOver starts the clock for term from base, the cluster time of the
// last entry applied after the term's barrier.
func (c *clusterClock) takeOver(base int64, term uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.src == nil {
		c.src = coarseclock.Default()
	}
	c.base, c.start = base, c.src.Precise()
	if faults.Active(faults.ClockResumeOwnReading) {
		// The negative control: resume from this server's own last reading.
		c.last = max(c.last, base)
	} else {
		c.last = base
	}
	c.term, c.ready = term, true
}

// stepDown invalidates the clock until the next takeOver.
func (c *clusterClock) stepDown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready = false
}

func (c *clusterClock) readyLocked(term uint64) bool { return c.ready && c.term == term }

// readyFor reports whether the clock may stamp commands in term.
func (c *clusterClock) readyFor(term uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyLocked(term)
}

func (c *clusterClock) nowLocked() int64 {
	t := c.base + (c.src.Precise() - c.start)
	if t < c.last {
		t = c.last
	}
	c.last = t
	return t
}

// Now returns the current cluster time (leader only).
func (c *clusterClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

// errTakingOver: this server leads but has not taken over the cluster
// clock for its term yet (the forwarder waits instead of returning it).
var errTakingOver = fmt.Errorf("%w: the leader is still taking over", rpcerr.ErrUnavailable)

// clusterNow returns the leader's current cluster time, or 0 when this
// server cannot stamp (not leading, or still taking over).
func (s *Server) clusterNow() int64 {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	if !s.clock.readyLocked(s.raft.CurrentTerm()) {
		return 0
	}
	return s.clock.nowLocked()
}

// leaderReady reports whether this server leads, may stamp commands, and
// the baseline is on (ensureBaseline; until then proposeAsync refuses
// every other command, so callers wait as for a leader taking over).
func (s *Server) leaderReady() bool {
	return s.IsLeader() && s.clock.readyFor(s.raft.CurrentTerm()) && s.fsm.BaselineOn()
}

// proposeAsync stamps cluster time and appends a command. Stamping and
// appending happen under one lock so stamps increase in log order.
func (s *Server) proposeAsync(ct fsm.CommandType, msg proto.Message) (raft.ApplyFuture, error) {
	s.clock.mu.Lock()
	defer s.clock.mu.Unlock()
	if !s.clock.readyLocked(s.raft.CurrentTerm()) {
		return nil, errTakingOver
	}
	if ct != fsm.CmdSetFeatures && !s.fsm.BaselineOn() {
		// A new cluster's first entry turns the baseline on
		// (ensureBaseline); every server refuses anything before it.
		return nil, errTakingOver
	}
	data, err := fsm.Encode(ct, s.clock.nowLocked(), msg)
	if err != nil {
		return nil, err
	}
	return s.raft.Apply(data, s.cfg.ApplyTimeout), nil
}

// propose appends a command and waits for it to be applied.
func (s *Server) propose(ct fsm.CommandType, msg proto.Message) (*fsm.Result, uint64, error) {
	f, err := s.proposeAsync(ct, msg)
	if err != nil {
		return nil, 0, err
	}
	if err := f.Error(); err != nil {
		return nil, 0, raftErr(err)
	}
	res, _ := f.Response().(*fsm.Result)
	if res == nil {
		return nil, f.Index(), fmt.Errorf("%w: command returned no result", rpcerr.ErrUnavailable)
	}
	return res, f.Index(), res.Err
}

// raftErr classifies Raft failures: a lost or absent leadership is
// Unavailable (the client retries; lease calls are idempotent).
func raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %w", rpcerr.ErrUnavailable, err)
	}
	return err
}

// monitorLeadership runs the leader loop while this server leads.
func (s *Server) monitorLeadership() {
	var stop chan struct{}
	var done sync.WaitGroup
	for {
		select {
		case <-s.shutdownCh:
			if stop != nil {
				close(stop)
				done.Wait()
			}
			return
		case isLeader := <-s.raft.LeaderCh():
			switch {
			case isLeader && stop == nil:
				stop = make(chan struct{})
				done.Add(1)
				go func(stop chan struct{}) {
					defer done.Done()
					s.leaderLoop(stop)
				}(stop)
			case !isLeader && stop != nil:
				close(stop)
				done.Wait()
				stop = nil
			}
		}
	}
}

// leaderLoop: barrier first, take over the cluster clock, then propose
// expiries when due and reconcile gossip membership into Raft.
func (s *Server) leaderLoop(stop chan struct{}) {
	s.log.Info("became leader")
	defer s.log.Info("leadership lost")
	defer s.clock.stepDown()
	defer s.audit.reset(false)
	term, margin, inheritedUntil, established := s.establish(stop)
	if !established {
		return
	}
	s.audit.reset(true) // the audit is leader-local: it starts empty in every term this server leads

	if !s.ensureBaseline(stop) {
		return
	}
	if s.cfg.Policies != nil && len(s.fsm.Policies()) == 0 {
		cmd := &api.ApplyPoliciesCommand{}
		for _, p := range s.cfg.Policies.Policies {
			if err := p.Leasable(); err != nil {
				s.log.Error("initial policy cannot be leased; skipped", "policy", p.Name, "err", err)
				continue
			}
			cmd.Policies = append(cmd.Policies, p.ToProto())
		}
		if _, _, err := s.propose(fsm.CmdApplyPolicies, cmd); err != nil {
			s.log.Error("applying initial policies", "err", err)
		}
	}

	s.syncWindowClock(true)

	expire := time.NewTicker(s.cfg.ExpireInterval)
	defer expire.Stop()
	reconcile := time.NewTicker(s.cfg.ReconcileInterval)
	defer reconcile.Stop()
	lastExpire := time.Now()
	s.reconcile()
	s.enableFeatures()
	defer s.runAutopilot()()
	for {
		select {
		case <-stop:
			return
		case <-s.shutdownCh:
			return
		case <-reconcile.C:
			s.reconcile()
			s.enableFeatures()
			s.syncWindowClock(false)
		case <-s.members.nudge:
			s.reconcile()
			s.enableFeatures()
			// A server that left is due for removal at once.
			s.autopilot.RemoveDeadServers()
		case <-expire.C:
			if s.raft.CurrentTerm() != term {
				// Leadership was lost and won back between two reads of
				// LeaderCh (raft keeps only its latest value): establish
				// the new term as a new leader would.
				s.clock.stepDown()
				if term, margin, inheritedUntil, established = s.establish(stop); !established {
					return
				}
				s.audit.reset(true)
				if !s.ensureBaseline(stop) {
					return
				}
				s.syncWindowClock(true)
				continue
			}
			now := s.clock.Now()
			due, ok := s.fsm.NextDue()
			through := now
			if now < inheritedUntil {
				// At least 1: 0 would mean the entry's own cluster time,
				// with no margin at all.
				through = max(now-margin, 1)
			}
			housekeeping := time.Since(lastExpire) > 10*time.Second
			if (ok && due <= through) || housekeeping {
				cmd := &api.ExpireCommand{ClientRetentionNanos: s.cfg.ClientRetention.Nanoseconds(), ExpireThroughNanos: through}
				if res, _, err := s.propose(fsm.CmdExpire, cmd); err != nil {
					s.log.Warn("expire", "err", err)
				} else {
					s.stats.addExpired(res.ExpiredByPolicy)
				}
				lastExpire = time.Now()
			}
		}
	}
}

// establish makes this leader's term usable: a barrier in the term (every
// earlier entry is applied), then the cluster clock taken over from the
// last applied cluster time. It retries until it succeeds in one term, or
// leadership or the server stops (ok false).
func (s *Server) establish(stop chan struct{}) (term uint64, margin, inheritedUntil int64, ok bool) {
	for {
		term = s.raft.CurrentTerm()
		err := s.raft.Barrier(s.cfg.ApplyTimeout).Error()
		if err == nil && s.raft.CurrentTerm() == term {
			break
		}
		if err != nil {
			s.log.Warn("barrier failed", "err", err)
		}
		select {
		case <-stop:
			return 0, 0, 0, false
		case <-s.shutdownCh:
			return 0, 0, 0, false
		case <-time.After(50 * time.Millisecond):
		}
	}
	base := s.fsm.ClusterTime()
	s.clock.takeOver(base, term)
	margin, inheritedUntil = inheritedMargin(s.fsm.Policies(), base)
	return term, margin, inheritedUntil, true
}

// inheritedMargin: leases granted under the previous leader are expired a
// margin late, ρ·D for the largest ρ and D of any policy, until the new
// leader's clock has passed every expiry they could have.
func inheritedMargin(policies []policy.Policy, base int64) (margin, until int64) {
	var maxD, maxRho int64
	for _, p := range policies {
		maxD = max(maxD, p.LeaseDurationNanos)
		maxRho = max(maxRho, p.DriftPPM)
	}
	margin = lease.MulDiv(maxD, maxRho, lease.PPM) + 1
	return margin, base + maxD + margin
}

// reconcile makes the Raft configuration follow gossip (leader only): it
// adds new servers as non-voters, rewrites moved servers' addresses and
// keeps the reap clocks. Autopilot promotes and removes (autopilot.go).
func (s *Server) reconcile() {
	if !s.IsLeader() {
		return
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	now := time.Now()
	s.members.mu.Lock()
	plan := planReconcile(raft.ServerID(s.cfg.ID), s.members.members(), f.Configuration(), s.members.deadAt, now, s.cfg.ReapTimeout)
	plan.applyDeaths(s.members.deadAt, now)
	s.members.mu.Unlock()
	for _, srv := range plan.readdress {
		s.log.Info("server gossips a new raft address; updating the configuration", "id", srv.ID, "addr", srv.Address, "suffrage", srv.Suffrage)
		// Adding an ID already in the configuration rewrites its address
		// in place; AddVoter would also promote a non-voter.
		add := s.raft.AddNonvoter
		if srv.Suffrage == raft.Voter {
			add = s.raft.AddVoter
		}
		if err := add(srv.ID, srv.Address, 0, s.cfg.ApplyTimeout).Error(); err != nil {
			s.log.Warn("update server address", "id", srv.ID, "err", err)
		}
	}
	for _, srv := range plan.add {
		s.log.Info("adding server as a non-voter; autopilot promotes it once stable", "id", srv.ID, "addr", srv.Address,
			"stabilization", s.cfg.ServerStabilizationTime)
		if err := s.raft.AddNonvoter(srv.ID, srv.Address, 0, s.cfg.ApplyTimeout).Error(); err != nil {
			s.log.Warn("add non-voter", "id", srv.ID, "err", err)
		}
	}
}

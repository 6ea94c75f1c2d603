package coordinator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
	"google.golang.org/protobuf/proto"

	"github.com/ration-dev/ration/api"
)

// Autopilot on the leader (hashicorp/raft-autopilot, as Consul runs it).
// While a server leads, autopilot recomputes every AutopilotInterval each
// server's health and the cluster's failure tolerance, promotes stable
// non-voters and removes the servers due for removal. Membership has one
// owner per action:
//
//   - planReconcile (membership.go, run by the leader loop) owns what
//     gossip says about who exists and where: it adds a server new to the
//     Raft configuration as a non-voter, rewrites the address of one that
//     moved (keeping its suffrage), and keeps the reap clocks (deadAt).
//     It also decides which servers are due for removal (left, or dead
//     longer than ReapTimeout, only while the alive voters keep a quorum),
//     but removes none.
//   - autopilot owns suffrage and removal: it promotes a non-voter once it
//     has been healthy for ServerStabilizationTime (stablePromoter) and
//     removes the failed servers planReconcile says are due
//     (FilterFailedServerRemovals, RemoveFailedServer), at most a minority
//     of the voters per round. It never demotes.
//
// The servers of a bootstrap (bootstrapConfig) are voters from the start.
//
// Health, as autopilot judges it: alive in the leader's gossip, answered
// the leader on Raft within AutopilotMaxLastContact, in the leader's term,
// and with a log at most AutopilotMaxTrailingLogs entries behind the
// leader's. The follower figures are what the follower last answered to
// an AppendEntries or heartbeat (gatedTransport records them), so the
// leader judges without an RPC of its own (and without an ACL token). The
// failure tolerance is healthy voters minus the quorum.
//
// The leader publishes what it computed in the Status RPC (the autopilot
// field) and as the ration_autopilot_* metrics; a follower publishes
// nothing (it runs no autopilot), and the state is dropped when leadership
// is lost.

// newAutopilot is the server's autopilot; the leader loop starts and stops it.
func newAutopilot(s *Server) *autopilot.Autopilot {
	// autopilot names its logger "autopilot" itself.
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: slogWriter{s.log.With("component", "autopilot")}, DisableTime: true})
	return autopilot.New(s.raft, autopilotDelegate{s},
		autopilot.WithLogger(logger),
		autopilot.WithUpdateInterval(s.cfg.AutopilotInterval),
		autopilot.WithReconcileInterval(s.cfg.AutopilotInterval),
		autopilot.WithPromoter(stablePromoter{s}))
}

// runAutopilot starts autopilot for this leadership and returns the
// function that stops it and drops its state.
func (s *Server) runAutopilot() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	s.autopilot.Start(ctx)
	return func() {
		cancel()
		<-s.autopilot.Stop()
		s.apState.Store(nil)
	}
}

// AutopilotState is what the leader's autopilot last computed (a copy),
// or nil on a server that does not lead or has not computed it yet.
func (s *Server) AutopilotState() *api.AutopilotState {
	st := s.apState.Load()
	if st == nil || !s.IsLeader() {
		return nil
	}
	return proto.Clone(st).(*api.AutopilotState)
}

type autopilotDelegate struct{ s *Server }

func (d autopilotDelegate) AutopilotConfig() *autopilot.Config {
	c := d.s.cfg
	return &autopilot.Config{
		CleanupDeadServers:      true,
		LastContactThreshold:    c.AutopilotMaxLastContact,
		MaxTrailingLogs:         c.AutopilotMaxTrailingLogs,
		ServerStabilizationTime: c.ServerStabilizationTime,
	}
}

// NotifyState keeps the state for Status and the metrics.
func (d autopilotDelegate) NotifyState(st *autopilot.State) {
	d.s.apState.Store(autopilotProto(st, d.AutopilotConfig(), d.s.cfg.ReapTimeout, time.Now()))
}

// FetchServerStats reads this server's own Raft figures and, for the
// others, their last answers on Raft. One that never answered this server
// has last contact -1 (unhealthy).
func (d autopilotDelegate) FetchServerStats(_ context.Context, servers map[raft.ServerID]*autopilot.Server) map[raft.ServerID]*autopilot.ServerStats {
	s := d.s
	out := make(map[raft.ServerID]*autopilot.ServerStats, len(servers))
	now := time.Now()
	for id := range servers {
		if string(id) == s.cfg.ID {
			out[id] = &autopilot.ServerStats{LastTerm: parseUint(s.raft.Stats()["last_log_term"]), LastIndex: s.raft.LastIndex()}
			continue
		}
		a, ok := s.transport.answers.get(id)
		if !ok {
			out[id] = &autopilot.ServerStats{LastContact: -1}
			continue
		}
		out[id] = &autopilot.ServerStats{LastContact: now.Sub(a.at), LastTerm: a.term, LastIndex: a.idx}
	}
	return out
}

// KnownServers: every server gossip knows, and every server of the Raft
// configuration, each a potential voter (NodeVoter: autopilot's removal
// limits count potential voters from these). One in the configuration that gossip has not heard of is
// failed (as planReconcile counts it dead), never "stale": autopilot would
// remove a stale server at once, with no reap time.
func (d autopilotDelegate) KnownServers() map[raft.ServerID]*autopilot.Server {
	s := d.s
	out := map[raft.ServerID]*autopilot.Server{}
	for _, m := range s.members.members() {
		if !m.ok {
			continue
		}
		st := autopilot.NodeAlive
		switch m.Status {
		case statusDead:
			st = autopilot.NodeFailed
		case statusLeft:
			st = autopilot.NodeLeft
		}
		id := raft.ServerID(m.Meta.ID)
		out[id] = &autopilot.Server{ID: id, Name: m.Name, Address: raft.ServerAddress(m.Meta.RaftAddr), NodeStatus: st,
			RaftVersion: raft.ProtocolVersionMax, NodeType: autopilot.NodeVoter}
	}
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			if _, ok := out[srv.ID]; !ok {
				out[srv.ID] = &autopilot.Server{ID: srv.ID, Name: string(srv.ID), Address: srv.Address, NodeStatus: autopilot.NodeFailed,
					RaftVersion: raft.ProtocolVersionMax, NodeType: autopilot.NodeVoter}
			}
		}
	}
	self := raft.ServerID(s.cfg.ID)
	if me, ok := out[self]; ok {
		me.NodeStatus, me.IsLeader = autopilot.NodeAlive, s.IsLeader()
	}
	return out
}

// RemoveFailedServer removes a server FilterFailedServerRemovals kept
// (left, or dead longer than ReapTimeout). Autopilot waits for it: one
// configuration change, committed in milliseconds.
func (d autopilotDelegate) RemoveFailedServer(srv *autopilot.Server) {
	s := d.s
	s.log.Info("removing server that left, or was dead longer than the reap timeout", "id", srv.ID, "gossip", srv.NodeStatus)
	if err := s.raft.RemoveServer(srv.ID, 0, s.cfg.ApplyTimeout).Error(); err != nil {
		s.log.Warn("remove server", "id", srv.ID, "err", err)
	}
}

// stablePromoter is autopilot's StablePromoter with two changes: the
// stabilization time always applies (StablePromoter waives it for a
// leader whose autopilot has run less than that long, so a server that
// joins just after an election would vote at once), and removals are
// only those planReconcile says are due.
type stablePromoter struct {
	s *Server
}

func (stablePromoter) GetServerExt(*autopilot.Config, *autopilot.ServerState) any { return nil }
func (stablePromoter) GetStateExt(*autopilot.Config, *autopilot.State) any        { return nil }
func (stablePromoter) IsPotentialVoter(t autopilot.NodeType) bool                 { return t == autopilot.NodeVoter }

func (stablePromoter) GetNodeTypes(_ *autopilot.Config, st *autopilot.State) map[raft.ServerID]autopilot.NodeType {
	types := make(map[raft.ServerID]autopilot.NodeType, len(st.Servers))
	for id := range st.Servers {
		types[id] = autopilot.NodeVoter
	}
	return types
}

// CalculatePromotionsAndDemotions promotes every non-voter healthy for the
// whole stabilization time, and demotes nobody.
func (stablePromoter) CalculatePromotionsAndDemotions(c *autopilot.Config, st *autopilot.State) autopilot.RaftChanges {
	return autopilot.RaftChanges{Promotions: promotions(st, c.ServerStabilizationTime, time.Now())}
}

// promotions are the non-voters of st healthy for at least stabilize at now.
func promotions(st *autopilot.State, stabilize time.Duration, now time.Time) []raft.ServerID {
	var out []raft.ServerID
	for id, srv := range st.Servers {
		if srv.State == autopilot.RaftNonVoter && srv.Health.IsStable(now, stabilize) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// FilterFailedServerRemovals keeps the failed servers planReconcile says
// are due for removal at this moment, and no others.
func (p stablePromoter) FilterFailedServerRemovals(_ *autopilot.Config, st *autopilot.State, failed *autopilot.FailedServers) *autopilot.FailedServers {
	s := p.s
	var cfg raft.Configuration
	for id, srv := range st.Servers {
		suffrage := raft.Voter
		switch srv.State {
		case autopilot.RaftNonVoter:
			suffrage = raft.Nonvoter
		case autopilot.RaftStaging:
			suffrage = raft.Staging
		}
		cfg.Servers = append(cfg.Servers, raft.Server{ID: id, Address: srv.Server.Address, Suffrage: suffrage})
	}
	slices.SortFunc(cfg.Servers, func(a, b raft.Server) int { return cmp.Compare(a.ID, b.ID) })
	now := time.Now()
	s.members.mu.Lock()
	due := planReconcile(raft.ServerID(s.cfg.ID), s.members.members(), cfg, s.members.deadAt, now, s.cfg.ReapTimeout).remove
	s.members.mu.Unlock()
	keepID := func(ids []raft.ServerID) []raft.ServerID {
		var out []raft.ServerID
		for _, id := range ids {
			if slices.Contains(due, id) {
				out = append(out, id)
			}
		}
		return out
	}
	keep := func(srvs []*autopilot.Server) []*autopilot.Server {
		var out []*autopilot.Server
		for _, srv := range srvs {
			if slices.Contains(due, srv.ID) {
				out = append(out, srv)
			}
		}
		return out
	}
	return &autopilot.FailedServers{
		StaleNonVoters:  keepID(failed.StaleNonVoters),
		StaleVoters:     keepID(failed.StaleVoters),
		FailedNonVoters: keep(failed.FailedNonVoters),
		FailedVoters:    keep(failed.FailedVoters),
	}
}

// autopilotProto is st as the Status RPC carries it, with the reason each
// unhealthy server is so.
func autopilotProto(st *autopilot.State, c *autopilot.Config, reap time.Duration, now time.Time) *api.AutopilotState {
	out := &api.AutopilotState{
		Healthy:                st.Healthy,
		FailureTolerance:       int32(st.FailureTolerance),
		UpdatedUnixNanos:       now.UnixNano(),
		StabilizationTimeNanos: c.ServerStabilizationTime.Nanoseconds(),
		MaxLastContactNanos:    c.LastContactThreshold.Nanoseconds(),
		MaxTrailingLogs:        c.MaxTrailingLogs,
		ReapTimeoutNanos:       reap.Nanoseconds(),
	}
	var leaderTerm, leaderIndex uint64
	if l, ok := st.Servers[st.Leader]; ok {
		leaderTerm, leaderIndex = l.Stats.LastTerm, l.Stats.LastIndex
	}
	ids := make([]raft.ServerID, 0, len(st.Servers))
	for id := range st.Servers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		srv := st.Servers[id]
		as := &api.AutopilotServer{
			Id:               string(id),
			RaftState:        string(srv.State),
			NodeStatus:       string(srv.Server.NodeStatus),
			Healthy:          srv.Health.Healthy,
			LastContactNanos: srv.Stats.LastContact.Nanoseconds(),
			LastIndex:        srv.Stats.LastIndex,
			LastTerm:         srv.Stats.LastTerm,
		}
		if srv.Stats.LastContact < 0 {
			as.LastContactNanos = -1
		}
		if !srv.Health.StableSince.IsZero() {
			as.StableSinceUnixNanos = srv.Health.StableSince.UnixNano()
		}
		if !as.Healthy {
			as.Reason = unhealthyReason(srv, leaderTerm, leaderIndex, c)
		}
		out.Servers = append(out.Servers, as)
	}
	return out
}

// unhealthyReason says which of autopilot's health checks srv fails
// (autopilot.ServerState.isHealthy, in its order), judged against the
// leader's term and last index.
func unhealthyReason(srv *autopilot.ServerState, leaderTerm, leaderIndex uint64, c *autopilot.Config) string {
	st := srv.Stats
	switch {
	case leaderTerm == 0 || leaderIndex == 0:
		return "no leader figures yet"
	case srv.Server.NodeStatus != autopilot.NodeAlive:
		return fmt.Sprintf("%s in gossip", srv.Server.NodeStatus)
	case st.LastContact < 0:
		return "never answered the leader"
	case st.LastContact > c.LastContactThreshold:
		return fmt.Sprintf("last answered the leader %v ago, over %v", st.LastContact.Round(time.Millisecond), c.LastContactThreshold)
	case st.LastTerm != leaderTerm:
		return fmt.Sprintf("term %d, the leader's %d", st.LastTerm, leaderTerm)
	case st.LastIndex+c.MaxTrailingLogs < leaderIndex:
		return fmt.Sprintf("%d entries behind the leader, over %d", leaderIndex-st.LastIndex, c.MaxTrailingLogs)
	}
	return "unhealthy when last judged"
}

package coordinator

import (
	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
)

// Feature switches change how the FSM applies entries (fsm.FeatureAcks:
// acknowledged versions), so a server that cannot apply one must never
// see it on, or it would silently apply the same log differently. Every
// server gossips the switches it supports (serverMeta.Features); the
// leader turns a switch on, with a CmdSetFeatures entry, only once every
// voter in the Raft configuration is alive in gossip and advertises it.
// Switches are never turned off, and snapshots keep them (under a snapshot
// magic older servers refuse). A server that predates a switch and joins
// later stops loudly: it panics on the CmdSetFeatures entry or refuses the
// snapshot.

// supportedFeatures is what this server advertises and can apply.
func (s *Server) supportedFeatures() uint64 {
	if s.cfg.AdvertiseFeatures != nil {
		return *s.cfg.AdvertiseFeatures & fsm.KnownFeatures
	}
	return fsm.KnownFeatures
}

// enableFeatures proposes the switches every voter supports and that are
// still off (leader only).
//
// withInitial: the entry that turns leased windows on also applies the
// initial window policies deferred until then (windows.go); false only
// before the leader's initial apply, which then includes them itself.
func (s *Server) enableFeatures(withInitial bool) {
	missing := fsm.KnownFeatures &^ s.fsm.Features()
	if missing == 0 || !s.IsLeader() {
		return
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	all := s.supportedFeatures() & votersSupport(raft.ServerID(s.cfg.ID), f.Configuration(), s.members.members())
	want := missing & all
	if want == 0 {
		s.log.Debug("feature switches wait for every voter to support them", "off", missing, "voters_support", all)
		return
	}
	cmd := &api.SetFeaturesCommand{Features: want, WallUnixNanos: s.wallNow()} // window time starts at this wall clock (Config.WallClock)
	if withInitial {
		cmd.InitialWindowPolicies = s.deferredPolicies(want)
	}
	if res, _, err := s.propose(fsm.CmdSetFeatures, cmd); err != nil {
		if res == nil {
			s.log.Warn("turning on feature switches", "features", want, "err", err)
			return
		}
		// The switch is on; the deferred policies were refused.
		s.log.Error("feature switches on, but the deferred initial policies were refused", "features", want, "err", err)
		return
	} else if cmd.InitialWindowPolicies != nil {
		s.log.Info("deferred initial policies applied with their feature switch", "policies", len(cmd.InitialWindowPolicies.GetPolicies()))
	}
	s.log.Info("feature switches on: every voter supports them", "features", want)
}

// votersSupport returns the feature bits every voter other than self
// advertises in gossip: none if a voter is not alive in gossip or its
// metadata does not decode (it may be a server that predates them).
func votersSupport(self raft.ServerID, cfg raft.Configuration, members []memberInfo) uint64 {
	alive := map[raft.ServerID]serverMeta{}
	for _, mi := range members {
		if mi.ok && mi.Status == "alive" {
			alive[raft.ServerID(mi.Meta.ID)] = mi.Meta
		}
	}
	all := ^uint64(0)
	for _, srv := range cfg.Servers {
		if srv.Suffrage != raft.Voter || srv.ID == self {
			continue
		}
		meta, ok := alive[srv.ID]
		if !ok {
			return 0
		}
		all &= meta.Features
	}
	return all
}

package coordinator

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/fsm"
)

// Feature switches change how the FSM applies entries, so a server that
// cannot apply one must never see it on, or it would silently apply the
// same log differently (docs/design.md §3.6).
//
// The switches of the v0.1.0 baseline (fsm.BaselineFeatures) are turned on
// unconditionally, by the first entry of a new cluster (ensureBaseline):
// every server of 0.1.0 or later supports them, and one that predates a bit
// stops loudly (it panics on the CmdSetFeatures entry or refuses the
// snapshot). A switch added after 0.1.0 is turned on only once every server
// in the Raft configuration, voter or non-voter (both apply the log; a new
// server is a non-voter until autopilot promotes it), is alive in gossip
// and advertises it (serverMeta.Features, enableFeatures). Switches are never turned off,
// and snapshots keep them.

// ensureBaseline proposes the baseline switches if they are not on yet
// (leader only, once its term is established, before anything else: until
// they are on, proposeAsync refuses every other command). It retries until
// they are on, or leadership or the server stops (false).
func (s *Server) ensureBaseline(stop chan struct{}) bool {
	for !s.fsm.BaselineOn() {
		cmd := &api.SetFeaturesCommand{Features: fsm.BaselineFeatures, WallUnixNanos: s.wallNow()} // window time starts at this wall clock (Config.WallClock)
		if _, _, err := s.propose(fsm.CmdSetFeatures, cmd); err == nil {
			s.log.Info("feature switches of the v0.1.0 baseline on", "features", fsm.BaselineFeatures)
			break
		} else {
			s.log.Warn("turning on the baseline feature switches", "err", err)
		}
		select {
		case <-stop:
			return false
		case <-s.shutdownCh:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

// supportedFeatures is what this server advertises and can apply.
func (s *Server) supportedFeatures() uint64 {
	if s.cfg.AdvertiseFeatures != nil {
		return *s.cfg.AdvertiseFeatures & fsm.KnownFeatures
	}
	return fsm.KnownFeatures
}

// enableFeatures proposes the switches added after the baseline that
// every server of the configuration supports and that are still off
// (leader only).
func (s *Server) enableFeatures() {
	missing := fsm.KnownFeatures &^ s.fsm.Features()
	if missing == 0 || !s.IsLeader() {
		return
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	all := s.supportedFeatures() & serversSupport(raft.ServerID(s.cfg.ID), f.Configuration(), s.members.members())
	want := missing & all
	if want == 0 {
		s.log.Debug("feature switches wait for every server to support them", "off", missing, "servers_support", all)
		return
	}
	cmd := &api.SetFeaturesCommand{Features: want, WallUnixNanos: s.wallNow()}
	if _, _, err := s.propose(fsm.CmdSetFeatures, cmd); err != nil {
		s.log.Warn("turning on feature switches", "features", want, "err", err)
		return
	}
	s.log.Info("feature switches on: every server supports them", "features", want)
}

// serversSupport returns the feature bits every server of the
// configuration other than self, voter or not, advertises in gossip: none
// if one is not alive in gossip or its metadata does not decode (it may be
// a server that predates them).
func serversSupport(self raft.ServerID, cfg raft.Configuration, members []memberInfo) uint64 {
	alive := map[raft.ServerID]serverMeta{}
	for _, mi := range members {
		if mi.ok && mi.Status == statusAlive {
			alive[raft.ServerID(mi.Meta.ID)] = mi.Meta
		}
	}
	all := ^uint64(0)
	for _, srv := range cfg.Servers {
		if srv.ID == self {
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

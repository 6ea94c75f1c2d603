package coordinator

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	autopilot "github.com/hashicorp/raft-autopilot"
)

// promotions takes a non-voter only once it has been healthy for the whole
// stabilization time, however long autopilot has run.
func TestPromotionsWaitForStabilization(t *testing.T) {
	now := time.Unix(1000, 0)
	const stabilize = 10 * time.Second
	srv := func(state autopilot.RaftState, healthy bool, since time.Duration) *autopilot.ServerState {
		return &autopilot.ServerState{State: state, Health: autopilot.ServerHealth{Healthy: healthy, StableSince: now.Add(-since)}}
	}
	st := &autopilot.State{Servers: map[raft.ServerID]*autopilot.ServerState{
		"leader":   srv(autopilot.RaftLeader, true, time.Hour),
		"voter":    srv(autopilot.RaftVoter, true, time.Hour),
		"stable":   srv(autopilot.RaftNonVoter, true, stabilize),
		"longer":   srv(autopilot.RaftNonVoter, true, time.Hour),
		"new":      srv(autopilot.RaftNonVoter, true, stabilize-time.Millisecond),
		"sick":     srv(autopilot.RaftNonVoter, false, time.Hour),
		"just-now": srv(autopilot.RaftNonVoter, true, 0),
	}}
	if got, want := promotions(st, stabilize, now), []raft.ServerID{"longer", "stable"}; !slices.Equal(got, want) {
		t.Errorf("promotions %v, want %v", got, want)
	}
}

// unhealthyReason names the first of autopilot's checks a server fails.
func TestUnhealthyReason(t *testing.T) {
	c := &autopilot.Config{LastContactThreshold: 500 * time.Millisecond, MaxTrailingLogs: 100}
	ok := autopilot.ServerStats{LastContact: 10 * time.Millisecond, LastTerm: 7, LastIndex: 1000}
	for _, tc := range []struct {
		status autopilot.NodeStatus
		stats  autopilot.ServerStats
		want   string
	}{
		{autopilot.NodeFailed, ok, "failed in gossip"},
		{autopilot.NodeLeft, ok, "left in gossip"},
		{autopilot.NodeAlive, autopilot.ServerStats{LastContact: -1}, "never answered the leader"},
		{autopilot.NodeAlive, autopilot.ServerStats{LastContact: 2 * time.Second, LastTerm: 7, LastIndex: 1000}, "last answered the leader 2s ago, over 500ms"},
		{autopilot.NodeAlive, autopilot.ServerStats{LastContact: time.Millisecond, LastTerm: 6, LastIndex: 1000}, "term 6, the leader's 7"},
		{autopilot.NodeAlive, autopilot.ServerStats{LastContact: time.Millisecond, LastTerm: 7, LastIndex: 800}, "200 entries behind the leader, over 100"},
	} {
		srv := &autopilot.ServerState{Server: autopilot.Server{NodeStatus: tc.status}, Stats: tc.stats}
		if got := unhealthyReason(srv, 7, 1000, c); got != tc.want {
			t.Errorf("%s %+v: %q, want %q", tc.status, tc.stats, got, tc.want)
		}
	}
	srv := &autopilot.ServerState{Server: autopilot.Server{NodeStatus: autopilot.NodeAlive}, Stats: ok}
	if got := unhealthyReason(srv, 0, 0, c); !strings.Contains(got, "no leader") {
		t.Errorf("without leader figures: %q", got)
	}
}

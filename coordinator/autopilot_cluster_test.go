package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// leaderAutopilot is the autopilot state in the leader's Status answer,
// and the leader's index.
func leaderAutopilot(t *testing.T, c *testcluster.Cluster) (*api.AutopilotState, int, error) {
	t.Helper()
	l := c.Leader()
	if l == nil {
		return nil, -1, fmt.Errorf("no leader")
	}
	i := c.Index(l)
	st := retry(t, "status", func(ctx context.Context) (*api.StatusResponse, error) {
		return c.Admin(i).Status(ctx, &api.StatusRequest{})
	})
	if st.GetAnsweredBy() != l.ID() || st.GetAutopilot() == nil {
		return nil, i, fmt.Errorf("leader %s answered %q with autopilot %v", l.ID(), st.GetAnsweredBy(), st.GetAutopilot())
	}
	return st.GetAutopilot(), i, nil
}

// waitAutopilot waits until the leader reports failure tolerance
// tolerance and exactly the servers of health (ID -> healthy), all of
// them voters; it returns the state.
func waitAutopilot(t *testing.T, c *testcluster.Cluster, tolerance int32, health map[string]bool) *api.AutopilotState {
	t.Helper()
	var ap *api.AutopilotState
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		var err error
		if ap, _, err = leaderAutopilot(t, c); err != nil {
			return err
		}
		if ap.GetFailureTolerance() != tolerance || len(ap.GetServers()) != len(health) {
			return fmt.Errorf("failure tolerance %d with servers %v, want %d with %v", ap.GetFailureTolerance(), ap.GetServers(), tolerance, health)
		}
		for _, s := range ap.GetServers() {
			want, ok := health[s.GetId()]
			if !ok || s.GetHealthy() != want || s.GetHealthy() != (s.GetReason() == "") {
				return fmt.Errorf("server %v, want healthy %v (listed %v) and a reason only when not", s, want, ok)
			}
			if s.GetRaftState() != "leader" && s.GetRaftState() != "voter" {
				return fmt.Errorf("server %v, want a voter", s)
			}
		}
		return nil
	})
	return ap
}

// suffrage is server id's suffrage in s's Raft configuration.
func suffrage(s *coordinator.Server, id string) (raft.ServerSuffrage, bool) {
	f := s.Raft().GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			return srv.Suffrage, true
		}
	}
	return 0, false
}

// TestAutopilotPromotesAfterStabilization: the three servers of a
// bootstrap vote from the start; a fourth joins as a non-voter and the
// leader's autopilot promotes it only after it has been healthy for the
// stabilization time. Promoting it earlier (adding it as a voter, or
// autopilot's StablePromoter waiving the time for a leader whose
// autopilot has run less than that) fails the test: the server is seen a
// voter less than the stabilization time after it started.
func TestAutopilotPromotesAfterStabilization(t *testing.T) {
	const stabilize = 1500 * time.Millisecond
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), reapAfter(time.Hour),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.ServerStabilizationTime = stabilize }))
	c.WaitForStableLeader(t)
	c.WaitForVoters(t, "s0", "s1", "s2")
	waitAutopilot(t, c, 1, map[string]bool{"s0": true, "s1": true, "s2": true})

	start := time.Now()
	added := c.AddServer(t)
	id := c.ID(added)
	var nonvoter, voter time.Time
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		l := c.Leader()
		if l == nil {
			return fmt.Errorf("no leader")
		}
		switch s, ok := suffrage(l, id); {
		case !ok:
			return fmt.Errorf("%s not in the configuration yet", id)
		case s == raft.Nonvoter:
			if nonvoter.IsZero() {
				nonvoter = time.Now()
			}
			return fmt.Errorf("%s still a non-voter", id)
		case s == raft.Voter:
			voter = time.Now()
			return nil
		default:
			return fmt.Errorf("%s is %v", id, s)
		}
	})
	if nonvoter.IsZero() {
		t.Fatalf("%s was never seen as a non-voter: it voted at once", id)
	}
	if got := voter.Sub(start); got < stabilize {
		t.Fatalf("%s seen a voter %v after it started, before the stabilization time %v", id, got, stabilize)
	}
	// Four healthy voters, quorum 3: one may fail.
	ap := waitAutopilot(t, c, 1, map[string]bool{"s0": true, "s1": true, "s2": true, id: true})
	if time.Duration(ap.GetStabilizationTimeNanos()) != stabilize {
		t.Errorf("reported stabilization time %v, want %v", time.Duration(ap.GetStabilizationTimeNanos()), stabilize)
	}
	for _, s := range ap.GetServers() {
		if s.GetLastIndex() == 0 || s.GetLastTerm() == 0 {
			t.Errorf("server %v", s)
		}
	}
}

// TestAutopilotReapsDeadServer: three healthy voters tolerate one
// failure; a killed one is unhealthy (with a reason) and the tolerance
// drops to 0; the leader removes it once it has been dead for the reap
// timeout, not before. A follower reports no autopilot state.
func TestAutopilotReapsDeadServer(t *testing.T) {
	const reap = 2 * time.Second
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), reapAfter(reap))
	leader := c.WaitForStableLeader(t)
	waitAutopilot(t, c, 1, map[string]bool{"s0": true, "s1": true, "s2": true})
	f := (c.Index(leader) + 1) % 3
	st := retry(t, "status", func(ctx context.Context) (*api.StatusResponse, error) {
		return c.Admin(f).Status(ctx, &api.StatusRequest{})
	})
	if st.GetAutopilot() != nil {
		t.Errorf("follower %s reports autopilot state %v", c.ID(f), st.GetAutopilot())
	}

	victim := c.ID(f)
	killed := time.Now()
	c.Kill(f)
	health := map[string]bool{"s0": true, "s1": true, "s2": true}
	health[victim] = false
	waitAutopilot(t, c, 0, health)

	var rest []string
	for i := range 3 {
		if i != f {
			rest = append(rest, c.ID(i))
		}
	}
	c.WaitForVoters(t, rest...)
	if got := time.Since(killed); got < reap {
		t.Fatalf("%s removed %v after it was killed, before the reap timeout %v", victim, got, reap)
	}
	// Two healthy voters, quorum 2: none may fail.
	delete(health, victim)
	waitAutopilot(t, c, 0, health)
}

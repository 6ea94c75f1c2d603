package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Test 1: three servers elect exactly one leader, and every server's
// status names it.
func TestElectsOneLeader(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	leader := c.WaitForStableLeader(t)
	leaders := 0
	for i := range 3 {
		st := retry(t, "status", func(ctx context.Context) (*api.StatusResponse, error) {
			return c.Admin(i).Status(ctx, &api.StatusRequest{})
		})
		if st.GetAnsweredBy() != c.ID(i) {
			t.Errorf("status from %s answered by %q", c.ID(i), st.GetAnsweredBy())
		}
		if st.GetLeader() != leader.ID() {
			t.Errorf("%s says the leader is %q, want %s", c.ID(i), st.GetLeader(), leader.ID())
		}
		if len(st.GetServers()) != 3 {
			t.Errorf("%s lists %d servers, want 3", c.ID(i), len(st.GetServers()))
		}
		for _, s := range st.GetServers() {
			if s.GetSuffrage() != "voter" || !s.GetHealthy() {
				t.Errorf("%s lists %v, want a healthy voter", c.ID(i), s)
			}
			if s.GetId() == c.ID(i) && s.GetState() == "leader" {
				leaders++
			}
		}
		if st.GetPolicies() != 2 {
			t.Errorf("%s has %d policies, want 2", c.ID(i), st.GetPolicies())
		}
	}
	if leaders != 1 {
		t.Errorf("%d servers say they lead, want 1", leaders)
	}
}

// Test 10: a leader shut down gracefully hands leadership over first, and
// leaves the configuration.
func TestGracefulShutdownTransfersLeadership(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), reapAfter(time.Hour),
		// Raft gives a transfer one election timeout to complete; 200ms
		// is tight for a loaded machine. Elections still start after
		// the 200ms heartbeat timeout.
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.ElectionTimeout = 2 * time.Second }))
	old := c.WaitForStableLeader(t)
	oi := c.Index(old)
	term := old.Raft().CurrentTerm()
	transferred := c.Watch("transferred leadership before shutdown")

	c.Shutdown(oi)
	if transferred.Count(old.ID()) != 1 {
		t.Errorf("%s did not transfer leadership before shutting down", old.ID())
	}
	leader := c.WaitForLeader(t)
	if leader.ID() == old.ID() {
		t.Fatalf("%s still leads after shutting down", old.ID())
	}
	if got := leader.Raft().CurrentTerm(); got <= term {
		t.Errorf("new leader's term %d, want after %d", got, term)
	}
	// Without LeaveOnShutdown the stopped server stays a voter (a restart
	// or upgrade is not a removal).
	if got, _ := testcluster.Voters(leader); len(got) != 3 {
		t.Errorf("voters %v after a graceful shutdown, want all three", got)
	}
	// The leader's status names it. On a loaded machine the new leader
	// can lose its lease and be elected again (or another one) between
	// two reads, and a status taken in between names no leader: compare
	// with the leader of the moment until they agree.
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		leader := c.Leader()
		if leader == nil {
			return errors.New("no single leader")
		}
		st := retry(t, "status", func(ctx context.Context) (*api.StatusResponse, error) {
			return c.Admin(c.Index(leader)).Status(ctx, &api.StatusRequest{})
		})
		if st.GetLeader() != leader.ID() {
			return fmt.Errorf("status from %s names leader %q", leader.ID(), st.GetLeader())
		}
		return nil
	})
}

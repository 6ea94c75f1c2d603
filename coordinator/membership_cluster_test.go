package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func reapAfter(d time.Duration) testcluster.Option {
	return testcluster.WithConfig(func(_ int, c *coordinator.Config) { c.ReapTimeout = d })
}

// memberStatus is server id's gossip status as server i sees it ("" if
// not listed).
func memberStatus(t *testing.T, c *testcluster.Cluster, i int, id string) string {
	t.Helper()
	resp := retry(t, "members", func(ctx context.Context) (*api.MembersResponse, error) {
		return c.Admin(i).Members(ctx, &api.MembersRequest{})
	})
	for _, m := range resp.GetMembers() {
		if m.GetMeta()["id"] == id {
			return m.GetStatus()
		}
	}
	return ""
}

func waitMemberStatus(t *testing.T, c *testcluster.Cluster, i int, id, want string) {
	t.Helper()
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		if got := memberStatus(t, c, i, id); got != want {
			return fmt.Errorf("%s sees %s as %q, want %q", c.ID(i), id, got, want)
		}
		return nil
	})
}

// Test 5: a fourth server joins through gossip and the leader makes it a
// voter; an operator then removes it (after it died) with RemoveServer.
func TestAddServerThenRemoveServer(t *testing.T) {
	// Reaping would remove the dead server on its own; keep it out of the way.
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), reapAfter(time.Hour))
	leader := c.WaitForStableLeader(t)
	acquireSome(t, c, c.Index(leader), 2)
	c.WaitForVoters(t, "s0", "s1", "s2")

	added := c.AddServer(t)
	c.WaitForVoters(t, "s0", "s1", "s2", "s3")
	c.WaitForConsistentState(t) // the newcomer has the whole state
	st := retry(t, "status", func(ctx context.Context) (*api.StatusResponse, error) {
		return c.Admin(added).Status(ctx, &api.StatusRequest{})
	})
	if len(st.GetServers()) != 4 || st.GetLeader() == "" {
		t.Fatalf("status from the new server: leader %q, %d servers, want 4", st.GetLeader(), len(st.GetServers()))
	}

	// A live server cannot be removed: the next reconcile would add it back.
	_, err := c.Admin(0).RemoveServer(rpcCtx(t), &api.RemoveServerRequest{Id: "s3"})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("remove a live server: %v, want FailedPrecondition", err)
	}
	c.Kill(added)
	// RemoveServer is decided by the leader, on its own gossip view: wait
	// until every live server (whichever leads) sees s3 dead.
	for i := range 3 {
		waitMemberStatus(t, c, i, "s3", "dead")
	}
	_, err = c.Admin(0).RemoveServer(rpcCtx(t), &api.RemoveServerRequest{Id: "nope"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("remove an unknown server: %v, want NotFound", err)
	}
	// A removal can commit and its answer still fail (the leader stepped
	// down before answering, on a loaded machine): a retry then finds s3
	// gone, NotFound, which is the outcome asked for.
	tries := 0
	retry(t, "remove server", func(ctx context.Context) (*api.RemoveServerResponse, error) {
		tries++
		r, err := c.Admin(0).RemoveServer(ctx, &api.RemoveServerRequest{Id: "s3"})
		if tries > 1 && status.Code(err) == codes.NotFound {
			return &api.RemoveServerResponse{}, nil
		}
		return r, err
	})
	c.WaitForVoters(t, "s0", "s1", "s2")
	c.WaitForStableLeader(t)
}

// Test 5, reap path: with one of four servers dead longer than
// ReapTimeout, the leader removes it on its own.
func TestReapDeadServer(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), reapAfter(500*time.Millisecond))
	c.WaitForStableLeader(t)
	added := c.AddServer(t)
	leader := c.WaitForVoters(t, "s0", "s1", "s2", "s3")
	victim := added
	if c.Server(victim) == leader {
		victim = (c.Index(leader) + 1) % 4
	}
	victimID := c.ID(victim)
	c.Kill(victim)
	var rest []string
	for i := range 4 {
		if i != victim {
			rest = append(rest, c.ID(i))
		}
	}
	leader = c.WaitForVoters(t, rest...)
	if got := memberStatus(t, c, c.Index(leader), victimID); got != "dead" {
		t.Errorf("reaped server %s has gossip status %q, want dead", victimID, got)
	}
}

// Kill is a crash: peers see the server die (and keep it as a voter until
// the reap timeout), where a graceful Shutdown leaves gossip and is
// removed from Raft at once.
func TestCrashIsDeadGracefulShutdownIsLeft(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies), reapAfter(time.Hour),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.LeaveOnShutdown = true }))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	crashed, stopped := (li+1)%3, (li+2)%3

	c.Kill(crashed)
	waitMemberStatus(t, c, li, c.ID(crashed), "dead")
	if got, _ := testcluster.Voters(leader); len(got) != 3 {
		t.Fatalf("voters %v after a crash, want all three until the reap timeout", got)
	}

	// Bring it back, then stop the other follower gracefully.
	c.Restart(crashed)
	waitMemberStatus(t, c, li, c.ID(crashed), "alive")
	c.Shutdown(stopped)
	waitMemberStatus(t, c, li, c.ID(stopped), "left")
	var rest []string
	for i := range 3 {
		if i != stopped {
			rest = append(rest, c.ID(i))
		}
	}
	c.WaitForVoters(t, rest...)
}

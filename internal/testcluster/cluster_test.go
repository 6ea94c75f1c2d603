package testcluster_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const policies = `policies:
  - name: p
    algorithm: token-bucket
    rate: 10
    burst: 10
    lease: {duration: 30s}
`

// acquire sends one acquire through server i, retried while it is
// Unavailable (the same seq: a retry gets the recorded answer), as the
// client library does.
func acquire(t *testing.T, c *testcluster.Cluster, i int, seq uint64) *api.LeaseResponse {
	t.Helper()
	resp := testcluster.Retry(t, "acquire through "+c.ID(i), func(ctx context.Context) (*api.LeaseResponse, error) {
		resp, err := c.Client(i).Acquire(ctx, &api.AcquireRequest{
			Caller: &api.Caller{ClientId: "tc", Incarnation: 1, Seq: seq},
			Keys:   []*api.AcquireKey{{Key: &api.Key{Policy: "p"}, Demand: &api.Demand{RateMilliPerSec: 1000, BurstMilli: 1000}}},
		})
		switch {
		case err != nil:
			return nil, err
		case len(resp.GetLeases()) != 1:
			return nil, fmt.Errorf("%d answers to one key", len(resp.GetLeases()))
		}
		if e := resp.GetLeases()[0].GetError(); codes.Code(e.GetCode()) == codes.Unavailable {
			return nil, status.Error(codes.Unavailable, e.GetMessage())
		}
		return resp, nil
	})
	if e := resp.GetLeases()[0].GetError(); e != nil {
		t.Fatalf("acquire through %s: %v", c.ID(i), e)
	}
	return resp
}

func TestSingleServerRestart(t *testing.T) {
	var mutated []int
	c := testcluster.New(t, 1, testcluster.WithPolicies(policies),
		testcluster.WithConfig(func(i int, cfg *coordinator.Config) { mutated = append(mutated, i) }))
	if len(mutated) != 1 || mutated[0] != 0 {
		t.Fatalf("config mutator ran for %v, want [0]", mutated)
	}
	leader := c.WaitForLeader(t)
	addr := c.Config(0).GRPCAddr
	first := acquire(t, c, 0, 1)
	before, err := testcluster.StateBytes(leader)
	if err != nil {
		t.Fatal(err)
	}

	c.Kill(0)
	if c.Server(0) != nil || c.Leader() != nil || len(c.Servers()) != 0 {
		t.Fatal("a killed server is still listed")
	}
	c.Restart(0)
	if got := c.Config(0).GRPCAddr; got != addr {
		t.Fatalf("restarted on %s, want the same address %s", got, addr)
	}
	leader = c.WaitForStableLeader(t)
	c.WaitForApplied(t, leader.Raft().LastIndex())
	after := c.WaitForConsistentState(t)
	if string(after) != string(before) {
		t.Errorf("state after restart differs (%d bytes, was %d)", len(after), len(before))
	}
	// The same retry gets the recorded answer from the restarted server.
	if again := acquire(t, c, 0, 1); again.String() != first.String() {
		t.Errorf("retry after restart:\n got %v\nwant %v", again, first)
	}
}

func TestThreeServersKillRestartAdd(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(policies))
	leader := c.WaitForStableLeader(t)
	if len(c.Followers()) != 2 || c.Index(leader) < 0 {
		t.Fatalf("followers %d, leader index %d", len(c.Followers()), c.Index(leader))
	}
	acquire(t, c, 0, 1)
	// Server 0 was the seed and joined nobody; it must find the others
	// again after a crash.
	c.Kill(0)
	c.WaitForLeader(t)
	c.Restart(0)
	acquire(t, c, 0, 2)
	c.WaitForConsistentState(t)

	i := c.AddServer(t)
	if i != 3 || c.Len() != 4 {
		t.Fatalf("AddServer returned %d, Len %d", i, c.Len())
	}
	c.WaitForVoters(t, "s0", "s1", "s2", "s3")
	acquire(t, c, i, 3)
	c.WaitForConsistentState(t)
	if w := c.Watch("no such message"); w.Count("s0") != 0 {
		t.Fatal("watch counted a message nobody logged")
	}
}

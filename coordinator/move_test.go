package coordinator_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/protobuf/proto"
)

// raftAddrs is the Raft configuration's address of every server, by ID,
// as server s holds it.
func raftAddrs(s interface{ Raft() *raft.Raft }) (map[string]string, error) {
	f := s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, srv := range f.Configuration().Servers {
		out[string(srv.ID)] = string(srv.Address)
	}
	return out, nil
}

// All three servers stop and start again at once on new addresses, with
// the same IDs and data directories (a StatefulSet rescheduled at once):
// every address in their Raft configuration is stale. They must find each
// other through gossip, elect a leader, keep the policies and every lease
// with its budget, and the leader brings the stored addresses up to date
// (docs/operations.md, "Moving servers").
func TestAllServersMoveToNewAddresses(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies),
		testcluster.WithHosts("127.0.1.1", "127.0.1.2", "127.0.1.3"))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	acks := acquireSome(t, c, li, 3)
	before := listLeases(t, c, li)
	if len(before) != len(acks) {
		t.Fatalf("%d leases before the move, want %d", len(before), len(acks))
	}

	for _, i := range []int{(li + 1) % 3, (li + 2) % 3, li} {
		c.Kill(i)
	}
	c.MoveAll(t, "127.0.2.1", "127.0.2.2", "127.0.2.3")
	// WaitForStableLeader also waits for the policies.
	leader = c.WaitForStableLeader(t)
	after := listLeases(t, c, c.Index(leader))
	if len(after) != len(before) {
		t.Errorf("%d leases after the move, want %d", len(after), len(before))
	}
	for h, want := range before {
		if got := after[h]; !proto.Equal(got, want) {
			t.Errorf("lease %s after the move:\n got %v\nwant %v", h, got, want)
		}
	}

	// The leader rewrites each server's stored address, its own too, and
	// every server ends up holding the new ones.
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			addrs, err := raftAddrs(s)
			if err != nil {
				return err
			}
			for i := range 3 {
				if got, want := addrs[c.ID(i)], c.Config(i).RaftAddr; got != want {
					return fmt.Errorf("%s holds %s at %q, want %q", s.ID(), c.ID(i), got, want)
				}
			}
		}
		return nil
	})
	for i := range 3 {
		if addr := c.Config(i).RaftAddr; !strings.HasPrefix(addr, "127.0.2.") {
			t.Fatalf("%s moved to %s", c.ID(i), addr)
		}
	}
	c.WaitForConsistentState(t)
	// And the leases still renew.
	renewAll(t, c, c.Index(c.WaitForLeader(t)), acks)
}

// One server comes back on a new address while the others run: the leader
// rewrites its address, and it catches up and serves.
func TestOneServerMovesWhileOthersRun(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies),
		testcluster.WithHosts("127.0.1.1", "127.0.1.2", "127.0.1.3"))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	mover := (li + 1) % 3
	acks := acquireSome(t, c, li, 2)

	c.Kill(mover)
	c.MoveTo(t, mover, "127.0.2.1")
	want := c.Config(mover).RaftAddr
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		for _, s := range c.Servers() {
			addrs, err := raftAddrs(s)
			if err != nil {
				return err
			}
			if got := addrs[c.ID(mover)]; got != want {
				return fmt.Errorf("%s holds %s at %q, want %q", s.ID(), c.ID(mover), got, want)
			}
		}
		return nil
	})
	c.WaitForVoters(t, c.ID(0), c.ID(1), c.ID(2))
	c.WaitForConsistentState(t)
	checkAcked(t, listLeases(t, c, mover), acks)
}

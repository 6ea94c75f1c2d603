package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Test 3: a follower that was down while the leader snapshotted and
// compacted its log catches up by installing the leader's snapshot, and
// ends with the same FSM state.
func TestLaggingFollowerInstallsSnapshot(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	cfg := coordinator.TestConfig()
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	acquireSome(t, c, li, 3)
	c.WaitForConsistentState(t)

	fi := (li + 1) % 3
	follower := c.Server(fi)
	followerLast := follower.Raft().LastIndex()
	c.Kill(fi)
	installed := c.Watch("Installed remote snapshot")

	// Push more than SnapshotThreshold+TrailingLogs entries, and on until
	// the leader has a snapshot far enough past the follower's log that it
	// has compacted what the follower needs (compaction keeps TrailingLogs
	// entries behind the snapshot), so the follower cannot catch up from
	// the log.
	need := followerLast + cfg.TrailingLogs + 2
	seq := map[string]uint64{}
	n := 0
	// Leadership can move between the other two on a loaded machine, and
	// the follower is sent the snapshot of whichever leads when it comes
	// back: wait until both have one far enough, and compare with the
	// smaller of the two.
	othersSnap := func() uint64 {
		least := uint64(math.MaxUint64)
		for _, s := range c.Servers() { // the live ones: not the follower
			least = min(least, testcluster.RaftStat(s, "last_snapshot_index"))
		}
		return least
	}
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		if got := othersSnap(); got >= need && uint64(n) > cfg.SnapshotThreshold+cfg.TrailingLogs {
			return nil
		}
		// One entry per call; every tenth a new client, so the state grows.
		id := fmt.Sprintf("pusher-%d", n/10)
		seq[id]++
		n++
		resp := retry(t, "acquire", func(ctx context.Context) (*api.LeaseResponse, error) {
			return c.Client(li).Acquire(ctx, acquireReq(caller(id, 1, seq[id]), key("api", fmt.Sprintf("tenant-%d", n%7))))
		})
		if e := resp.GetLeases()[0].GetError(); e != nil {
			t.Fatalf("acquire: %v", e)
		}
		return fmt.Errorf("the others' snapshots at %d or later, want %d (%d entries pushed)", othersSnap(), need, n)
	})
	leaderSnap := othersSnap()

	c.Restart(fi)
	state := c.WaitForConsistentState(t)
	follower = c.Server(fi)
	if got := testcluster.RaftStat(follower, "last_snapshot_index"); got < leaderSnap {
		t.Errorf("follower's last snapshot is at %d, before %d (the older of the others' latest): it did not install the leader's", got, leaderSnap)
	}
	if installed.Count(follower.ID()) == 0 {
		t.Errorf("follower %s never logged installing a remote snapshot", follower.ID())
	}
	t.Logf("follower caught up to a %d-byte state through a snapshot at %d (it was at %d)", len(state), leaderSnap, followerLast)
}

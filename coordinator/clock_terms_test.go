package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"github.com/ration-dev/ration/lease"
)

// idlePolicy: one key, short leases, so an idle spell longer than D takes
// a few seconds.
const idlePolicy = `policies:
  - name: idle
    algorithm: token-bucket
    rate: 10
    burst: 10
    lease: {duration: 1s}
`

// idleSpell is how far the idle leader's clock must read past the
// committed cluster time before it hands leadership over: D, plus room for
// the transfer and the grant on the other server (a spell shorter than
// that would not have reproduced the bug).
const idleSpell = 3 * time.Second

// transferTo moves leadership to server `to` (asked through server via)
// and waits until `to` leads.
func transferTo(t *testing.T, c *testcluster.Cluster, via, to int) *coordinator.Server {
	t.Helper()
	// On a loaded machine leadership may move by itself (an election
	// timeout) before or during the transfer: whoever leads is asked again
	// until `to` leads, and a `to` that already leads needs nothing.
	var leader *coordinator.Server
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		if leader = c.Leader(); leader != nil && leader.ID() == c.ID(to) {
			return nil
		}
		ask := via
		if leader != nil {
			ask = c.Index(leader)
		}
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		if _, err := c.Admin(ask).LeaderTransfer(ctx, &api.LeaderTransferRequest{Id: c.ID(to)}); err != nil {
			return fmt.Errorf("leader transfer to %s via %s: %v", c.ID(to), c.ID(ask), err)
		}
		if leader = c.Leader(); leader == nil || leader.ID() != c.ID(to) {
			return fmt.Errorf("%s does not lead yet", c.ID(to))
		}
		return nil
	})
	return leader
}

// acquireIdle acquires the idle policy's key for client id through server
// i and returns the grant, the commit's cluster time and when the request
// was sent (the client's clock: the test's monotonic clock).
func acquireIdle(t *testing.T, c *testcluster.Cluster, i int, id string) (g *api.Grant, commit int64, sent time.Time) {
	t.Helper()
	req := acquireReq(caller(id, 1, 1), &api.Key{Policy: "idle"})
	sent = time.Now()
	resp := retry(t, "acquire "+id, func(ctx context.Context) (*api.LeaseResponse, error) {
		return c.Client(i).Acquire(ctx, req)
	})
	if n := len(resp.GetLeases()); n != 1 {
		t.Fatalf("acquire %s: %d answers", id, n)
	}
	if e := resp.GetLeases()[0].GetError(); e != nil {
		t.Fatalf("acquire %s: %v", id, e)
	}
	return resp.GetLeases()[0].GetGrant(), resp.GetClusterTimeNanos(), sent
}

// Each term starts from the committed cluster time (docs/design.md §3.3):
// leader A sits idle longer than a lease duration (its expire loop keeps
// reading its clock, nothing commits), hands leadership to B, B grants x,
// and leadership comes back to A. A's clock must resume from the committed
// cluster time, not from its own last reading: x's lease stays held until
// the client stops using it, and y is not granted x's share. (It used to be
// reclaimed at once and granted again.)
func TestLeaderBackAfterIdleSpellKeepsLiveLeases(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(idlePolicy))
	a := c.WaitForStableLeader(t)
	ai := c.Index(a)
	bi := (ai + 1) % 3

	// The idle spell, as a condition: A's clock (read through ListLeases,
	// as the expire loop reads it) is idleSpell past the committed cluster
	// time (Status, read after, so the gap is never overstated).
	var readA int64
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		list, err := c.Admin(ai).ListLeases(ctx, &api.ListLeasesRequest{})
		if err != nil {
			return err
		}
		st, err := c.Admin(ai).Status(ctx, &api.StatusRequest{})
		if err != nil {
			return err
		}
		readA = list.GetClusterTimeNanos()
		if gap := time.Duration(readA - st.GetClusterTimeNanos()); gap <= idleSpell {
			return fmt.Errorf("leader's clock only %v past the committed cluster time", gap)
		}
		return nil
	})

	transferTo(t, c, ai, bi)
	x, xCommit, xSent := acquireIdle(t, c, bi, "x")
	if x.GetRateMilliPerSec() == 0 || x.GetCapMilli() == 0 {
		t.Fatalf("x alone was granted %v", x)
	}
	if xExpiry := xCommit + x.GetTtlNanos(); xExpiry >= readA {
		t.Logf("x's expiry %d is not behind A's last reading %d: this run would not have shown the old bug", xExpiry, readA)
	}
	xDeadline := xSent.Add(time.Duration(lease.ClientUsableNanos(x.GetTtlNanos(), 1000)))

	transferTo(t, c, bi, ai)
	y, _, _ := acquireIdle(t, c, ai, "y")
	// While x may still admit, y gets only what x does not hold.
	if time.Now().Before(xDeadline) {
		if y.GetRateMilliPerSec()+x.GetRateMilliPerSec() > 10_000 || y.GetCapMilli()+x.GetCapMilli() > 10_000 {
			t.Fatalf("x (rate %d, cap %d) may still admit until %v from now, yet y was granted rate %d, cap %d (r = 10000, B = 10000)",
				x.GetRateMilliPerSec(), x.GetCapMilli(), time.Until(xDeadline), y.GetRateMilliPerSec(), y.GetCapMilli())
		}
	}

	// x's lease stays listed until the client stops using it.
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		asked := time.Now()
		list, err := c.Admin(ai).ListLeases(ctx, &api.ListLeasesRequest{Policy: "idle"})
		if err != nil {
			return err
		}
		if !asked.Before(xDeadline) {
			return nil
		}
		for _, l := range list.GetLeases() {
			if l.GetClientId() == "x" && l.GetLeaseId() == x.GetLeaseId() {
				return fmt.Errorf("x may admit for %v more", time.Until(xDeadline))
			}
		}
		t.Fatalf("x's lease is gone at cluster time %d (committed %d + ttl %d = %d), %v before the client stops using it",
			list.GetClusterTimeNanos(), xCommit, x.GetTtlNanos(), xCommit+x.GetTtlNanos(), xDeadline.Sub(asked))
		return nil
	})
}

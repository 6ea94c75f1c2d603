package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/protobuf/proto"
)

// leaseTerms is what must survive any failure: everything about a lease
// except the fields relative to the time of the read.
func leaseTerms(l *api.LeaseInfo) *api.LeaseInfo {
	return &api.LeaseInfo{
		Policy: l.GetPolicy(), Key: l.GetKey(), ClientId: l.GetClientId(), Incarnation: l.GetIncarnation(),
		LeaseId: l.GetLeaseId(), RateMilliPerSec: l.GetRateMilliPerSec(), CapMilli: l.GetCapMilli(),
		StartMilli: l.GetStartMilli(), ExpiresNanos: l.GetExpiresNanos(),
	}
}

// holder names one lease: lease IDs are per key, so the key is part of it.
func holder(policy, key, client string, incarnation uint64) string {
	return fmt.Sprintf("%s/%s/%s/%d", policy, key, client, incarnation)
}

// acked is one lease a client was told it holds.
type acked struct {
	caller *api.Caller
	key    *api.Key
	grant  *api.Grant
	commit int64 // cluster time of the grant's commit
}

func (a acked) holder() string {
	return holder(a.key.GetPolicy(), a.grant.GetCanonicalKey(), a.caller.GetClientId(), a.caller.GetIncarnation())
}

// acquireSome acquires, through server i, leases for n clients, each on a
// key of its own and on a shared key, and returns what was acknowledged.
func acquireSome(t *testing.T, c *testcluster.Cluster, i, n int) []acked {
	t.Helper()
	var out []acked
	for k := range n {
		cl := caller(fmt.Sprintf("client-%d", k), 1, 1)
		keys := []*api.Key{key("api", fmt.Sprintf("tenant-%d", k)), key("api", "shared")}
		resp := retry(t, "acquire", func(ctx context.Context) (*api.LeaseResponse, error) {
			return c.Client(i).Acquire(ctx, acquireReq(cl, keys...))
		})
		if len(resp.GetLeases()) != len(keys) {
			t.Fatalf("acquire %s: %d answers for %d keys", cl.GetClientId(), len(resp.GetLeases()), len(keys))
		}
		for j, kl := range resp.GetLeases() {
			if kl.GetError() != nil {
				t.Fatalf("acquire %s %v: %v", cl.GetClientId(), keys[j], kl.GetError())
			}
			out = append(out, acked{caller: cl, key: keys[j], grant: kl.GetGrant(), commit: resp.GetClusterTimeNanos()})
		}
	}
	return out
}

// listLeases returns the leases the cluster holds (asked through server
// i), by holder, without their time-relative fields.
func listLeases(t *testing.T, c *testcluster.Cluster, i int) map[string]*api.LeaseInfo {
	t.Helper()
	resp := retry(t, "list leases", func(ctx context.Context) (*api.ListLeasesResponse, error) {
		return c.Admin(i).ListLeases(ctx, &api.ListLeasesRequest{})
	})
	out := map[string]*api.LeaseInfo{}
	for _, l := range resp.GetLeases() {
		out[holder(l.GetPolicy(), l.GetKey(), l.GetClientId(), l.GetIncarnation())] = leaseTerms(l)
	}
	return out
}

// checkAcked fails unless every acknowledged lease is listed with the
// terms it was granted.
func checkAcked(t *testing.T, leases map[string]*api.LeaseInfo, acks []acked) {
	t.Helper()
	for _, a := range acks {
		l, ok := leases[a.holder()]
		if !ok {
			t.Errorf("acknowledged lease %s (id %d) is gone", a.holder(), a.grant.GetLeaseId())
			continue
		}
		want := &api.LeaseInfo{
			Policy: a.key.GetPolicy(), Key: a.grant.GetCanonicalKey(), ClientId: a.caller.GetClientId(),
			Incarnation: a.caller.GetIncarnation(), LeaseId: a.grant.GetLeaseId(),
			RateMilliPerSec: a.grant.GetRateMilliPerSec(), CapMilli: a.grant.GetCapMilli(),
			StartMilli: a.grant.GetStartMilli(), ExpiresNanos: a.commit + a.grant.GetTtlNanos(),
		}
		if !proto.Equal(l, want) {
			t.Errorf("lease %s:\n got %v\nwant %v", a.holder(), l, want)
		}
	}
}

// renewAll renews every acknowledged lease through server i with the next
// seq of its client and checks each renewal succeeded on the same lease.
func renewAll(t *testing.T, c *testcluster.Cluster, i int, acks []acked) {
	t.Helper()
	byClient := map[string][]acked{}
	var order []string
	for _, a := range acks {
		if _, ok := byClient[a.caller.GetClientId()]; !ok {
			order = append(order, a.caller.GetClientId())
		}
		byClient[a.caller.GetClientId()] = append(byClient[a.caller.GetClientId()], a)
	}
	for _, id := range order {
		as := byClient[id]
		cl := proto.Clone(as[0].caller).(*api.Caller)
		cl.Seq++
		req := &api.RenewRequest{Caller: cl}
		for _, a := range as {
			req.Keys = append(req.Keys, &api.RenewKey{Key: a.key, LeaseId: a.grant.GetLeaseId(), Demand: &api.Demand{RateMilliPerSec: 10_000, BurstMilli: 20_000}})
		}
		resp := retry(t, "renew", func(ctx context.Context) (*api.LeaseResponse, error) {
			return c.Client(i).Renew(ctx, req)
		})
		for j, kl := range resp.GetLeases() {
			if kl.GetError() != nil {
				t.Errorf("renew %s: %v", as[j].holder(), kl.GetError())
				continue
			}
			if got := kl.GetGrant().GetLeaseId(); got != as[j].grant.GetLeaseId() {
				t.Errorf("renew %s: lease id %d, want %d", as[j].holder(), got, as[j].grant.GetLeaseId())
			}
			if ttl := kl.GetGrant().GetTtlNanos(); ttl <= 0 {
				t.Errorf("renew %s: ttl %d", as[j].holder(), ttl)
			}
		}
	}
}

// Test 2: the leader dies; every acknowledged lease survives with its
// terms, and renews against the new leader.
func TestLeaderKillKeepsAcknowledgedLeases(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	old := c.WaitForStableLeader(t)
	oldIdx := c.Index(old)
	acks := acquireSome(t, c, oldIdx, 4)
	checkAcked(t, listLeases(t, c, oldIdx), acks)

	c.Kill(oldIdx)
	leader := c.WaitForLeader(t)
	if leader.ID() == old.ID() {
		t.Fatalf("killed leader %s is still leader", old.ID())
	}
	newIdx := c.Index(leader)
	checkAcked(t, listLeases(t, c, newIdx), acks)
	renewAll(t, c, newIdx, acks)
}

// Requests that reach a new leader before it has applied the old terms'
// entries and taken over the cluster clock must wait: stamped with the
// clock of a server that never led (zero: ~292 years of cluster time) they
// expired every lease in the cluster.
func TestNewLeaderDoesNotStampBeforeTakingOver(t *testing.T) {
	start := time.Now()
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	old := c.WaitForStableLeader(t)
	oldIdx := c.Index(old)
	acks := acquireSome(t, c, oldIdx, 2)

	c.Kill(oldIdx)
	// Hammer both survivors while they elect: whichever wins gets
	// requests from its first moment as leader.
	var wg sync.WaitGroup
	for j := 1; j <= 2; j++ {
		i := (oldIdx + j) % 3
		for g := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(testcluster.DefaultWait)
				for n := uint64(1); time.Now().Before(deadline); n++ {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					cl := caller(fmt.Sprintf("racer-%d-%d", i, g), 1, n)
					_, err := c.Client(i).Acquire(ctx, acquireReq(cl, key("api", "race")))
					cancel()
					if err == nil {
						return
					}
				}
			}()
		}
	}
	wg.Wait()

	leader := c.WaitForLeader(t)
	if ct, real := leader.FSM().ClusterTime(), time.Since(start); time.Duration(ct) > real {
		t.Fatalf("cluster time %v is ahead of the %v the cluster has existed", time.Duration(ct), real)
	}
	checkAcked(t, listLeases(t, c, c.Index(leader)), acks)
}

// Test 4: every server crashes; on restart from disk every acknowledged
// lease is intact and all servers agree.
func TestRestartAllFromDisk(t *testing.T) {
	c := testcluster.New(t, 3, testcluster.WithPolicies(testPolicies))
	leader := c.WaitForStableLeader(t)
	li := c.Index(leader)
	acks := acquireSome(t, c, li, 5)
	// Some variety in the log: a renewal and a release.
	renewAll(t, c, li, acks[:2])
	rel := retry(t, "release", func(ctx context.Context) (*api.ReleaseResponse, error) {
		return c.Client(li).Release(ctx, &api.ReleaseRequest{Caller: caller("client-4", 1, 2), Keys: []*api.ReleaseKey{
			{Key: acks[8].key, LeaseId: acks[8].grant.GetLeaseId(), UnspentMilli: 1000},
			{Key: acks[9].key, LeaseId: acks[9].grant.GetLeaseId(), UnspentMilli: 0},
		}})
	})
	for _, r := range rel.GetResults() {
		if r.GetError() != nil {
			t.Fatalf("release: %v", r.GetError())
		}
	}
	before := listLeases(t, c, li)
	if len(before) != len(acks)-2 {
		t.Fatalf("%d leases before the restart, want %d", len(before), len(acks)-2)
	}

	// Crash them all, leader last, without waiting for followers to catch
	// up: what was acknowledged is on a majority's disk.
	for _, i := range []int{(li + 1) % 3, (li + 2) % 3, li} {
		c.Kill(i)
	}
	for i := range 3 {
		c.Restart(i)
	}
	leader = c.WaitForStableLeader(t)
	after := listLeases(t, c, c.Index(leader))
	if len(after) != len(before) {
		t.Errorf("%d leases after the restart, want %d", len(after), len(before))
	}
	for h, want := range before {
		if got := after[h]; !proto.Equal(got, want) {
			t.Errorf("lease %s after restart:\n got %v\nwant %v", h, got, want)
		}
	}
	c.WaitForConsistentState(t)
	// And the cluster still works: renew the surviving leases.
	var live []acked
	for _, a := range acks[:8] {
		live = append(live, a)
	}
	for i := range live {
		if i < 2 {
			live[i].caller = proto.Clone(live[i].caller).(*api.Caller)
			live[i].caller.Seq++ // renewed once already
		}
	}
	renewAll(t, c, c.Index(leader), live)
}

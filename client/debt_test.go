package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

// Two debt policies (docs/design.md §4.1): "llm" pays its debt quickly
// (r = 10/s), "slow" keeps it long enough to watch it outlive holders,
// leaders and a policy delete (r = 1/s).
const debtPolicies = `
policies:
  - name: llm
    algorithm: token-bucket
    key: [tenant]
    rate: 10
    burst: 10
    start: full
    max_debt: 40
    lease: {duration: 2s, renew_after: 200ms}
  - name: slow
    algorithm: token-bucket
    key: [tenant]
    rate: 1
    burst: 5
    start: full
    max_debt: 40
    lease: {duration: 1s, renew_after: 200ms}
`

// keyDebt is the key's debt as the leader's listing says (-1: no such key).
func keyDebt(t *testing.T, c *testcluster.Cluster, policy, key string) int64 {
	t.Helper()
	resp, err := listLeases(c, t, policy)
	if err != nil {
		return -1
	}
	for _, k := range resp.GetKeys() {
		if k.GetKey() == key {
			return k.GetDebtMilli()
		}
	}
	return -1
}

// TestChargeLeavesDebtPaidByRate: a charge after the work beyond the
// bucket is never refused; it leaves a debt that refuses admissions until
// the lease's rate has paid it, and a release hands the debt left to the
// key, whose next holder starts with nothing. Bad input is an error.
func TestChargeLeavesDebtPaidByRate(t *testing.T) {
	c := startCluster(t, debtPolicies)
	var starts atomic.Int64
	starts.Store(-1)
	a := newClient(t, client.Config{Servers: servers(c), ClientID: "a", OnGrant: func(g client.GrantInfo) {
		if !g.Renewal && g.Policy == "llm" {
			starts.Store(g.StartMilli)
		}
	}})
	lim := a.Limiter("llm", map[string]string{"tenant": "acme"})
	waitLease(t, nil, lim)

	for _, bad := range []int64{-1, client.MaxCost + 1} {
		if _, err := lim.Charge(bad); !errors.Is(err, client.ErrInvalidCost) && !errors.Is(err, client.ErrCostTooLarge) {
			t.Fatalf("Charge(%d): %v", bad, err)
		}
	}
	res, err := lim.Charge(25) // the bucket holds at most 9 tokens now
	if err != nil {
		t.Fatal(err)
	}
	if res.DebtMilli < 15_000 || res.ExcessMilli != 0 {
		t.Fatalf("charge of 25 on a bucket of 10 with an allowance of 20: %+v", res)
	}
	d := lim.AllowN(1)
	if d.Allowed || d.RetryAfter < time.Second {
		t.Fatalf("in debt (%d milli-tokens) an admission was %v, retry after %v: want refused for the debt's time at 10/s", res.DebtMilli, d.Verdict, d.RetryAfter)
	}
	// The rate pays the debt, then admissions resume.
	testcluster.WaitFor(t, 10*time.Second, func() error {
		if d := lim.AllowN(1); !d.Allowed {
			return fmt.Errorf("still refused: %v", d.Verdict)
		}
		return nil
	})
	// Into debt again, and released so: the key keeps it.
	res, _ = lim.Charge(20)
	if res.DebtMilli == 0 {
		t.Fatalf("second charge: %+v", res)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := keyDebt(t, c, "llm", "acme"); got <= 0 {
		t.Fatalf("key debt after a release in debt: %d", got)
	}
	b := newClient(t, client.Config{Servers: servers(c), ClientID: "b", OnGrant: func(g client.GrantInfo) {
		if !g.Renewal && g.Policy == "llm" {
			starts.Store(g.StartMilli)
		}
	}})
	starts.Store(-1)
	blim := b.Limiter("llm", map[string]string{"tenant": "acme"})
	blim.AllowN(0)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if starts.Load() < 0 {
			return errors.New("no grant yet")
		}
		return nil
	})
	if s := starts.Load(); s != 0 {
		t.Fatalf("the next holder started with %d milli-tokens while the key was in debt", s)
	}
}

// TestReserveSettle: a reservation takes its estimate like an admission;
// Settle charges more (a debt) or refunds less, once; after its deadline
// the estimate stays taken.
func TestReserveSettle(t *testing.T) {
	c := startCluster(t, debtPolicies)
	a := newClient(t, client.Config{Servers: servers(c), ClientID: "a"})
	lim := a.Limiter("llm", map[string]string{"tenant": "acme"})
	waitLease(t, nil, lim)

	r, d := lim.Reserve(5)
	if r == nil || !d.Allowed {
		t.Fatalf("reserve 5 of about 9: %v", d.Verdict)
	}
	if _, d := lim.Reserve(100); d.Allowed {
		t.Fatalf("a reservation above the burst was admitted: %v", d.Verdict)
	}
	if _, err := r.Settle(-1); !errors.Is(err, client.ErrInvalidCost) {
		t.Fatalf("settle -1: %v", err)
	}
	res, err := r.Settle(30) // 25 more than the estimate: debt
	if err != nil || res.DebtMilli == 0 {
		t.Fatalf("settle 30: %+v, %v", res, err)
	}
	if _, err := r.Settle(1); !errors.Is(err, client.ErrAlreadySettled) {
		t.Fatalf("second settle: %v", err)
	}
	if d := lim.AllowN(1); d.Allowed {
		t.Fatal("admitted while in debt")
	}
	// Expired: the estimate stays taken.
	testcluster.WaitFor(t, 10*time.Second, func() error {
		if d := lim.AllowN(0); !d.Allowed || d.RemainingMilli < 3_000 {
			return fmt.Errorf("level %d", d.RemainingMilli)
		}
		return nil
	})
	reserved := time.Now()
	r2, d := lim.ReserveFor(2, time.Millisecond)
	if r2 == nil {
		t.Fatalf("reserve 2: %v", d.Verdict)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if time.Since(reserved) < 5*time.Millisecond {
			return errors.New("the reservation's deadline has not passed")
		}
		return nil
	})
	if _, err := r2.Settle(0); !errors.Is(err, client.ErrReservationExpired) {
		t.Fatalf("settle after the deadline: %v", err)
	}
}

// TestReserveAllShortSlices: rs or ds shorter than the layers (a caller's
// bug) reserves nothing and names the first layer with no room, rather
// than panicking after some layers were charged.
func TestReserveAllShortSlices(t *testing.T) {
	c := startCluster(t, debtPolicies)
	a := newClient(t, client.Config{Servers: servers(c), ClientID: "a"})
	x := a.Limiter("llm", map[string]string{"tenant": "x"})
	y := a.Limiter("llm", map[string]string{"tenant": "y"})
	waitLease(t, nil, x)
	waitLease(t, nil, y)
	before := x.AllowN(0).RemainingMilli
	layers := []*client.Limiter{x, y}
	for _, tc := range []struct {
		rs   []*client.Reservation
		ds   []client.Decision
		want int
	}{{nil, nil, 0}, {make([]*client.Reservation, 1), make([]client.Decision, 2), 1}, {make([]*client.Reservation, 2), make([]client.Decision, 1), 1}} {
		if got := a.ReserveAll(2, time.Second, layers, tc.rs, tc.ds); got != tc.want {
			t.Errorf("ReserveAll with %d reservations, %d decisions for 2 layers: refused %d, want %d", len(tc.rs), len(tc.ds), got, tc.want)
		}
		for i, r := range tc.rs {
			if r != nil {
				t.Errorf("reservation %d set though nothing was reserved", i)
			}
		}
	}
	if after := x.AllowN(0).RemainingMilli; after < before {
		t.Errorf("the first layer was charged: %d left, %d before", after, before)
	}
	rs, ds := make([]*client.Reservation, 2), make([]client.Decision, 2)
	if got := a.ReserveAll(2, time.Second, layers, rs, ds); got != -1 || rs[0] == nil || rs[1] == nil {
		t.Fatalf("ReserveAll with room for both: refused %d, %v", got, rs)
	}
	for _, r := range rs {
		if _, err := r.Settle(2); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDebtOutlivesHolderLeaderAndPolicy: a replica cut off while in debt
// leaves its whole allowance in the key's budget when its lease expires;
// the debt survives a leader failover and a policy delete and re-apply.
func TestDebtOutlivesHolderLeaderAndPolicy(t *testing.T) {
	c := startCluster(t, debtPolicies)
	ps, addrs := proxies(t, c)
	a := newClient(t, client.Config{Servers: addrs, ClientID: "a"})
	lim := a.Limiter("slow", map[string]string{"tenant": "acme"})
	waitLease(t, nil, lim)
	if res, err := lim.Charge(12); err != nil || res.DebtMilli == 0 {
		t.Fatalf("charge: %+v, %v", res, err)
	}
	cutAll(ps) // the replica is gone: it never releases
	testcluster.WaitFor(t, 10*time.Second, func() error {
		if d := keyDebt(t, c, "slow", "acme"); d < 15_000 {
			return fmt.Errorf("key debt %d, want the dead lease's allowance (20 tokens, less what the pool paid)", d)
		}
		return nil
	})
	before := keyDebt(t, c, "slow", "acme")

	leader := c.Index(c.Leader())
	c.Kill(leader)
	c.WaitForLeader(t)
	if d := keyDebt(t, c, "slow", "acme"); d <= 0 || d > before {
		t.Fatalf("after a failover the key's debt is %d (it was %d)", d, before)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := leaderAdmin(t, c).DeletePolicy(ctx, &api.DeletePolicyRequest{Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaderAdmin(t, c).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: debtPolicies}); err != nil {
		t.Fatal(err)
	}
	if d := keyDebt(t, c, "slow", "acme"); d <= 0 {
		t.Fatalf("after a delete and re-apply the key's debt is %d (it was %d)", d, before)
	}
}

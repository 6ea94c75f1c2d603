package client_test

import (
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
)

// Policies keyed on the tenant alone; the tests' keys carry a route too,
// which the cluster ignores.
const holderPolicies = `
policies:
  - name: tenant-busy
    algorithm: token-bucket
    rate: 10
    burst: 10
    key: [tenant]
    lease: {duration: 2s, renew_after: 200ms}
  - name: tenant-still
    algorithm: token-bucket
    rate: 0.001
    burst: 10
    key: [tenant]
    lease: {duration: 30s, renew_after: 500ms}
`

// TestKeysOfOneBudgetKeepTheBound checks one holder per budget
// (docs/design.md §3.4 item 7): two limiters whose keys differ only in an
// attribute the policy ignores are one lease holder on the cluster. Each
// limiter's acquire used to replace the other's lease while the other kept
// admitting: 155 admitted in 8 s against B + r·W = 90. Hammered from two
// goroutines each, they must keep the bound over every window.
func TestKeysOfOneBudgetKeepTheBound(t *testing.T) {
	t.Parallel()
	c := startCluster(t, holderPolicies)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "one-holder"})
	// Made together, before any grant tells the client what the policy
	// keys on.
	lx := cl.Limiter("tenant-busy", client.Key{"tenant": "a", "route": "x"})
	ly := cl.Limiter("tenant-busy", client.Key{"tenant": "a", "route": "y"})
	h := newHistory()
	const run = 8 * time.Second
	var wg sync.WaitGroup
	reasons := make([]map[client.Reason]int, 4)
	for i, l := range []*client.Limiter{lx, lx, ly, ly} {
		wg.Go(func() { reasons[i] = load(h, []string{"x", "y"}[i/2], l, 2*time.Millisecond, run, nil) })
	}
	wg.Wait()
	adm := h.snapshot()
	var total int64
	for _, a := range adm {
		total += a.CostMilli
	}
	t.Logf("admitted %d tokens in %v (x: %v, y: %v)", total/1000, run, reasons[0], reasons[2])
	// Full use leaves no headroom: judge by the decision spans, so a stamp
	// taken a little late cannot fake a window.
	checkBoundSpans(t, "two keys of one budget", h.spanSnapshot(), quotacheck.Bound{CapacityMilli: 10_000, RateMilliPerSec: 10_000})
}

// TestKeysOfOneBudgetShareOneBucket: limiters for keys of one budget admit
// from one bucket, whether made before the client knew the policy's key
// attributes (the later one becomes an alias) or after (Client.Limiter
// returns a limiter of that bucket), and the cluster sees one lease.
func TestKeysOfOneBudgetShareOneBucket(t *testing.T) {
	c := startCluster(t, holderPolicies)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "one-bucket"})
	lx := cl.Limiter("tenant-still", client.Key{"tenant": "a", "route": "x"})
	ly := cl.Limiter("tenant-still", client.Key{"tenant": "a", "route": "y"})
	if d := waitLease(t, nil, lx); !d.Allowed || d.RemainingMilli != 9_000 {
		t.Fatalf("first admission on x: %+v", d)
	}
	// The 9 tokens left are y's too.
	if d := ly.AllowN(9); !d.Allowed || d.RemainingMilli != 0 {
		t.Fatalf("y after x spent 1 of 10: %+v, want 9 admitted from the same bucket", d)
	}
	if d := lx.AllowN(1); d.Allowed {
		t.Fatalf("x after y spent the rest: %+v", d)
	}
	// A key made now, with the attributes known, shares it at once.
	lz := cl.Limiter("tenant-still", client.Key{"tenant": "a", "route": "z", "region": "eu"})
	if d := lz.AllowN(1); d.Allowed || d.Reason == client.NoLease {
		t.Fatalf("z on the spent budget: %+v", d)
	}
	if cl.Limiter("tenant-still", client.Key{"tenant": "a", "route": "x"}) != lx {
		t.Fatal("Client.Limiter returned a new limiter for x's own key")
	}
	// Another tenant is another budget.
	if d := waitLease(t, nil, cl.Limiter("tenant-still", client.Key{"tenant": "b", "route": "x"})); !d.Allowed {
		t.Fatalf("tenant b: %+v", d)
	}
	resp, err := listLeases(c, t, "tenant-still")
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, le := range resp.GetLeases() {
		if le.GetClientId() == "one-bucket" {
			perKey[le.GetKey()]++
		}
	}
	if perKey["a"] != 1 || perKey["b"] != 1 || len(perKey) != 2 {
		t.Fatalf("the cluster holds leases %v for the client, want one per tenant", perKey)
	}
}

// TestCostThatWouldOverflowIsRefused checks costs out of range
// (docs/design.md §2) through the public client: AllowN(18446744073709552)
// on a 10-token policy was allowed (the cost times 1000 wraps to 384
// milli-tokens). Costs above any burst are ExceedsCapacity, negative ones
// InvalidCost, and neither spends a token.
func TestCostThatWouldOverflowIsRefused(t *testing.T) {
	c := startCluster(t, holderPolicies)
	cl := newClient(t, client.Config{Servers: servers(c), ClientID: "costs"})
	l := cl.Limiter("tenant-still", client.Key{"tenant": "a"})
	if d := waitLease(t, nil, l); !d.Allowed || d.RemainingMilli != 9_000 {
		t.Fatalf("first admission: %+v", d)
	}
	for _, cost := range []int64{18446744073709552, 18446744073709552 * 2, client.MaxCost + 1, 1 << 62} {
		if d := l.AllowN(cost); d.Allowed || d.Reason != client.ExceedsCapacity {
			t.Errorf("AllowN(%d) = %+v, want ExceedsCapacity", cost, d)
		}
		if d := cl.AllowAll(cost, l); d.Allowed || d.Reason != client.ExceedsCapacity {
			t.Errorf("AllowAll(%d) = %+v, want ExceedsCapacity", cost, d)
		}
	}
	for _, cost := range []int64{-1, -18446744073709552} {
		if d := l.AllowN(cost); d.Allowed || d.Reason != client.InvalidCost {
			t.Errorf("AllowN(%d) = %+v, want InvalidCost", cost, d)
		}
	}
	if d := l.AllowN(9); !d.Allowed || d.RemainingMilli != 0 {
		t.Fatalf("the 9 tokens left after the refusals: %+v", d)
	}
}

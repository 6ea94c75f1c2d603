package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/quotacheck"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Budget lifetime through the admin API (docs/design.md §3.5): a policy
// deleted and applied again, or re-keyed, must not refill its budgets.
// Each case drains a key with client traffic, changes the policy through
// the admin API the way a GitOps tool syncing by delete-and-apply would,
// admits again, and checks every window against B + r·W.

const lifetimePolicy = `
policies:
  - name: sync
    algorithm: token-bucket
    rate: 20
    burst: 100
    key: [tenant]
    lease: {duration: 1s, renew_after: 250ms}
`

// lifetimeBound is B + r·W, exactly: no slack. (It had one token of slack
// while a client alone on a fresh key could decide up to r times the
// coarse clock's lag more than B + r·W within its first half second, with
// or without any policy change: TestFreshLeaseKeepsBound.) The breaks this
// test is about overshoot by about B (100 tokens).
var lifetimeBound = quotacheck.Bound{CapacityMilli: 100_000, RateMilliPerSec: 20_000}

// lifetimeLoad offers 200 tokens/s, ten times r.
const lifetimeLoad = time.Second / 200

func admin(t *testing.T, c *testcluster.Cluster, call func(ctx context.Context, a api.AdminClient) error) error {
	t.Helper()
	// Unavailable is retried, each attempt at the leader of the moment: a
	// leader that loses its lease under load answers "leadership lost while
	// committing log" (seen: TestPolicyChangeKeepsBudget/expire at load
	// average 12), and the entry may or may not have committed. The calls
	// here converge: an apply of the same YAML again changes nothing, and
	// deleteSync takes NotFound after an Unavailable attempt as done.
	_, err := testcluster.RetryUnavailable(func(ctx context.Context) (struct{}, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return struct{}{}, call(ctx, leaderAdmin(t, c))
	})
	return err
}

func deleteSync(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	unavailable := false // an attempt answered Unavailable: it may have committed
	if err := admin(t, c, func(ctx context.Context, a api.AdminClient) error {
		_, err := a.DeletePolicy(ctx, &api.DeletePolicyRequest{Name: "sync"})
		if status.Code(err) == codes.NotFound && unavailable {
			return nil
		}
		unavailable = unavailable || status.Code(err) == codes.Unavailable
		return err
	}); err != nil {
		t.Fatalf("policy delete: %v", err)
	}
}

func applySync(t *testing.T, c *testcluster.Cluster, yaml string) error {
	t.Helper()
	return admin(t, c, func(ctx context.Context, a api.AdminClient) error {
		_, err := a.ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: yaml})
		return err
	})
}

// syncUntilApplied applies yaml until the cluster takes it, as a GitOps
// loop does: FAILED_PRECONDITION (old leases still live) is retried.
func syncUntilApplied(t *testing.T, c *testcluster.Cluster, yaml string) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		err := applySync(t, c, yaml)
		if err != nil && status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("policy apply: %v", err)
		}
		return err
	})
}

// noLeases waits until the leader lists no lease of the policy.
func noLeases(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		resp, err := listLeases(c, t, "sync")
		if err != nil {
			return err
		}
		if n := len(resp.GetLeases()); n > 0 {
			return fmt.Errorf("%d leases still listed", n)
		}
		return nil
	})
}

// drain runs a client on key attrs at ten times r until stop is closed.
func drain(t *testing.T, h *history, who string, cfg client.Config, attrs client.Key) (stop func()) {
	t.Helper()
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lim := cl.Limiter("sync", attrs)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); load(h, who, lim, lifetimeLoad, time.Hour, quit) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			wg.Wait()
			_ = cl.Close() // releases the lease with its unspent tokens
		})
	}
	t.Cleanup(stop)
	return stop
}

// until waits for h's clock to reach d (the test's own pacing).
func until(t *testing.T, h *history, d time.Duration) {
	t.Helper()
	testcluster.WaitFor(t, d+testcluster.DefaultWait, func() error {
		if h.since() < d {
			return fmt.Errorf("at %v, waiting for %v", h.since(), d)
		}
		return nil
	})
}

// lifetimeCase runs one scenario on c and returns the history of the one
// attribute set every client uses.
func lifetimeCase(t *testing.T, c *testcluster.Cluster, name string) *history {
	h := newHistory()
	acme := client.Key{"tenant": "acme", "region": "eu"}
	cfg := func(id string) client.Config { return client.Config{Servers: servers(c), ClientID: id} }
	switch name {
	case "release": // drained, released, deleted, applied, admitted again
		stop := drain(t, h, "a", cfg("a"), acme)
		until(t, h, time.Second)
		stop()
		deleteSync(t, c)
		if err := applySync(t, c, lifetimePolicy); err != nil {
			t.Fatalf("policy apply: %v", err)
		}
	case "expire": // drained, cut off until its lease expired, deleted, applied
		ps, addrs := proxies(t, c)
		stop := drain(t, h, "a", client.Config{Servers: addrs, ClientID: "a"}, acme)
		until(t, h, time.Second)
		cutAll(ps)
		noLeases(t, c) // a admits until its own deadline, before this
		stop()
		deleteSync(t, c)
		if err := applySync(t, c, lifetimePolicy); err != nil {
			t.Fatalf("policy apply: %v", err)
		}
	case "delete mid-traffic": // deleted under load, synced back at once
		stop := drain(t, h, "a", cfg("a"), acme)
		until(t, h, 500*time.Millisecond)
		deleteSync(t, c)
		syncUntilApplied(t, c, lifetimePolicy)
		until(t, h, h.since()+2*time.Second)
		stop()
		return h
	case "re-key": // refused while leased; then new keys start no fuller
		rekeyed := strings.Replace(lifetimePolicy, "key: [tenant]", "key: [tenant, region]", 1)
		stop := drain(t, h, "a", cfg("a"), acme)
		until(t, h, time.Second)
		if err := applySync(t, c, rekeyed); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("re-key while a holds a lease: %v, want FailedPrecondition", err)
		}
		stop()
		noLeases(t, c)
		if err := applySync(t, c, rekeyed); err != nil {
			t.Fatalf("re-key after the release: %v", err)
		}
	default:
		t.Fatalf("no case %q", name)
	}
	stop := drain(t, h, "b", cfg("b"), acme)
	until(t, h, h.since()+1500*time.Millisecond)
	stop()
	return h
}

// TestPolicyChangeKeepsBudget: for each way of changing a policy, every
// window across the change keeps B + r·W. Each case failed before budgets
// outlived their policies (a re-created or re-keyed key started full).
func TestPolicyChangeKeepsBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a cluster under load for several seconds")
	}
	for _, name := range []string{"release", "expire", "delete mid-traffic", "re-key"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // a cluster each
			c := startCluster(t, lifetimePolicy)
			h := lifetimeCase(t, c, name)
			// A client at ten times r admits right at its mint instants:
			// no structural headroom, so judge by decision spans.
			checkBoundSpans(t, name, h.spanSnapshot(), lifetimeBound)
			reportWindows(t, h.snapshot(), lifetimeBound, time.Second, 3*time.Second)
		})
	}
}

package coordinator_test

// Regression tests from the adversarial review of the coordinator.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const reviewPolicy = `policies:
  - name: rv
    algorithm: token-bucket
    rate: 10
    burst: 20
    key: [tenant]
    lease: {duration: 1s}
`

// Finding 1 end to end: `rationctl policy apply` of the same policy with
// start: empty (or a new key attribute) used to drop live leases and grant
// the budget again. It is now refused while the old leases are live.
func TestReviewReapplyGrantsTwice(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(strings.Replace(reviewPolicy, "1s", "60s", 1)))
	c.WaitForStableLeader(t)
	ctx := rpcCtx(t)
	a, err := c.Client(0).Acquire(ctx, acquireReq(caller("a", 1, 1), key("rv", "acme")))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(strings.Replace(reviewPolicy, "1s", "60s", 1), "burst: 20", "burst: 20\n    start: empty", 1)
	if _, err := c.Admin(0).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: y}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "live until") {
		t.Fatalf("re-keying apply while a lease is live: %v, want FailedPrecondition naming when it may be applied", err)
	}
	b, err := c.Client(0).Acquire(ctx, acquireReq(caller("b", 1, 1), key("rv", "acme")))
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := a.GetLeases()[0].GetGrant().GetRateMilliPerSec(), b.GetLeases()[0].GetGrant().GetRateMilliPerSec()
	if ra+rb > 10_000 {
		t.Fatalf("a's 60 s lease is live, yet a=%d + b=%d milli/s > r=10000", ra, rb)
	}
}

// Finding 2 end to end: a snapshot taken after a budget cut, between an
// old lease's expiry and the Expire entry, cannot be loaded: the server
// does not start again. (ExpireInterval is raised only to widen the
// window, which is ExpireInterval + commit latency + the inherited margin
// after a leader change in production.)
func TestReviewRestartAfterBudgetCut(t *testing.T) {
	c := testcluster.New(t, 1, testcluster.WithPolicies(reviewPolicy),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.ExpireInterval = time.Hour }))
	c.WaitForStableLeader(t)
	ctx := rpcCtx(t)
	if _, err := c.Client(0).Acquire(ctx, acquireReq(caller("a", 1, 1), key("rv", "acme"))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admin(0).ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: strings.Replace(reviewPolicy, "rate: 10", "rate: 5", 1)}); err != nil {
		t.Fatal(err)
	}
	// Wait until, on the leader's clock, a's lease is past its expiry (the
	// Expire entry that would remove it is an hour away).
	c.WaitFor(t, testcluster.DefaultWait, func() error {
		r, err := c.Admin(0).ListLeases(rpcCtx(t), &api.ListLeasesRequest{Policy: "rv"})
		if err != nil {
			return err
		}
		for _, l := range r.GetLeases() {
			if l.GetClientId() == "a" && l.GetExpiresInNanos() > 0 {
				return fmt.Errorf("a's lease expires in %v", time.Duration(l.GetExpiresInNanos()))
			}
		}
		return nil
	})
	if _, err := c.Client(0).Acquire(ctx, acquireReq(caller("b", 1, 1), key("rv", "acme"))); err != nil {
		t.Fatal(err)
	}
	if err := c.Server(0).Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	c.Kill(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv, err := coordinator.New(c.Config(0))
		if err != nil {
			t.Errorf("server does not start from its own snapshot: %v", err)
			return
		}
		srv.Kill()
	}()
	<-done
}

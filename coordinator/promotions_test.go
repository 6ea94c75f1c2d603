package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// TestBuiltinEdgePromotionBudget: a server grants promotions (CheckItem
// promote) from its switch budget (docs/design.md §3.4, "The switch
// budget"), through the public Check API as a careless caller would: a
// burst of requests for one policy gets at most the burst plus the rate
// over the time it took, then denials, and a grant again once the bucket
// refills; the budget is per policy; an unknown policy is denied; an item
// that does not ask, or is not evaluated, is answered not-asked; the
// decisions themselves are made as without promote. A rate out of range
// is refused by Validate.
func TestBuiltinEdgePromotionBudget(t *testing.T) {
	for _, rate := range []int{-1, coordinator.MaxRemotePromotionRate + 1} {
		cfg := coordinator.TestConfig()
		cfg.ID, cfg.DataDir, cfg.RemotePromotionRate = "s", t.TempDir(), rate
		if err := cfg.Validate(); !errors.Is(err, coordinator.ErrInvalidConfig) {
			t.Errorf("RemotePromotionRate %d: %v, want ErrInvalidConfig", rate, err)
		}
	}
	const rate = 4
	c := testcluster.New(t, 1, testcluster.WithPolicies(testPolicies),
		testcluster.WithConfig(func(_ int, cfg *coordinator.Config) { cfg.RemotePromotionRate = rate }))
	c.WaitForLeader(t)
	conn, err := grpc.NewClient(c.Server(0).GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	adm := api.NewAdmissionClient(conn)
	check := func(req *api.CheckRequest) *api.CheckResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), rpcTimeout)
		defer cancel()
		resp, err := adm.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		return resp
	}
	ask := func(pol, tenant string) api.Promotion {
		t.Helper()
		return check(&api.CheckRequest{Items: []*api.CheckItem{{Policy: pol, Key: map[string]string{"tenant": tenant}, Cost: 1, Promote: true}}}).GetResults()[0].GetPromotion()
	}
	if p := ask("nope", "a"); p != api.Promotion_PROMOTION_DENIED_TRY_LATER {
		t.Errorf("an unknown policy's promotion: %v, want denied", p)
	}
	if p := check(&api.CheckRequest{Items: []*api.CheckItem{{Policy: "api", Key: map[string]string{"tenant": "x"}}}}).GetResults()[0].GetPromotion(); p != api.Promotion_PROMOTION_NOT_ASKED {
		t.Errorf("an item that did not ask: %v, want not-asked", p)
	}
	// all_or_none: the second item is not evaluated (the first's cost is
	// above the burst), so its request is not answered either.
	resp := check(&api.CheckRequest{AllOrNone: true, Items: []*api.CheckItem{
		{Policy: "small", Key: map[string]string{"tenant": "y"}, Cost: 1 << 40, Promote: true},
		{Policy: "api", Key: map[string]string{"tenant": "y"}, Cost: 1 << 40, Promote: true}}})
	if r := resp.GetResults(); r[0].GetAllowed() || r[0].GetPromotion() == api.Promotion_PROMOTION_NOT_ASKED || r[1].GetPromotion() != api.Promotion_PROMOTION_NOT_ASKED {
		t.Errorf("all_or_none with an oversized cost: %v; want refused, the first asked answered, the second not evaluated nor answered", r)
	}

	// The storm: 40 requests for policy api as fast as they go.
	const n = 40
	start := time.Now()
	granted, denied := 0, 0
	for i := range n {
		switch p := ask("api", fmt.Sprintf("t%03d", i)); p {
		case api.Promotion_PROMOTION_GRANTED:
			granted++
		case api.Promotion_PROMOTION_DENIED_TRY_LATER:
			denied++
		default:
			t.Fatalf("request %d answered %v", i, p)
		}
	}
	elapsed := time.Since(start)
	// One second's worth of burst (the bucket started full, the "small"
	// asks above took from another policy's), plus the rate since.
	bound := rate + int(float64(rate)*elapsed.Seconds()) + 1
	t.Logf("%d promotion requests in %v at %d/s: %d granted, %d denied (bound %d)", n, elapsed, rate, granted, denied, bound)
	if granted > bound || granted < rate {
		t.Fatalf("%d of %d promotions granted in %v at %d/s; want %d to %d", granted, n, elapsed, rate, rate, bound)
	}
	// Another policy has a budget of its own; and the bucket refills.
	if p := ask("small", "z"); p != api.Promotion_PROMOTION_GRANTED {
		t.Errorf("policy small after policy api's storm: %v, want granted (a budget per policy)", p)
	}
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if p := ask("api", "again"); p != api.Promotion_PROMOTION_GRANTED {
			return fmt.Errorf("no grant yet: %v", p)
		}
		return nil
	})
	var got coordinator.PromotionCount
	for _, pc := range c.Server(0).PromotionCounts() {
		if pc.Policy == "api" {
			got = pc
		}
	}
	if got.Granted < uint64(granted)+1 || got.Denied < uint64(denied) {
		t.Fatalf("PromotionCounts for api: %+v; want at least %d granted, %d denied", got, granted+1, denied)
	}
}

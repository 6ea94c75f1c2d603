package client

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/ration-dev/ration/lease"
)

// TestCostsOutOfRange checks costs out of range (docs/design.md §2, "Costs
// are checked before they are converted") on the admission entry points: a
// cost is refused before any arithmetic on it, so none wraps into an
// admission (AllowN(18446744073709552) on a 10-token lease was allowed:
// ×1000 wraps to 384 milli-tokens), and refused costs leave the bucket and
// the demand accounting alone.
func TestCostsOutOfRange(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("p", Key{"tenant": "a"})
	l2 := c.Limiter("q", Key{"tenant": "a"})
	grant(l, 1, 0, 10, false, "a")
	grant(l2, 2, 0, 10, false, "a")
	level := func(x *Limiter) int64 { return x.cur.Load().bucket.LevelMilli(c.clock.Precise()) }
	for _, cost := range []int64{18446744073709552, MaxCost + 1, math.MaxInt64, math.MaxInt64 / 1000, math.MaxInt64/1000 + 1} {
		if d := l.AllowN(cost); d.Allowed || d.Reason != ExceedsCapacity || d.RetryAfter != lease.RetryNever {
			t.Errorf("AllowN(%d) = %+v, want ExceedsCapacity, RetryNever", cost, d)
		}
		if d, i := c.AllowAllLayers(cost, l, l2); d.Allowed || d.Reason != ExceedsCapacity || i != 0 {
			t.Errorf("AllowAllLayers(%d) = %+v, %d", cost, d, i)
		}
		if err := l.WaitN(context.Background(), cost); err == nil {
			t.Errorf("WaitN(%d) admitted", cost)
		}
	}
	for _, cost := range []int64{-1, -1000, math.MinInt64, math.MinInt64 + 1, -18446744073709552} {
		if d := l.AllowN(cost); d.Allowed || d.Reason != InvalidCost || d.RetryAfter != lease.RetryNever {
			t.Errorf("AllowN(%d) = %+v, want InvalidCost", cost, d)
		}
		var decs [2]Decision
		if i := c.AllowAllDetail(cost, []*Limiter{l, l2}, decs[:]); i != 0 || decs[0].Reason != InvalidCost {
			t.Errorf("AllowAllDetail(%d) = %d, %+v", cost, i, decs)
		}
		if err := l.WaitN(context.Background(), cost); !errors.Is(err, ErrInvalidCost) {
			t.Errorf("WaitN(%d) = %v, want ErrInvalidCost", cost, err)
		}
	}
	if got := level(l); got != 10_000 {
		t.Fatalf("level %d after refused costs, want 10000", got)
	}
	if l.unmet.Load() != 0 || l.maxCost.Load() != 0 {
		t.Fatalf("refused out-of-range costs counted as demand: unmet %d, max cost %d", l.unmet.Load(), l.maxCost.Load())
	}
	if got := l.decisions[ExceedsCapacity].Load() + l.decisions[InvalidCost].Load(); got != 25 { // AllowN, AllowAll and WaitN for each too large; AllowN and AllowAll for each negative
		t.Fatalf("%d refusals counted, want 25", got)
	}
	// Zero spends nothing and is allowed while the lease is usable.
	if d := l.AllowN(0); !d.Allowed || d.Reason != Allowed || d.RemainingMilli != 10_000 {
		t.Fatalf("AllowN(0) = %+v", d)
	}
	if d, i := c.AllowAllLayers(0, l, l2); !d.Allowed || i != -1 {
		t.Fatalf("AllowAllLayers(0) = %+v, %d", d, i)
	}
	if err := l.WaitN(context.Background(), 0); err != nil {
		t.Fatalf("WaitN(0) = %v", err)
	}
	if level(l) != 10_000 || level(l2) != 10_000 {
		t.Fatal("a cost of 0 spent tokens")
	}
	// The largest cost any burst can hold is an ordinary cost.
	if d := l.AllowN(MaxCost); d.Reason != ExceedsCapacity || d.RetryAfter != lease.RetryNever {
		t.Fatalf("AllowN(MaxCost) on a 10-token cap = %+v", d)
	}
	if d := l.AllowN(10); !d.Allowed {
		t.Fatalf("AllowN(10) = %+v", d)
	}
	// Before any lease, 0 probes: NoLease.
	if d := c.Limiter("p", Key{"tenant": "fresh"}).AllowN(0); d.Reason != NoLease {
		t.Fatalf("AllowN(0) without a lease = %+v", d)
	}
}

// TestShadowCostAboveMaxCost: a shadow policy never refuses a quota
// decision, a cost above MaxCost included; a negative cost it refuses.
func TestShadowCostAboveMaxCost(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("p", Key{"tenant": "a"})
	grant(l, 1, 0, 10, true, "a")
	if d := l.AllowN(MaxCost + 1); !d.Allowed || !d.Shadow || d.Reason != ShadowDenied {
		t.Fatalf("shadow AllowN(MaxCost+1) = %+v", d)
	}
	if d := l.AllowN(-1); d.Allowed || d.Reason != InvalidCost {
		t.Fatalf("shadow AllowN(-1) = %+v", d)
	}
}

// TestUnmetSaturates: refused costs up to MaxCost each, however many,
// never wrap the offered demand negative.
func TestUnmetSaturates(t *testing.T) {
	c := offlineClient(t)
	l := c.Limiter("p", Key{"tenant": "a"})
	grant(l, 1, 0, 10, false, "a")
	for range 10_000 {
		l.AllowN(MaxCost)
	}
	if got := l.unmet.Load(); got != math.MaxInt64 {
		t.Fatalf("unmet = %d after 10000 refusals of MaxCost, want saturated at MaxInt64", got)
	}
}

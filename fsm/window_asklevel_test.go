package fsm

import (
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
)

// wRenewLevel is wRenew saying what the chunk holds (nil: not said, as a
// client that predates RenewKey.window_level_milli).
func wRenewLevel(c *api.Caller, id uint64, rate int64, level *int64) *api.LeaseOp {
	op := wRenew(c, "acme", id, rate)
	op.GetRenew().GetKeys()[0].WindowLevelMilli = level
	return op
}

// TestWindowAskLevelWaitsForItsSwitch: with FeatureWindowAskLevel a
// renewal of a chunk that holds its ask's floor (twice the largest cost,
// one unit) and reports no need is topped up by nothing, one that holds
// part of it by the rest (in whole units); a level not said, or outside
// [0, lease.MaxCapacityMilli], keeps the floor. Off, every renewal is
// topped up by the floor whatever the chunk holds, as a server that
// predates the switch (docs/design.md §8.1, "The ask").
func TestWindowAskLevelWaitsForItsSwitch(t *testing.T) {
	lv := func(v int64) *int64 { return &v }
	for _, on := range []bool{false, true} {
		h := newHarnessAt(t, 0)
		if on {
			h.enableFeatures(KnownFeatures)
		}
		if r := h.apply(CmdApplyPolicies, 0, windowPolicies("1000", "")); r.Err != nil {
			t.Fatal(r.Err)
		}
		// Window [0, 2 s), renewals every 125 ms: at 1 unit a second the
		// rate's ask is 0.25 units, the floor (largest cost 1) 2 units.
		g := keyLeaseOf(t, h.batch(sec/10, wAcquire(caller("a", 1, 1), "acme", 1000))).GetGrant()
		if g.GetStartMilli() != 2000 {
			t.Fatalf("on=%v: first chunk %d milli, want the floor, 2000", on, g.GetStartMilli())
		}
		for i, tc := range []struct {
			rate    int64
			level   *int64
			want    int64 // top-up with the switch on; off, always 2000
			because string
		}{
			{0, lv(2000), 0, "holds the floor, needs nothing"},
			{0, lv(5000), 0, "holds more than the floor"},
			{0, lv(1000), 1000, "holds half the floor"},
			{0, lv(1500), 1000, "holds 1.5 units of 2: the rest, in whole units"},
			{8000, lv(2000), 2000, "needs 2 units over two intervals: the rate's ask"},
			{0, nil, 2000, "says nothing of its level"},
			{0, lv(-1), 2000, "a negative level"},
			{0, lv(lease.MaxCapacityMilli + 1), 2000, "a level above any chunk"},
		} {
			at := sec/10 + int64(i+1)*sec/20
			g := keyLeaseOf(t, h.batch(at, wRenewLevel(caller("a", 1, uint64(i+2)), g.GetLeaseId(), tc.rate, tc.level))).GetGrant()
			want := int64(2000)
			if on {
				want = tc.want
			}
			if g.GetTopUpMilli() != want {
				t.Errorf("on=%v: a chunk that %s (rate %d, level %v): topped up by %d, want %d", on, tc.because, tc.rate, tc.level, g.GetTopUpMilli(), want)
			}
		}
	}
}

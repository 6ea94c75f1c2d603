package fsm

import (
	"testing"
	"time"

	"github.com/ration-dev/ration/api"
)

// renewDemand renews id on acme, acknowledging acked, reporting demand
// (rate milli-tokens/s, burst milli-tokens).
func renewDemand(c *api.Caller, id, acked uint64, rate, burst int64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{
		{Key: tenant("acme"), LeaseId: id, Demand: &api.Demand{RateMilliPerSec: rate, BurstMilli: burst}, AckedVersion: acked},
	}}}}
}

// TestQuietAckWaitsForItsSwitch: with FeatureQuietAck a renewal that cuts
// a lease's terms by at most r/32 of rate and B/32 of cap (here 312
// milli-tokens/s and 625 milli-tokens) asks for no early acknowledgement;
// a larger cut asks, as does any cut with the switch off, as a server
// that predates it (docs/design.md §3.2, "Early renewal").
func TestQuietAckWaitsForItsSwitch(t *testing.T) {
	normal := (5 * sec) / 3 // the harness policy's renew_after
	for _, on := range []bool{false, true} {
		h := newHarnessAt(t, 0)
		if on {
			h.enableFeatures(BaselineFeatures | FeatureQuietAck)
		}
		if on != (h.f.Features()&FeatureQuietAck != 0) {
			t.Fatalf("features %#x", h.f.Features())
		}
		g := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
		if g.GetRateMilliPerSec() != 10_000 || g.GetCapMilli() != 20_000 {
			t.Fatalf("first grant %v", g)
		}
		for i, tc := range []struct {
			rate, burst int64
			bigCut      bool // the cut is worth an early acknowledgement
			because     string
		}{
			{9_800, 20_000, false, "rate cut by 200 milli-tokens/s"},
			{9_000, 20_000, true, "rate cut by 800"},
			{9_000, 19_500, false, "cap cut by 500"},
			{9_000, 18_000, true, "cap cut by 1500"},
			{9_000, 18_000, false, "no cut"},
			{9_690, 18_000, false, "a raise"},
		} {
			prev := g
			g = grantOf(t, h.batch(sec+int64(i+1)*sec/10, renewDemand(caller("a", 1, uint64(i+2)), g.GetLeaseId(), g.GetVersion(), tc.rate, tc.burst)))
			if g.GetRateMilliPerSec() != tc.rate || g.GetCapMilli() != tc.burst {
				t.Fatalf("on=%v: renewal %d: %v, want rate %d cap %d", on, i, g, tc.rate, tc.burst)
			}
			cut := g.GetRateMilliPerSec() < prev.GetRateMilliPerSec() || g.GetCapMilli() < prev.GetCapMilli()
			want := normal
			if tc.bigCut || !on && cut {
				want = MinEarlyRenewNanos
			}
			if got := g.GetRenewAfterNanos(); got != want {
				t.Errorf("on=%v: a renewal whose %s: renew after %v, want %v", on, tc.because, time.Duration(got), time.Duration(want))
			}
		}
	}
}

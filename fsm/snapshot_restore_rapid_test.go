package fsm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// Random histories with every command kind (renewals acknowledging
// versions and reporting clamps, the acknowledgements and return-clamped
// switches turned on at random); after every
// entry the state must snapshot, restore, and continue identically, and
// every ledger's invariants hold (Restore checks them).
// REVIEW_CUT=0 excludes budget cuts (finding 2) to look for other problems.
func TestReviewRandomSnapshotRestore(t *testing.T) {
	allowCut := !testing.Short()
	rapid.Check(t, func(rt *rapid.T) {
		h := newHarness(t)
		h.applyYAML(0, perTenantV1)
		var at int64
		leaseIDs := map[string]uint64{}
		versions := map[string]uint64{}
		seqs := map[string]uint64{}
		incs := map[string]uint64{"a": 1, "b": 1, "c": 1}
		n := rapid.IntRange(1, 80).Draw(rt, "n")
		for i := 0; i < n; i++ {
			at += rapid.Int64Range(0, 2*sec).Draw(rt, "dt")
			cl := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "client")
			tn := rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "tenant")
			seqs[cl]++
			c := caller(cl, incs[cl], seqs[cl])
			dem := &api.Demand{RateMilliPerSec: rapid.Int64Range(0, 20_000).Draw(rt, "dr"), BurstMilli: rapid.Int64Range(0, 40_000).Draw(rt, "db")}
			var ct CommandType = CmdLeaseBatch
			var msg proto.Message
			switch rapid.IntRange(0, 8).Draw(rt, "op") {
			case 0, 1:
				msg = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: c, Keys: []*api.AcquireKey{{Key: tenant(tn), Demand: dem}}}}}}}
			case 2, 3:
				// Acknowledging the version last granted, an older one, or
				// one never granted.
				ack := versions[cl+tn] - min(versions[cl+tn], rapid.Uint64Range(0, 2).Draw(rt, "ackBack"))
				if rapid.IntRange(0, 9).Draw(rt, "ackFuture") == 0 {
					ack += 5
				}
				// A clamp report: none, a plausible one, or garbage (rule i
				// bounds it; a negative one is refused while the switch is on).
				clamped := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, 40_000), rapid.Int64Range(-1, 1<<62)).Draw(rt, "clamped")
				msg = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{{Key: tenant(tn), LeaseId: leaseIDs[cl+tn], Demand: dem, AckedVersion: ack, ClampedMilli: clamped}}}}}}}
			case 4:
				msg = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{{Key: tenant(tn), LeaseId: leaseIDs[cl+tn], UnspentMilli: rapid.Int64Range(0, 30_000).Draw(rt, "u")}}}}}}}
			case 5:
				ct = CmdExpire
				msg = &api.ExpireCommand{ClientRetentionNanos: 3 * sec, ExpireThroughNanos: max(1, at-rapid.Int64Range(0, sec).Draw(rt, "margin"))}
			case 6:
				incs[cl]++
				seqs[cl] = 0
				continue
			case 7:
				if !allowCut {
					continue
				}
				rate := rapid.IntRange(5, 20).Draw(rt, "rate")
				h.applyYAML(at, strings.Replace(perTenantV1, "rate: 10", fmt.Sprintf("rate: %d", rate), 1))
				continue
			case 8:
				ct = CmdSetFeatures
				msg = &api.SetFeaturesCommand{Features: rapid.SampledFrom([]uint64{FeatureAcks, FeatureAcks | FeatureReturnClamped, KnownFeatures}).Draw(rt, "features")}
			}
			r := h.apply(ct, at, msg)
			for _, op := range r.Ops {
				for _, kl := range op.Lease.GetLeases() {
					if g := kl.GetGrant(); g != nil {
						leaseIDs[cl+strings.TrimPrefix(g.GetCanonicalKey(), "")] = g.GetLeaseId()
						versions[cl+g.GetCanonicalKey()] = g.GetVersion()
					}
				}
			}
			snap := snapshotBytes(t, h.f)
			g := New(nil)
			stale := false
			for _, ks := range h.f.st.keys {
				for _, kl := range ks.all() {
					for _, le := range kl.ledger.Leases() {
						if le.Current.ExpiresNanos <= kl.ledger.NowNanos() {
							stale = true
						}
					}
				}
			}
			if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
				rt.Fatalf("step %d: restore (stale leases present: %v): %v", i, stale, err)
			}
			if !bytes.Equal(snap, snapshotBytes(t, g)) {
				rt.Fatalf("step %d: restore not identical", i)
			}
		}
	})
}

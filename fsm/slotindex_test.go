package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// checkSlotIndex compares the slot indexes with ones derived from the slot
// keys: each key in exactly one of idx (holding leases, due at its
// earliest expiry) and idle (due at its hold's end), with its holders.
func checkSlotIndex(s *state) error {
	n := 0
	for pn, keys := range s.slots.keys {
		for ck, l := range keys {
			n++
			st := l.State()
			it, idle := s.slots.idx.get(pn, ck), s.slots.idle.get(pn, ck)
			if len(st.Leases) == 0 {
				if it != nil || idle == nil || idle.l != l || idle.due != st.HoldAllUntilNanos || idle.pos < 0 {
					return fmt.Errorf("idle slot key %s/%s indexed as %+v, %+v", pn, ck, it, idle)
				}
				continue
			}
			due, _ := l.NextExpiry()
			if idle != nil || it == nil || it.l != l || it.due != due || it.pos < 0 {
				return fmt.Errorf("slot key %s/%s indexed as %+v, %+v", pn, ck, it, idle)
			}
			var holders []string
			for _, le := range st.Leases {
				if !slices.Contains(holders, le.ClientID) {
					holders = append(holders, le.ClientID)
				}
				if _, ok := s.slots.idx.byClient[le.ClientID][it]; !ok {
					return fmt.Errorf("slot key %s/%s: holder %s not indexed", pn, ck, le.ClientID)
				}
			}
			if !slices.Equal(holders, it.clients) {
				return fmt.Errorf("slot key %s/%s: holders %v, indexed %v", pn, ck, holders, it.clients)
			}
		}
	}
	if len(s.slots.idx.items)+len(s.slots.idle.items) != n || len(s.slots.idx.due)+len(s.slots.idle.due) != n {
		return fmt.Errorf("%d slot keys, %d+%d indexed", n, len(s.slots.idx.items), len(s.slots.idle.items))
	}
	for c, its := range s.slots.idx.byClient {
		for it := range its {
			if !slices.Contains(it.clients, c) || s.slots.idx.get(it.name, it.key) != it {
				return fmt.Errorf("stale holder %s of %s/%s", c, it.name, it.key)
			}
		}
	}
	return nil
}

// TestSlotIndexMatchesScan: the same random history (acquires, renewals,
// releases on up to six keys, expiries with and without a margin, new
// incarnations, limit and keying changes, restores) on an FSM whose slot
// expiry and revocation go through the index and on one that scans every
// key: after every entry both have the same snapshot, listing and
// NextDue, and the index is the one derived from the keys.
func TestSlotIndexMatchesScan(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		hs := []*harness{slotsOnHarness(t, 0, "4"), slotsOnHarness(t, 0, "4")}
		hs[1].f.st.slots.scanRef = true
		held := map[string][]uint64{}
		incs := map[string]uint64{"a": 1, "b": 1, "c": 1}
		seqs := map[string]uint64{}
		at := sec
		for step := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at += rapid.Int64Range(0, 3000).Draw(rt, "dt") * 1_000_000
			who := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "who")
			tn := rapid.SampledFrom([]string{"t1", "t2", "t3", "t4", "t5", "t6"}).Draw(rt, "tenant")
			seqs[who]++
			c := caller(who, incs[who], seqs[who])
			var ct CommandType
			var results []*Result
			apply := func(ct2 CommandType, m proto.Message) {
				ct = ct2
				results = results[:0]
				for _, h := range hs {
					results = append(results, h.apply(ct2, at, m))
				}
			}
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); op {
			case 0, 1, 2:
				apply(CmdLeaseBatch, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{sAcquire(c, tn, rapid.Int64Range(0, 5).Draw(rt, "want"))}})
				if g := results[0].Ops[0].Lease.GetLeases()[0].GetGrant(); g != nil {
					held[who+"/"+tn] = append(held[who+"/"+tn], g.GetLeaseId())
				}
			case 3, 4:
				id := uint64(0)
				if ids := held[who+"/"+tn]; len(ids) > 0 {
					id = ids[len(ids)-1]
				}
				apply(CmdLeaseBatch, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{sRenew(c, tn, id, rapid.Int64Range(0, 5).Draw(rt, "want"), rapid.Uint64Range(0, 3).Draw(rt, "acked"))}})
			case 5:
				id := uint64(0)
				if ids := held[who+"/"+tn]; len(ids) > 0 {
					id = ids[len(ids)-1]
				}
				apply(CmdLeaseBatch, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{sRelease(c, tn, id)}})
			case 6:
				cmd := &api.ExpireCommand{}
				if rapid.Bool().Draw(rt, "margin") {
					cmd.ExpireThroughNanos = at - rapid.Int64Range(0, 2000).Draw(rt, "margin ms")*1_000_000
				}
				apply(CmdExpire, cmd)
				if results[0].Expired != results[1].Expired {
					rt.Fatalf("step %d: expired %d, the scan %d", step, results[0].Expired, results[1].Expired)
				}
			case 7:
				incs[who]++
				seqs[who] = 0
			case 8:
				limit := rapid.SampledFrom([]string{"2", "4", "6"}).Draw(rt, "limit")
				cmd := slotPolicies(limit, "")
				if rapid.IntRange(0, 4).Draw(rt, "rekey") == 0 {
					cmd.Policies[0].Key = []string{"tenant", "region"}
				}
				cmd.Policies[0].MaxKeys = 5
				apply(CmdApplyPolicies, cmd)
			case 9:
				// Every reachable state restores, on both alike (a slot key
				// whose holder has not acknowledged a lowered limit's cut
				// included: lease.TestSlotUnackedCutPastOvercommitRestores).
				var errs []string
				for _, h := range hs {
					snap := snapshotBytes(t, h.f)
					ref := h.f.st.slots.scanRef
					err := h.f.Restore(nopCloser{bytes.NewReader(snap)})
					errs = append(errs, fmt.Sprint(err))
					h.f.st.slots.scanRef = ref
				}
				if errs[0] != "<nil>" || errs[1] != "<nil>" {
					rt.Fatalf("step %d: restore: %s, the scan's %s", step, errs[0], errs[1])
				}
			}
			if err := checkSlotIndex(hs[0].f.st); err != nil {
				rt.Fatalf("step %d (%s): %v", step, ct, err)
			}
			if a, b := snapshotBytes(t, hs[0].f), snapshotBytes(t, hs[1].f); !bytes.Equal(a, b) {
				rt.Fatalf("step %d (%s): the indexed state differs from the scan's", step, ct)
			}
			la, _ := protojson.Marshal(hs[0].f.Leases("", "", at))
			lb, _ := protojson.Marshal(hs[1].f.Leases("", "", at))
			if !bytes.Equal(la, lb) {
				rt.Fatalf("step %d (%s): listing\n%s\nthe scan's\n%s", step, ct, la, lb)
			}
			da, oka := hs[0].f.NextDue()
			db, okb := hs[1].f.NextDue()
			if da != db || oka != okb {
				rt.Fatalf("step %d (%s): NextDue %d %v, the scan's %d %v", step, ct, da, oka, db, okb)
			}
		}
	})
}

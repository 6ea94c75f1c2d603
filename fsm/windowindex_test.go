package fsm

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
	"pgregory.net/rapid"
)

// windowScanReference is the expire of window keys before the index: every
// key visited in sorted order, the due ones expired and collected.
func windowScanReference(s *state, t int64, res *Result) {
	for _, pn := range sortedKeys(s.win.keys) {
		for _, ck := range sortedKeys(s.win.keys[pn]) {
			if l := s.win.keys[pn][ck]; s.windowIsDue(t, l) {
				s.windowExpireKey(t, pn, ck, l, res)
			}
		}
	}
}

// windowIsDue is the index's rule (windowDueOf) for the reference scan.
func (s *state) windowIsDue(t int64, l *lease.WindowLedger) bool {
	return s.windowDueOf(l) <= t
}

// windowScanNextDue is NextDue's window part by a scan.
func windowScanNextDue(s *state) (int64, bool) {
	due, ok := int64(math.MaxInt64), false
	for _, keys := range s.win.keys {
		for _, l := range keys {
			due, ok = min(due, s.windowDueOf(l)), true
		}
	}
	if !ok {
		return 0, false
	}
	return due, ok
}

// windowIndexHistories: the same random history (grants, renewals and
// releases on up to five keys of a max_keys=3 policy, expiries, re-syncs
// of window time, slews, new incarnations, restores, changes of the
// window's definition) on an FSM whose window
// expiry goes through the index and on one that scans every key: after
// every entry both must have the same snapshot, and the index's earliest
// due time must be the scan's.
func windowIndexHistories(t *testing.T, broken fault) func(*rapid.T) {
	return windowIndexHistoriesDebt(t, broken, false)
}

// windowIndexHistoriesDebt is windowIndexHistories, with debt: FeatureDebt
// on, the policy's max_debt 5, and releases reporting debt.
func windowIndexHistoriesDebt(t *testing.T, broken fault, debt bool) func(*rapid.T) {
	return func(rt *rapid.T) {
		hs := []*harness{windowsOnHarness(t, 0), windowsOnHarness(t, 0)}
		extra := ""
		if debt {
			extra = "    max_debt: 5\n"
			for _, h := range hs {
				h.enableFeatures(KnownFeatures)
				if r := h.apply(CmdApplyPolicies, 0, windowPolicies("10", extra)); r.Err != nil {
					rt.Fatal(r.Err)
				}
			}
		}
		hs[0].f.st.fault = broken
		hs[1].f.st.win.scanRef = windowScanReference
		leases := map[string]uint64{}
		seqs := map[string]uint64{}
		inc := map[string]uint64{"a": 1, "b": 1, "c": 1}
		at := int64(0)
		for step := range rapid.IntRange(1, 80).Draw(rt, "steps") {
			at += rapid.Int64Range(0, 900).Draw(rt, "dt") * 1_000_000
			who := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "who")
			tenant := rapid.SampledFrom([]string{"t1", "t2", "t3", "t4", "t5"}).Draw(rt, "tenant")
			seqs[who]++
			c := caller(who, inc[who], seqs[who])
			op := rapid.IntRange(0, 9).Draw(rt, "op")
			def := rapid.SampledFrom([]string{"window: 2s", "window: 6s"}).Draw(rt, "definition")
			var cmd *api.LeaseBatchCommand
			switch op {
			case 0, 1:
				cmd = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{wAcquire(c, tenant, rapid.Int64Range(0, 20_000).Draw(rt, "rate"))}}
			case 2:
				cmd = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{wRenew(c, tenant, leases[who+tenant], 5000)}}
			case 3:
				rel := wRelease(c, tenant, leases[who+tenant], rapid.Int64Range(0, 3000).Draw(rt, "unspent"))
				if debt {
					rel.GetRelease().Keys[0].DebtMilli = rapid.Int64Range(0, 4000).Draw(rt, "debt")
				}
				cmd = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{rel}}
			case 4:
				inc[who]++
				seqs[who] = 1
				cmd = &api.LeaseBatchCommand{Ops: []*api.LeaseOp{wAcquire(caller(who, inc[who], 1), tenant, 1000)}}
			}
			jump := rapid.Int64Range(0, 3000).Draw(rt, "jump") * 1_000_000
			var results [2]string
			for i, h := range hs {
				switch {
				case cmd != nil:
					for _, o := range h.batch(at, cmd.Ops...) {
						if kl := o.Lease.GetLeases(); i == 0 && len(kl) > 0 && kl[0].GetGrant() != nil {
							leases[who+tenant] = kl[0].GetGrant().GetLeaseId()
						}
					}
				case op == 5:
					r := h.apply(CmdExpire, at, &api.ExpireCommand{})
					results[i] = fmt.Sprint(r.Err, r.ExpiredByPolicy)
				case op == 6:
					h.apply(CmdWindowClock, at, &api.WindowClockCommand{WallUnixNanos: wallAtSwitch + at + jump})
				case op == 9:
					// A change of the window's definition (keys keep the
					// windows they leave: lease.WindowLedgerState.Spent).
					h.apply(CmdApplyPolicies, at, windowPolicyAt("10", def+"\n"+extra))
				case op == 8:
					// A leader whose wall clock is behind window time: a slew.
					h.apply(CmdWindowClock, at, &api.WindowClockCommand{WallUnixNanos: hs[0].f.st.windowTime(at) - jump, Slew: true})
				case op == 7:
					if err := h.f.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
						rt.Fatal(err)
					}
					h.f.st.win.scanRef = hs[1].f.st.win.scanRef
					if i == 0 {
						h.f.st.win.scanRef = nil
						h.f.st.fault = broken
					}
				}
			}
			if results[0] != results[1] {
				rt.Fatalf("step %d: expire results %s (index), %s (scan)", step, results[0], results[1])
			}
			if a, b := snapshotBytes(t, hs[0].f), snapshotBytes(t, hs[1].f); !bytes.Equal(a, b) {
				rt.Fatalf("step %d (op %d): the indexed and the scanning FSM differ", step, op)
			}
			d0, ok0 := hs[0].f.st.windowNextDue()
			d1, ok1 := windowScanNextDue(hs[1].f.st)
			if d0 != d1 || ok0 != ok1 {
				rt.Fatalf("step %d: the window next due times differ: %d %v (index), %d %v (scan)", step, d0, ok0, d1, ok1)
			}
		}
	}
}

func TestWindowIndexMatchesScan(t *testing.T) {
	rapid.Check(t, windowIndexHistories(t, faultNone))
}

// TestWindowIndexMatchesScanWithDebt: the same with debt on fixed windows
// (docs/design.md §8.6): a key whose next window starts in debt is not
// idle, and the index must agree with the scan on when it is.
func TestWindowIndexMatchesScanWithDebt(t *testing.T) {
	rapid.Check(t, windowIndexHistoriesDebt(t, faultNone, true))
}

// BenchmarkWindowExpire: an expire entry when nothing is due, with n live
// window keys, through the index and through the scan it replaced.
func BenchmarkWindowExpire(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		for _, scan := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/scan=%v", n, scan), func(b *testing.B) {
				h := windowsOnHarness(b, 0)
				cmd := windowPolicies("10", "")
				cmd.Policies[0].MaxKeys = int64(n)
				cmd.Policies[0].WindowNanos = int64(3600 * sec)
				if r := h.apply(CmdApplyPolicies, 0, cmd); r.Err != nil {
					b.Fatal(r.Err)
				}
				for i := range n {
					h.batch(sec, wAcquire(caller(fmt.Sprint("c", i), 1, 1), fmt.Sprint("t", i), 1000))
				}
				if scan {
					h.f.st.win.scanRef = windowScanReference
				}
				at := sec
				b.ResetTimer()
				for range b.N {
					at += 1000
					h.apply(CmdExpire, at, &api.ExpireCommand{})
				}
			})
		}
	}
}

// TestWindowRevokeVisitsOnlyHolders: a new incarnation's revoke visits
// only the window keys its client holds chunks on (the holder index), and
// the index forgets a client once its keys are collected.
func TestWindowRevokeVisitsOnlyHolders(t *testing.T) {
	h := windowsOnHarness(t, 0) // max_keys 3
	for i, k := range []string{"t1", "t2"} {
		keyLeaseOf(t, h.batch(sec, wAcquire(caller("other", 1, uint64(i+1)), k, 1000)))
	}
	for i, k := range []string{"t2", "t3"} {
		keyLeaseOf(t, h.batch(sec, wAcquire(caller("a", 1, uint64(i+1)), k, 1000)))
	}
	keys := func(c string) (out []string) {
		for _, it := range h.f.st.windowHeldBy(c) {
			out = append(out, it.key)
		}
		return out
	}
	if got := fmt.Sprint(keys("a"), keys("other")); got != "[t2 t3] [t1 t2]" {
		t.Fatalf("holders: a on %v, other on %v", keys("a"), keys("other"))
	}
	// a's next incarnation: its chunks are retired (replaced), other's not.
	keyLeaseOf(t, h.batch(sec+1, wAcquire(caller("a", 2, 1), "t3", 1000)))
	for _, k := range []string{"t1", "t2", "t3"} {
		for _, le := range h.f.st.win.keys["daily"][k].State().Leases {
			if le.Replaced != (le.ClientID == "a" && le.Incarnation == 1) {
				t.Fatalf("key %s: chunk %d of %s/%d replaced=%v", k, le.ID, le.ClientID, le.Incarnation, le.Replaced)
			}
		}
	}
	// Once every chunk expired and the keys were collected, the index
	// forgets the clients.
	h.apply(CmdExpire, 10*24*3600*sec, &api.ExpireCommand{})
	if len(h.f.st.win.keys) != 0 || len(h.f.st.win.idx.byClient) != 0 {
		t.Fatalf("after every key was collected: %d policies with keys, %d clients in the holder index", len(h.f.st.win.keys), len(h.f.st.win.idx.byClient))
	}
}

// BenchmarkWindowRevoke: a new incarnation's first request (which revokes
// its client's older chunks) with n live window keys held by other
// clients, through the holder index and through the scan it replaced.
func BenchmarkWindowRevoke(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		for _, scan := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/scan=%v", n, scan), func(b *testing.B) {
				h := windowsOnHarness(b, 0)
				cmd := windowPolicies("10", "")
				cmd.Policies[0].MaxKeys = int64(n + 1)
				cmd.Policies[0].WindowNanos = int64(3600 * sec)
				if r := h.apply(CmdApplyPolicies, 0, cmd); r.Err != nil {
					b.Fatal(r.Err)
				}
				for i := range n {
					h.batch(sec, wAcquire(caller(fmt.Sprint("c", i), 1, 1), fmt.Sprint("t", i), 1000))
				}
				if scan {
					h.f.st.win.scanRef = windowScanReference
				}
				at := sec
				b.ResetTimer()
				for i := range b.N {
					at += 1000
					h.batch(at, wAcquire(caller("restarting", uint64(i+1), 1), "mine", 1000))
				}
			})
		}
	}
}

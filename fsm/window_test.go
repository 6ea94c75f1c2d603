package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// wallAtSwitch is the leader's wall clock in the entry that turns leased
// windows on in these tests: window time = cluster time + wallAtSwitch −
// the entry's cluster time.
const wallAtSwitch = int64(1_767_225_600) * sec // 2026-01-01 00:00 UTC

func windowPolicies(limit string, extra string) *api.ApplyPoliciesCommand {
	file, err := policy.Parse(strings.NewReader(`
policies:
  - name: daily
    algorithm: fixed-window
    limit: ` + limit + `
    window: 2s
    key: [tenant]
    max_keys: 3
` + extra))
	if err != nil {
		panic(err)
	}
	cmd := &api.ApplyPoliciesCommand{}
	for _, p := range file.Policies {
		cmd.Policies = append(cmd.Policies, p.ToProto())
	}
	return cmd
}

func windowsOnHarness(t testing.TB, at int64) *harness {
	h := newHarnessAt(t, at)
	if r := h.apply(CmdApplyPolicies, at, windowPolicies("10", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	return h
}

func wantDemand(rate int64) *api.Demand {
	return &api.Demand{RateMilliPerSec: rate, MaxCostMilli: 1000}
}

func wAcquire(c *api.Caller, tenantName string, rate int64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: c, Keys: []*api.AcquireKey{
		{Key: &api.Key{Policy: "daily", Attributes: map[string]string{"tenant": tenantName}}, Demand: wantDemand(rate)}}}}}
}

func wRenew(c *api.Caller, tenantName string, id uint64, rate int64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{
		{Key: &api.Key{Policy: "daily", Attributes: map[string]string{"tenant": tenantName}}, LeaseId: id, Demand: wantDemand(rate)}}}}}
}

func wRelease(c *api.Caller, tenantName string, id uint64, unspent int64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{
		{Key: &api.Key{Policy: "daily", Attributes: map[string]string{"tenant": tenantName}}, LeaseId: id, UnspentMilli: unspent}}}}}
}

func keyLeaseOf(t testing.TB, ops []OpResult) *api.KeyLease {
	t.Helper()
	if ops[0].Err != nil {
		t.Fatal(ops[0].Err)
	}
	return ops[0].Lease.GetLeases()[0]
}

func TestWindowsLease(t *testing.T) {
	h := newHarnessAt(t, 2*sec)
	monthly := windowPolicies("10", "  - name: monthly\n    algorithm: fixed-window\n    limit: 5\n    period: month\n    timezone: Europe/Paris\n")
	if r := h.apply(CmdApplyPolicies, 2*sec, monthly); r.Err != nil {
		t.Fatal(r.Err)
	}
	kl := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 2), "acme", 1000)))
	g := kl.GetGrant()
	if g == nil || g.GetStartMilli() < 1000 || g.GetWindowLimitMilli() != 10_000 || g.GetWindowNanos() != 2*sec || g.GetRateMilliPerSec() != 0 {
		t.Fatalf("switch on: %v", kl)
	}
	// The epoch: window time 2026-01-01 00:00:00 at cluster time 2 s, an
	// even second, so the window ends 2 s later.
	if g.GetWindowResetNanos() != 2*sec || g.GetTtlNanos() != 2*sec {
		t.Fatalf("reset in %d, ttl %d; want 2 s", g.GetWindowResetNanos(), g.GetTtlNanos())
	}
}

// TestWindowCountSurvivesSnapshotAndPolicyChange: a key's count is in the
// snapshot (a restarted server grants no more than one that did not), and
// re-applying the policy with a lower or higher limit mid-window keeps it.
func TestWindowCountSurvivesSnapshotAndPolicyChange(t *testing.T) {
	for _, broken := range controls(false, true) {
		h := windowsOnHarness(t, 0)
		if broken {
			h.f.st.fault = faultWindowSnapshotDropsKeys
		}
		at := 2 * sec // window [2 s, 4 s) of cluster time
		g := keyLeaseOf(t, h.batch(at, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
		if g.GetStartMilli() != 10_000 || g.GetWindowRemainingMilli() != 0 {
			t.Fatalf("first chunk %v", g)
		}
		// Restart: a new FSM restored from the snapshot.
		snap := snapshotBytes(t, h.f)
		h2 := &harness{t: t, f: New(nil), index: h.index}
		if err := h2.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
			t.Fatal(err)
		}
		_, hash1 := h.f.StateHash()
		_, hash2 := h2.f.StateHash()
		g2 := keyLeaseOf(t, h2.batch(at+sec/2, wAcquire(caller("b", 1, 1), "acme", 100_000))).GetGrant()
		if broken {
			if g2.GetStartMilli() == 0 {
				t.Fatal("the control (snapshots drop window keys) was not caught: the restored server granted nothing")
			}
			continue
		}
		if hash1 != hash2 {
			t.Fatalf("state hash %s after restore, %s before", hash2, hash1)
		}
		if g2.GetStartMilli() != 0 {
			t.Fatalf("the restored server granted %d more in a full window", g2.GetStartMilli())
		}
		// A policy change mid-window: limit 6 (below the count), then 15.
		for _, tc := range []struct {
			limit string
			want  int64
		}{{"6", 0}, {"15", 5000}} {
			if r := h2.apply(CmdApplyPolicies, at+sec/2, windowPolicies(tc.limit, "")); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		g3 := keyLeaseOf(t, h2.batch(at+sec/2+1, wAcquire(caller("c", 1, 1), "acme", 100_000))).GetGrant()
		if g3.GetStartMilli() != 5000 {
			t.Fatalf("after raising the limit to 15: chunk %d, want 5000 (the count 10000 kept)", g3.GetStartMilli())
		}
		// A key change mid-window is refused while counts are live.
		if r := h2.apply(CmdApplyPolicies, at+sec, windowPolicies("15", "    # re-keyed\n")); r.Err != nil {
			t.Fatal(r.Err)
		}
		rekey := windowPolicies("15", "")
		rekey.Policies[0].Key = []string{"tenant", "route"}
		if r := h2.apply(CmdApplyPolicies, at+sec, rekey); code(r.Err) != codes.FailedPrecondition {
			t.Fatalf("a re-key mid-window: %v", r.Err)
		}
		// The next window starts from nothing; a release from the old one
		// returns nothing to it.
		g4 := keyLeaseOf(t, h2.batch(at+2*sec, wAcquire(caller("d", 1, 1), "acme", 100_000))).GetGrant()
		if g4.GetStartMilli() != 15_000 {
			t.Fatalf("next window chunk %d", g4.GetStartMilli())
		}
		rel := h2.batch(at+2*sec, wRelease(caller("c", 1, 2), "acme", g3.GetLeaseId(), 5000))
		if rel[0].Release.GetResults()[0].GetCreditedMilli() != 0 {
			t.Fatalf("an old window's release credited %v", rel[0].Release)
		}
		// Now the re-key is taken (the old counts are over... except d's):
		if r := h2.apply(CmdApplyPolicies, at+5*sec, rekey); r.Err != nil {
			t.Fatalf("a re-key once the windows ended: %v", r.Err)
		}
	}
}

// windowHistories: random acquires, renewals, releases, expiries and
// snapshot restores (a restart's) of one window key by three clients that
// spend all they are granted at once, with forward re-syncs of window time
// (elections), an operator's restores (rule j) of snapshots saved earlier
// in the history, and changes of the window's definition (2 s and 6 s,
// back and forth, as month -> 1s -> month); window time must never go
// back, per window of each definition what they were granted must stay
// within the limit, and replaying the log (the operator's restores as
// the same prepared bytes) on a second FSM must give the same state hash.
func windowHistories(t *testing.T, broken fault) func(*rapid.T) {
	return func(rt *rapid.T) {
		h := windowsOnHarness(t, 0)
		h.f.st.fault = broken
		type entry struct {
			ct  CommandType
			at  int64
			msg proto.Message
			// restored: an operator's restore of these prepared bytes.
			restored []byte
		}
		var log []entry
		do := func(ct CommandType, at int64, msg proto.Message) *Result {
			log = append(log, entry{ct: ct, at: at, msg: msg})
			return h.apply(ct, at, msg)
		}
		var saved [][]byte
		wmax := int64(0)
		bat := func(at int64, op *api.LeaseOp) *api.KeyLease {
			r := do(CmdLeaseBatch, at, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{op}})
			if r.Ops[0].Err != nil {
				rt.Fatal(r.Ops[0].Err)
			}
			if r.Ops[0].Lease == nil {
				return nil
			}
			return r.Ops[0].Lease.GetLeases()[0]
		}
		leases := map[string]uint64{}
		seqs := map[string]uint64{}
		spent := map[[2]int64]int64{}
		at := int64(0)
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at += rapid.Int64Range(0, 700).Draw(rt, "dt") * 1_000_000
			who := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "who")
			seqs[who]++
			c := caller(who, 1, seqs[who])
			var kl *api.KeyLease
			op := rapid.IntRange(0, 7).Draw(rt, "op")
			if broken == faultWindowForgetSpent && rapid.IntRange(0, 3).Draw(rt, "bias") == 0 {
				op = 7 // the control's targeted search: more definition changes
			}
			switch op {
			case 5:
				jump := rapid.SampledFrom([]int64{1, 300, 2500, 4000}).Draw(rt, "jump") * 1_000_000
				do(CmdWindowClock, at, &api.WindowClockCommand{WallUnixNanos: h.f.st.windowTime(max(at, h.f.st.clusterTime)) + jump})
			case 6:
				if len(saved) == 0 || rapid.Bool().Draw(rt, "save") {
					saved = append(saved, snapshotBytes(t, h.f))
					break
				}
				snap := rapid.SampledFrom(saved).Draw(rt, "snapshot")
				prepared, err := PrepareRestore(snap, baseAt(h.f, max(at, h.f.st.clusterTime)))
				if err != nil {
					rt.Fatal(err)
				}
				if err := h.f.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
					rt.Fatal(err)
				}
				log = append(log, entry{restored: prepared})
			case 7:
				win := rapid.SampledFrom([]string{"window: 2s", "window: 6s"}).Draw(rt, "definition")
				if r := do(CmdApplyPolicies, at, windowPolicyAt("10", win)); r.Err != nil {
					rt.Fatal(r.Err)
				}
			case 0, 1:
				kl = bat(at, wAcquire(c, "acme", rapid.Int64Range(0, 20_000).Draw(rt, "rate")))
			case 2:
				if leases[who] != 0 {
					kl = bat(at, wRenew(c, "acme", leases[who], rapid.Int64Range(0, 20_000).Draw(rt, "rate")))
				}
			case 3:
				if leases[who] != 0 {
					// The holder spent everything at once: nothing unspent.
					bat(at, wRelease(c, "acme", leases[who], 0))
					leases[who] = 0
				}
			case 4:
				if rapid.Bool().Draw(rt, "restore") {
					snap := snapshotBytes(t, h.f)
					if err := h.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
						rt.Fatal(err)
					}
				} else {
					do(CmdExpire, at, &api.ExpireCommand{})
				}
			}
			w := h.f.st.windowTime(h.f.st.clusterTime)
			if w < wmax {
				rt.Fatalf("window time went back %v, to %d from %d", secs(wmax-w), w, wmax)
			}
			wmax = w
			if g := kl.GetGrant(); g != nil {
				leases[who] = g.GetLeaseId()
				// The grant's window, of the definition it was granted under.
				win := [2]int64{g.GetWindowNanos(), w + g.GetWindowResetNanos() - g.GetWindowNanos()}
				spent[win] += g.GetStartMilli() + g.GetTopUpMilli()
				if spent[win] > 10_000 {
					rt.Fatalf("window at %d of %v: %d milli-units granted and spent, more than its limit 10000", win[1], secs(win[0]), spent[win])
				}
			}
			if e := kl.GetError(); e != nil && !strings.Contains(e.GetMessage(), "lease") {
				rt.Fatalf("unexpected error %v", e)
			}
		}
		// Determinism: the same log on a server that never restored (the
		// control is about the bound: its restores lose state by design).
		if broken != faultNone {
			return
		}
		r := windowsOnHarness(t, 0)
		r.f.st.fault = broken
		for _, e := range log {
			if e.restored != nil {
				if err := r.f.Restore(nopCloser{bytes.NewReader(e.restored)}); err != nil {
					rt.Fatal(err)
				}
				continue
			}
			r.apply(e.ct, e.at, e.msg)
		}
		_, a := h.f.StateHash()
		_, b := r.f.StateHash()
		if a != b {
			rt.Fatalf("state hash %s, %s replaying the same log", a, b)
		}
	}
}

func TestWindowRandomHistories(t *testing.T) {
	rapid.Check(t, windowHistories(t, faultNone))
}

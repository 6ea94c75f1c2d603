package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

func slotPolicies(limit string, extra string) *api.ApplyPoliciesCommand {
	file, err := policy.Parse(strings.NewReader(`
policies:
  - name: inflight
    algorithm: concurrency
    limit: ` + limit + `
    max_duration: 2s
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

func slotsOnHarness(t testing.TB, at int64, limit string) *harness {
	h := newHarness(t)
	h.apply(CmdSetFeatures, at, &api.SetFeaturesCommand{Features: KnownFeatures, WallUnixNanos: wallAtSwitch})
	if r := h.apply(CmdApplyPolicies, at, slotPolicies(limit, "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	return h
}

func slotKey(tenantName string) *api.Key {
	return &api.Key{Policy: "inflight", Attributes: map[string]string{"tenant": tenantName}}
}

func sAcquire(c *api.Caller, tenantName string, want int64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: c, Keys: []*api.AcquireKey{
		{Key: slotKey(tenantName), Demand: &api.Demand{BurstMilli: want * 1000}}}}}}
}

func sRenew(c *api.Caller, tenantName string, id uint64, want int64, acked uint64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{
		{Key: slotKey(tenantName), LeaseId: id, Demand: &api.Demand{BurstMilli: want * 1000}, AckedVersion: acked}}}}}
}

func sRelease(c *api.Caller, tenantName string, id uint64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{
		{Key: slotKey(tenantName), LeaseId: id}}}}}
}

func TestSlotsLease(t *testing.T) {
	h := newHarness(t)
	if r := h.apply(CmdApplyPolicies, 2*sec, slotPolicies("4", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	g := keyLeaseOf(t, h.batch(2*sec, sAcquire(caller("a", 1, 1), "acme", 3))).GetGrant()
	if !g.GetSlotLease() || g.GetSlotCount() != 3 || g.GetCapMilli() != 3000 || g.GetSlotLimit() != 4 || g.GetSlotMaxDurationNanos() != 2*sec ||
		g.GetTtlNanos() != slotLeaseNanos || g.GetVersion() == 0 || g.GetRateMilliPerSec() != 0 {
		t.Fatalf("slot grant %v", g)
	}
	// A second holder gets what is left, never more.
	g2 := keyLeaseOf(t, h.batch(2*sec, sAcquire(caller("b", 1, 1), "acme", 5))).GetGrant()
	if g2.GetSlotCount() != 1 {
		t.Fatalf("second holder got %d slots, 1 free", g2.GetSlotCount())
	}
	// The same key twice in one request, a huge or negative demand, a
	// renewal of a lease that does not exist: errors, no panic.
	two := &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: caller("c", 1, 1), Keys: []*api.AcquireKey{
		{Key: slotKey("x"), Demand: &api.Demand{BurstMilli: 1000}}, {Key: slotKey("x"), Demand: &api.Demand{BurstMilli: 1000}}}}}}
	if ops := h.batch(3*sec, two); ops[0].Lease.GetLeases()[1].GetError() == nil {
		t.Fatalf("a key listed twice: %v", ops[0].Lease)
	}
	if kl := keyLeaseOf(t, h.batch(3*sec, sAcquire(caller("d", 1, 1), "y", 1<<40))); kl.GetGrant().GetSlotCount() != 4 {
		t.Fatalf("a huge demand: %v", kl)
	}
	if kl := keyLeaseOf(t, h.batch(3*sec, sRenew(caller("e", 1, 1), "acme", 99, 1, 0))); kl.GetError() == nil {
		t.Fatalf("renewing a lease that does not exist: %v", kl)
	}
	// A bad key (no tenant) is refused.
	bad := &api.LeaseOp{Op: &api.LeaseOp_Acquire{Acquire: &api.AcquireRequest{Caller: caller("f", 1, 1), Keys: []*api.AcquireKey{
		{Key: &api.Key{Policy: "inflight"}, Demand: &api.Demand{BurstMilli: 1000}}}}}}
	if kl := keyLeaseOf(t, h.batch(3*sec, bad)); kl.GetError() == nil {
		t.Fatalf("a key with no tenant: %v", kl)
	}
}

// TestSlotsSurviveSnapshotAndRestore: the slot keys are in the snapshot (a
// restarted server grants no slot a holder still runs), with equal state
// hashes; a snapshot with slot keys but not the switch is refused; an
// operator's restore holds every slot for a lease duration.
func TestSlotsSurviveSnapshotAndRestore(t *testing.T) {
	for _, broken := range controls(false, true) {
		h := slotsOnHarness(t, 0, "4")
		if broken {
			h.f.st.fault = faultSlotSnapshotDropsKeys
		}
		g := keyLeaseOf(t, h.batch(sec, sAcquire(caller("a", 1, 1), "acme", 4))).GetGrant()
		if g.GetSlotCount() != 4 {
			t.Fatalf("first lease %v", g)
		}
		snap := snapshotBytes(t, h.f)
		h2 := &harness{t: t, f: New(nil), index: h.index}
		if err := h2.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
			t.Fatal(err)
		}
		g2 := keyLeaseOf(t, h2.batch(2*sec, sAcquire(caller("b", 1, 1), "acme", 4))).GetGrant()
		if broken {
			if g2.GetSlotCount() == 0 {
				t.Fatal("the control (snapshots drop slot keys) was not caught: the restored server granted nothing")
			}
			continue
		}
		if g2.GetSlotCount() != 0 {
			t.Fatalf("the restored server granted %d slots a holder runs", g2.GetSlotCount())
		}
		_, hash1 := h.f.StateHash()
		h.batch(2*sec, sAcquire(caller("b", 1, 1), "acme", 4))
		_, hash1 = h.f.StateHash()
		_, hash2 := h2.f.StateHash()
		if hash1 != hash2 {
			t.Fatalf("state hash %s after restore, %s on the original", hash2, hash1)
		}
		// After a's release b gets them at its renewal.
		h2.batch(3*sec, sRelease(caller("a", 1, 2), "acme", g.GetLeaseId()))
		g3 := keyLeaseOf(t, h2.batch(3*sec, sRenew(caller("b", 1, 2), "acme", g2.GetLeaseId(), 4, g2.GetVersion()))).GetGrant()
		if g3.GetSlotCount() != 4 {
			t.Fatalf("after a's release b got %v", g3)
		}
		// An operator's restore: every slot held, the leases dropped.
		prepared, err := PrepareRestore(snapshotBytes(t, h2.f), RestoreBase{ClusterTime: 4 * sec})
		if err != nil {
			t.Fatal(err)
		}
		h3 := &harness{t: t, f: New(nil), index: h2.index}
		if err := h3.f.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
			t.Fatal(err)
		}
		if kl := keyLeaseOf(t, h3.batch(5*sec, sAcquire(caller("c", 1, 1), "acme", 1))); kl.GetGrant().GetSlotCount() != 0 {
			t.Fatalf("during the restore hold: %v", kl)
		}
		if kl := keyLeaseOf(t, h3.batch(5*sec, sAcquire(caller("c", 1, 2), "fresh", 1))); kl.GetGrant().GetSlotCount() != 0 {
			t.Fatalf("a key created during the restore hold: %v", kl)
		}
		if kl := keyLeaseOf(t, h3.batch(5*sec, sRenew(caller("b", 1, 3), "acme", g2.GetLeaseId(), 4, g3.GetVersion()))); kl.GetError() == nil {
			t.Fatalf("a restored lease was renewed: %v", kl)
		}
		if kl := keyLeaseOf(t, h3.batch(4*sec+slotLeaseNanos+RestoreHoldMarginNanos+1, sAcquire(caller("c", 1, 3), "acme", 1))); kl.GetGrant().GetSlotCount() != 1 {
			t.Fatalf("after the restore hold: %v", kl)
		}
		// Slot state without its switch is refused (as pre-0.1.0).
		h.f.st.features &^= FeatureConcurrency
		if err := New(nil).Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); !errors.Is(err, ErrPreBaseline) {
			t.Fatalf("slot state without the switch: %v", err)
		}
	}
}

// TestSlotPolicyChange: a lower limit applies at the next grant; a re-key
// is refused while leases are live and taken once they are gone.
func TestSlotPolicyChange(t *testing.T) {
	h := slotsOnHarness(t, 0, "4")
	g := keyLeaseOf(t, h.batch(sec, sAcquire(caller("a", 1, 1), "acme", 4))).GetGrant()
	if r := h.apply(CmdApplyPolicies, sec, slotPolicies("2", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	g2 := keyLeaseOf(t, h.batch(sec, sRenew(caller("a", 1, 2), "acme", g.GetLeaseId(), 4, g.GetVersion()))).GetGrant()
	if g2.GetSlotCount() != 2 || g2.GetSlotLimit() != 2 || !g2.GetSlotAckSoon() {
		t.Fatalf("after lowering the limit: %v", g2)
	}
	rekey := slotPolicies("2", "")
	rekey.Policies[0].Key = []string{"tenant", "route"}
	if r := h.apply(CmdApplyPolicies, 2*sec, rekey); code(r.Err) != codes.FailedPrecondition {
		t.Fatalf("a re-key with live slot leases: %v", r.Err)
	}
	h.batch(2*sec, sRelease(caller("a", 1, 3), "acme", g.GetLeaseId()))
	if r := h.apply(CmdApplyPolicies, 2*sec, rekey); r.Err != nil {
		t.Fatalf("a re-key once released: %v", r.Err)
	}
	if len(h.f.st.slots.keys["inflight"]) != 0 {
		t.Fatalf("old keys kept: %v", h.f.st.slots.keys)
	}
}

// slotHistories: random acquires, renewals, releases, expiries and
// snapshot restores of one concurrency key (N = 5) by three clients that
// run as many requests as they are granted, drop to a lowered count only
// at their next renewal (which then acknowledges it) and keep a replaced
// lease's requests until its expiry. At every step what they run must stay
// within N, the ledger's invariants must hold, and replaying the log on a
// second FSM must give the same state hash.
func slotHistories(t *testing.T, broken fault) func(*rapid.T) {
	return func(rt *rapid.T) {
		h := slotsOnHarness(t, 0, "5")
		h.f.st.fault = broken
		type entry struct {
			ct  CommandType
			at  int64
			msg proto.Message
		}
		var log []entry
		do := func(ct CommandType, at int64, msg proto.Message) *Result {
			log = append(log, entry{ct, at, msg})
			return h.apply(ct, at, msg)
		}
		bat := func(at int64, op *api.LeaseOp) *OpResult {
			r := do(CmdLeaseBatch, at, &api.LeaseBatchCommand{Ops: []*api.LeaseOp{op}})
			if r.Ops[0].Err != nil {
				rt.Fatal(r.Ops[0].Err)
			}
			return &r.Ops[0]
		}
		type holder struct {
			id             uint64
			run, latest    int64
			version        uint64
			exp            int64
			oldRun, oldExp int64
			seq            uint64
		}
		hs := map[string]*holder{"a": {}, "b": {}, "c": {}}
		at := int64(0)
		install := func(hd *holder, g *api.Grant, at int64) {
			hd.id, hd.version, hd.latest, hd.exp = g.GetLeaseId(), g.GetVersion(), g.GetSlotCount(), at+g.GetTtlNanos()
			hd.run = max(hd.run, g.GetSlotCount()) // a raise at once; a lowering once acknowledged
		}
		for range rapid.IntRange(1, 80).Draw(rt, "steps") {
			at += rapid.Int64Range(0, 2000).Draw(rt, "dt") * 1_000_000
			who := rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "who")
			hd := hs[who]
			if hd.exp <= at {
				hd.run, hd.id = 0, 0 // its deadline passed: nothing runs
			}
			if hd.oldExp <= at {
				hd.oldRun = 0
			}
			hd.seq++
			c := caller(who, 1, hd.seq)
			want := rapid.Int64Range(0, 7).Draw(rt, "want")
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				if hd.id != 0 {
					hd.oldRun, hd.oldExp = hd.run, hd.exp
				}
				hd.run = 0
				if g := bat(at, sAcquire(c, "acme", want)).Lease.GetLeases()[0].GetGrant(); g != nil {
					install(hd, g, at)
				}
			case 1, 2:
				if hd.id != 0 {
					hd.run = min(hd.run, hd.latest) // dropped to the latest count: acknowledge it
					kl := bat(at, sRenew(c, "acme", hd.id, want, hd.version)).Lease.GetLeases()[0]
					if g := kl.GetGrant(); g != nil {
						install(hd, g, at)
					} else {
						hd.run, hd.id = 0, 0
					}
				}
			case 3:
				if hd.id != 0 {
					bat(at, sRelease(c, "acme", hd.id))
					hd.run, hd.id = 0, 0
				}
			case 4:
				do(CmdExpire, at, &api.ExpireCommand{})
			case 5:
				snap := snapshotBytes(t, h.f)
				if err := h.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
					rt.Fatal(err)
				}
			}
			var running int64
			for _, x := range hs {
				if x.exp > at {
					running += x.run
				}
				if x.oldExp > at {
					running += x.oldRun
				}
			}
			if running > 5 {
				rt.Fatalf("at %d: %d requests run, more than the limit 5", at, running)
			}
			for _, ks := range h.f.st.slots.keys {
				for _, l := range ks {
					if err := l.CheckInvariants(); err != nil {
						rt.Fatal(err)
					}
				}
			}
		}
		if broken != faultNone {
			return
		}
		r := slotsOnHarness(t, 0, "5")
		for _, e := range log {
			r.apply(e.ct, e.at, e.msg)
		}
		_, a := h.f.StateHash()
		_, b := r.f.StateHash()
		if a != b {
			rt.Fatalf("state hash %s, %s replaying the same log", a, b)
		}
	}
}

func TestSlotRandomHistories(t *testing.T) {
	rapid.Check(t, slotHistories(t, faultNone))
}

// slotBenchHarness has n slot keys of one policy, each holding one lease
// of its own client.
func slotBenchHarness(b *testing.B, n int) *harness {
	h := slotsOnHarness(b, 0, "4")
	cmd := slotPolicies("4", "")
	cmd.Policies[0].MaxKeys = int64(n + 1)
	if r := h.apply(CmdApplyPolicies, 0, cmd); r.Err != nil {
		b.Fatal(r.Err)
	}
	for i := range n {
		h.batch(sec, sAcquire(caller(fmt.Sprint("c", i), 1, 1), fmt.Sprint("t", i), 1))
	}
	return h
}

// BenchmarkSlotExpire: an expire entry with no slot lease due, on n slot
// keys (it should cost what is due, not n).
func BenchmarkSlotExpire(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			h := slotBenchHarness(b, n)
			at := sec
			b.ResetTimer()
			for range b.N {
				at += 1000
				h.apply(CmdExpire, at, &api.ExpireCommand{})
			}
		})
	}
}

// BenchmarkSlotRevoke: a new incarnation's first request, on n slot keys
// its client holds no lease on but one.
func BenchmarkSlotRevoke(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			h := slotBenchHarness(b, n)
			at := sec
			b.ResetTimer()
			for i := range b.N {
				at += 1000
				h.batch(at, sAcquire(caller("restarting", uint64(i+1), 1), "mine", 1))
			}
		})
	}
}

package fsm

import (
	"bytes"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
	"google.golang.org/grpc/codes"
)

// A restore (rule j) of an older snapshot, whose count for the current
// window is lower than what the replaced state granted: every window that
// began by the restore is full, for restored keys and new ones alike; the
// next window grants again; lease IDs are of the new generation.
func TestWindowRestoreFillsCurrentWindows(t *testing.T) {
	h := windowsOnHarness(t, 0)
	snap := snapshotBytes(t, h.f) // no window key yet
	keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 100_000)))
	// Restore the older snapshot at cluster time 2.5 s (window [2 s, 4 s)).
	prepared, err := PrepareRestore(snap, baseAt(h.f, 2*sec+sec/2))
	if err != nil {
		t.Fatal(err)
	}
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(prepared)}); err != nil {
		t.Fatal(err)
	}
	rh := &harness{t: t, f: g, index: 1000}
	for i, k := range []string{"acme", "globex"} {
		gr := keyLeaseOf(t, rh.batch(3*sec, wAcquire(caller("b", 1, uint64(i+1)), k, 100_000))).GetGrant()
		if gr.GetStartMilli() != 0 {
			t.Fatalf("%s: %d granted in a window that began before the restore", k, gr.GetStartMilli())
		}
		if gr.GetLeaseId() <= 1<<32 {
			t.Fatalf("%s: lease ID %d is not of the new generation", k, gr.GetLeaseId())
		}
	}
	gr := keyLeaseOf(t, rh.batch(4*sec, wAcquire(caller("c", 1, 1), "acme", 100_000))).GetGrant()
	if gr.GetStartMilli() != 10_000 {
		t.Fatalf("the next window granted %d, want the limit 10000", gr.GetStartMilli())
	}
}

// Deleting a window policy and applying it again mid-window keeps the
// count; max_keys counts window keys, and idle ones are collected to make
// room; an algorithm change is refused while counts are live.
func TestWindowDeleteReapplyMaxKeysAndAlgorithmChange(t *testing.T) {
	h := windowsOnHarness(t, 0)
	keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 100_000)))
	if r := h.apply(CmdDeletePolicy, 2*sec, &api.DeletePolicyCommand{Name: "daily"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if kl := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("b", 1, 1), "acme", 100_000))); kl.GetError() == nil {
		t.Fatalf("a deleted policy granted %v", kl)
	}
	if r := h.apply(CmdApplyPolicies, 2*sec, windowPolicies("10", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if g := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("b", 1, 2), "acme", 100_000))).GetGrant(); g.GetStartMilli() != 0 {
		t.Fatalf("re-applied mid-window: granted %d in a full window", g.GetStartMilli())
	}
	// max_keys: 3.
	for i, k := range []string{"k2", "k3"} {
		if kl := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("c", 1, uint64(i+1)), k, 1000))); kl.GetGrant() == nil {
			t.Fatalf("%s: %v", k, kl)
		}
	}
	if kl := keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("c", 1, 3), "k4", 1000))); codes.Code(kl.GetError().GetCode()) != codes.ResourceExhausted {
		t.Fatalf("a fourth key: %v", kl)
	}
	// An algorithm change while acme's count is live is refused ...
	bucket := &api.ApplyPoliciesCommand{Policies: []*api.PolicySpec{(policy.Policy{Name: "daily", Algorithm: policy.TokenBucket, Charge: policy.ChargeRequests,
		RateMilliPerSec: 1000, BurstMilli: 1000, StartFull: true, Key: []string{"tenant"}, LeaseDurationNanos: 5 * sec, RenewAfterNanos: sec,
		DriftPPM: 1000, DefaultWeight: 1, Failure: policy.FailClosed, MaxKeys: 3, MaxLeasesPerKey: 8}).ToProto()}}
	if r := h.apply(CmdApplyPolicies, 3*sec, bucket); code(r.Err) != codes.FailedPrecondition {
		t.Fatalf("window -> token bucket mid-window: %v", r.Err)
	}
	// ... and once the windows are over, the idle keys are collected: a
	// new key fits, and the change is taken.
	if kl := keyLeaseOf(t, h.batch(6*sec, wAcquire(caller("c", 1, 4), "k4", 1000))); kl.GetGrant() == nil {
		t.Fatalf("a fourth key after the others went idle: %v", kl)
	}
	if r := h.apply(CmdApplyPolicies, 9*sec, bucket); r.Err != nil {
		t.Fatalf("window -> token bucket after the windows: %v", r.Err)
	}
	if n := len(h.f.st.win.keys["daily"]); n != 0 {
		t.Fatalf("%d window keys left after the change", n)
	}
}

// sliding-window-approx: the previous window's count, weighted by the part
// of the sliding window it still covers, is charged too.
func TestApproxWindowWeighsThePreviousWindow(t *testing.T) {
	h := windowsOnHarness(t, 0)
	cmd := windowPolicies("10", "")
	cmd.Policies[0].Algorithm = string(policy.SlidingWindowApprox)
	cmd.Policies[0].Name = "approx"
	if r := h.apply(CmdApplyPolicies, sec, cmd); r.Err != nil {
		t.Fatal(r.Err)
	}
	acq := func(at int64, who string) *api.Grant {
		op := wAcquire(caller(who, 1, 1), "acme", 100_000)
		op.GetAcquire().Keys[0].Key.Policy = "approx"
		return keyLeaseOf(t, h.batch(at, op)).GetGrant()
	}
	if g := acq(2*sec, "a"); g.GetStartMilli() != 10_000 {
		t.Fatalf("first window: %v", g)
	}
	// At 4.5 s, a quarter into [4 s, 6 s): the previous 10 count 7.5, so
	// at most 2 whole units are left.
	if g := acq(4*sec+sec/2, "b"); g.GetStartMilli() != 2000 || g.GetWindowRemainingMilli() != 0 {
		t.Fatalf("a quarter into the next window: %v, want 2000", g)
	}
	// At 5.5 s the previous window weighs 2.5: 10 − 2 − 2.5 → 5 units.
	if g := acq(5*sec+sec/2, "c"); g.GetStartMilli() != 5000 {
		t.Fatalf("three quarters in: %v, want 5000", g)
	}
}

// Re-creating a deleted window policy under other key attributes mid-window
// is refused (whatever became of its retired record); under the same ones
// it takes its counts back, after an expire too.
func TestWindowRecreateUnderOtherKeysRefused(t *testing.T) {
	h := windowsOnHarness(t, 0)
	keyLeaseOf(t, h.batch(2*sec, wAcquire(caller("a", 1, 1), "acme", 100_000)))
	if r := h.apply(CmdDeletePolicy, 2*sec, &api.DeletePolicyCommand{Name: "daily"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.apply(CmdExpire, 2*sec+1, &api.ExpireCommand{})
	rekeyed := windowPolicies("10", "")
	rekeyed.Policies[0].Key = []string{"route"}
	if r := h.apply(CmdApplyPolicies, 2*sec+2, rekeyed); code(r.Err) != codes.FailedPrecondition {
		t.Fatalf("re-created under other keys mid-window: %v", r.Err)
	}
	if r := h.apply(CmdApplyPolicies, 2*sec+2, windowPolicies("10", "")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if g := keyLeaseOf(t, h.batch(3*sec, wAcquire(caller("b", 1, 1), "acme", 100_000))).GetGrant(); g.GetStartMilli() != 0 {
		t.Fatalf("re-created: granted %d in a full window", g.GetStartMilli())
	}
	// A snapshot keeps the keying: the re-key is still refused after a restore.
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(snapshotBytes(t, h.f))}); err != nil {
		t.Fatal(err)
	}
	rh := &harness{t: t, f: g, index: h.index}
	if r := rh.apply(CmdApplyPolicies, 3*sec, rekeyed); code(r.Err) != codes.FailedPrecondition {
		t.Fatalf("re-key after a restore: %v", r.Err)
	}
}

// baseAt is f's state as a restore replaces it, at applied cluster time
// now (a test's stand-in for the time the leader has applied).
func baseAt(f *FSM, now int64) RestoreBase {
	b := f.RestoreBase()
	b.ClusterTime = now
	return b
}

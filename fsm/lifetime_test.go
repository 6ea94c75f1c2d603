package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc/codes"
)

// Deterministic cases of the budget-lifetime rule (retire.go,
// docs/design.md §3.5); lifetime_rapid_test.go is the property.

func (h *harness) deletePolicy(at int64, name string) *Result {
	h.t.Helper()
	return h.apply(CmdDeletePolicy, at, &api.DeletePolicyCommand{Name: name})
}

func renewOp(c *api.Caller, k *api.Key, id uint64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{
		{Key: k, LeaseId: id, Demand: &api.Demand{RateMilliPerSec: 1e9, BurstMilli: 1e9}},
	}}}}
}

func releaseOp(c *api.Caller, k *api.Key, id uint64, unspent ...int64) *api.LeaseOp {
	rk := &api.ReleaseKey{Key: k, LeaseId: id}
	if len(unspent) > 0 {
		rk.UnspentMilli = unspent[0]
	}
	return &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{rk}}}}
}

func withRegion(tn, rg string) *api.Key {
	return &api.Key{Policy: "per-tenant", Attributes: map[string]string{"tenant": tn, "region": rg}}
}

// A policy deleted while a lease is live and applied again at once takes
// its budget back, lease and all: the lease renews, and a newcomer starts
// with what the pool holds, not a fresh burst.
func TestDeleteAndReapplyResurrectsLeases(t *testing.T) {
	h := newRetireHarness(t)
	h.applyYAML(0, perTenantV1)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))) // all 20 tokens
	if r := h.deletePolicy(2*sec, "per-tenant"); r.Err != nil {
		t.Fatal(r.Err)
	}
	if e := h.batch(2*sec, renewOp(caller("a", 1, 2), tenant("acme"), a.GetLeaseId()))[0].Lease.GetLeases()[0].GetError(); codes.Code(e.GetCode()) != codes.NotFound {
		t.Fatalf("renewal of a deleted policy's lease: %v, want NotFound", e)
	}
	if pols, keys, leases, _ := h.f.Counts(); pols != 1 || keys != 1 || leases != 1 {
		t.Fatalf("after the delete: %d policies, %d keys, %d leases; want the retired key and its lease counted", pols, keys, leases)
	}
	if ls := h.f.Leases("per-tenant", "", 0); len(ls.GetKeys()) != 1 || len(ls.GetLeases()) != 1 {
		t.Fatalf("the deleted policy's retired key is not listed: %v", ls)
	}
	if r := h.applyYAMLResult(2*sec, perTenantV1); r.Err != nil {
		t.Fatalf("re-create while the old lease is live: %v", r.Err)
	}
	g := grantOf(t, h.batch(3*sec, renewOp(caller("a", 1, 3), tenant("acme"), a.GetLeaseId())))
	if g.GetLeaseId() != a.GetLeaseId() {
		t.Fatalf("renewal after the re-create: lease %d, want %d", g.GetLeaseId(), a.GetLeaseId())
	}
	b := grantOf(t, h.batch(3*sec, acquire(caller("b", 1, 1), tenant("acme"))))
	if b.GetStartMilli() != 0 {
		t.Fatalf("newcomer started with %d milli-tokens while a holds the whole burst", b.GetStartMilli())
	}
}

// Drained, released, deleted and applied again: the key starts with what
// its pool minted since, not full (the 496-vs-400 report).
func TestRecreateAfterReleaseStartsNoFuller(t *testing.T) {
	for _, name := range []string{"release", "expire"} {
		t.Run(name, func(t *testing.T) {
			h := newRetireHarness(t)
			h.applyYAML(0, perTenantV1)
			a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
			at := 2 * sec
			if name == "release" {
				h.batch(at, releaseOp(caller("a", 1, 2), tenant("acme"), a.GetLeaseId()))
			} else {
				at = sec + a.GetTtlNanos()
				if r := h.apply(CmdExpire, at, &api.ExpireCommand{}); r.Expired != 1 {
					t.Fatalf("expired %d", r.Expired)
				}
			}
			h.deletePolicy(at, "per-tenant")
			h.applyYAML(at+sec/10, perTenantV1)
			b := grantOf(t, h.batch(at+sec/10, acquire(caller("b", 1, 1), tenant("acme"))))
			// The pool mints 10/s (less 0.1% drift) from empty: 1 token in 100ms.
			if b.GetStartMilli() > 1_000 {
				t.Fatalf("re-created key started with %d milli-tokens 100ms after it was drained; want at most 1000", b.GetStartMilli())
			}
		})
	}
}

// A keying change cannot carry budgets over: new keys start under the
// floor the old ledgers left until they would all have refilled, and the
// floor is then collected.
func TestRekeyStartsUnderFloor(t *testing.T) {
	h := newRetireHarness(t)
	h.applyYAML(0, perTenantV1)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	h.batch(sec, releaseOp(caller("a", 1, 2), tenant("acme"), a.GetLeaseId()))
	rekeyed := strings.Replace(perTenantV1, "key: [tenant]", "key: [tenant, region]", 1)
	h.applyYAML(sec, rekeyed)
	// At 1.5 s the old pool could hold 5 tokens: no new key starts fuller.
	for i, k := range []*api.Key{withRegion("acme", "eu"), withRegion("zeta", "us")} {
		g := grantOf(t, h.batch(sec+sec/2, acquire(caller("b", 1, uint64(i+1)), k)))
		if g.GetStartMilli() > 5_000 {
			t.Errorf("new key %v started with %d milli-tokens; the old budget could hold 5000", k.GetAttributes(), g.GetStartMilli())
		}
	}
	due, ok := h.f.NextDue()
	if !ok || due > 3*sec+sec/100 {
		t.Fatalf("next due %d, %v: want the floor's lapse (the old pool full at about 3s)", due, ok)
	}
	h.apply(CmdExpire, 3*sec+sec/100, &api.ExpireCommand{})
	if len(h.f.st.retired) != 0 {
		t.Fatalf("the floor outlived the old budgets: %+v", h.f.st.retired["per-tenant"])
	}
	g := grantOf(t, h.batch(3*sec+sec/100, acquire(caller("c", 1, 1), withRegion("new", "eu"))))
	if g.GetStartMilli() != 20_000 {
		t.Fatalf("after the floor lapsed a new key started with %d milli-tokens, want the full burst", g.GetStartMilli())
	}
}

// Re-applying an identical policy, and deleting and re-creating one
// (start full or empty), keep every pool where it was.
func TestReapplyKeepsPoolLevels(t *testing.T) {
	for _, start := range []string{"full", "empty"} {
		t.Run(start, func(t *testing.T) {
			yaml := strings.Replace(perTenantV1, "burst: 20", "burst: 20\n    start: "+start, 1)
			h := newRetireHarness(t)
			h.applyYAML(0, yaml)
			a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
			h.batch(sec, releaseOp(caller("a", 1, 2), tenant("acme"), a.GetLeaseId())) // pool 0 from here
			h.applyYAML(sec+sec/4, yaml)
			h.deletePolicy(sec+sec/4, "per-tenant")
			h.applyYAML(sec+sec/2, yaml)
			g := grantOf(t, h.batch(sec+sec/2, acquire(caller("b", 1, 1), tenant("acme"))))
			// 500ms at 10/s less 0.1%: just under 5 tokens.
			if g.GetStartMilli() < 4_900 || g.GetStartMilli() > 5_000 {
				t.Fatalf("started with %d milli-tokens, want the 5 tokens the pool minted since the release", g.GetStartMilli())
			}
		})
	}
}

// Retired budgets are collected once they are indistinguishable from
// fresh ones: at once when idle and full, else when their pools fill.
func TestRetiredBudgetsCollected(t *testing.T) {
	h := newRetireHarness(t)
	h.applyYAML(0, perTenantV1)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("low"))))
	h.batch(sec, releaseOp(caller("a", 1, 2), tenant("low"), a.GetLeaseId()))
	b := grantOf(t, h.batch(sec, acquire(caller("b", 1, 1), tenant("full"))))
	h.batch(sec, releaseOp(caller("b", 1, 2), tenant("full"), b.GetLeaseId(), 20_000)) // credits it all back
	h.deletePolicy(sec, "per-tenant")
	if ls := h.f.Leases("", "", 0); len(ls.GetKeys()) != 1 || ls.GetKeys()[0].GetKey() != "low" {
		t.Fatalf("retired keys %v, want only the one below full", ls.GetKeys())
	}
	due, ok := h.f.NextDue()
	if !ok || due < 3*sec || due > 3*sec+sec/100 {
		t.Fatalf("next due %d, %v: want when the retired pool is full (about 3s)", due, ok)
	}
	h.apply(CmdExpire, due-1, &api.ExpireCommand{})
	if _, keys, _, _ := h.f.Counts(); keys != 1 {
		t.Fatalf("retired key collected before its pool was full: %d keys", keys)
	}
	h.apply(CmdExpire, due, &api.ExpireCommand{})
	if _, keys, _, _ := h.f.Counts(); keys != 0 || len(h.f.st.retired) != 0 {
		t.Fatalf("after the pool filled: %d keys, %d retired names", keys, len(h.f.st.retired))
	}
}

// Retired budgets and floors are replicated state: they are in snapshots
// and the state hash, and a restored copy continues identically.
func TestRetiredSurvivesSnapshot(t *testing.T) {
	a := newRetireHarness(t)
	a.applyYAML(0, perTenantV1)
	g := grantOf(t, a.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	a.batch(sec, acquire(caller("b", 1, 1), tenant("zeta")))
	_, before := a.f.StateHash()
	a.deletePolicy(2*sec, "per-tenant")
	if _, after := a.f.StateHash(); after == before {
		t.Fatal("retiring a policy did not change the state hash")
	}
	snap := snapshotBytes(t, a.f)
	b := &harness{t: t, f: New(nil), index: a.index}
	if err := b.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, snapshotBytes(t, b.f)) {
		t.Fatal("snapshot -> restore -> snapshot is not byte-identical")
	}
	for _, h := range []*harness{a, b} {
		// Re-created: the retired lease renews on the restored copy too.
		h.applyYAML(2*sec, perTenantV1)
		grantOf(t, h.batch(3*sec, renewOp(caller("a", 1, 2), tenant("acme"), g.GetLeaseId())))
		h.apply(CmdExpire, 9*sec, &api.ExpireCommand{})
		// Then re-keyed: a floor, in the snapshot too.
		h.applyYAML(9*sec, strings.Replace(perTenantV1, "key: [tenant]", "key: [region]", 1))
	}
	if len(a.f.st.retired) != 1 || !a.f.st.retired["per-tenant"].fl.active(9*sec) {
		t.Fatalf("no floor after the re-key: %+v", a.f.st.retired)
	}
	sa, sb := snapshotBytes(t, a.f), snapshotBytes(t, b.f)
	if !bytes.Equal(sa, sb) {
		t.Fatal("restored FSM diverged")
	}
	c := New(nil)
	if err := c.Restore(nopCloser{bytes.NewReader(sa)}); err != nil {
		t.Fatalf("a snapshot with a floor does not restore: %v", err)
	}
	if !bytes.Equal(sa, snapshotBytes(t, c)) {
		t.Fatal("a snapshot with a floor does not restore identically")
	}
}

// The state machine's second line behind the coordinator's parser.
func TestApplyRefusesDuplicateNames(t *testing.T) {
	h := newRetireHarness(t)
	p := h.f.st.policies["per-tenant"].ToProto()
	r := h.apply(CmdApplyPolicies, sec, &api.ApplyPoliciesCommand{Policies: []*api.PolicySpec{p, p}})
	if code(r.Err) != codes.InvalidArgument {
		t.Fatalf("a command naming a policy twice: %v, want InvalidArgument", r.Err)
	}
}

// newRetireHarness is newHarness (budgets retired at delete: the
// baseline's FeatureRetire).
func newRetireHarness(t testing.TB) *harness {
	return newHarness(t)
}

// enableFeatures applies a switch entry (the baseline's, for a raw
// harness).
func (h *harness) enableFeatures(bits uint64) {
	h.t.Helper()
	if r := h.apply(CmdSetFeatures, 0, &api.SetFeaturesCommand{Features: bits}); r.Err != nil {
		h.t.Fatalf("set features: %v", r.Err)
	}
}

// A deleted and re-created key keeps its drained budget (FeatureRetire).
func TestRetireKeepsTheBudget(t *testing.T) {
	h := newRetireHarness(t)
	h.applyYAML(0, perTenantV1)
	a := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	h.batch(2*sec, releaseOp(caller("a", 1, 2), tenant("acme"), a.GetLeaseId()))
	if r := h.deletePolicy(2*sec, "per-tenant"); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.applyYAML(2*sec, perTenantV1)
	if g := grantOf(t, h.batch(2*sec, acquire(caller("b", 1, 1), tenant("acme")))); g.GetStartMilli() >= g.GetCapMilli() {
		t.Fatalf("the re-created key started full (%d milli-tokens) after being drained", g.GetStartMilli())
	}
}

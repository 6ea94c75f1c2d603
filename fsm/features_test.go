package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

func renewAck(c *api.Caller, k *api.Key, id, acked uint64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Renew{Renew: &api.RenewRequest{Caller: c, Keys: []*api.RenewKey{
		{Key: k, LeaseId: id, Demand: &api.Demand{RateMilliPerSec: 1e9, BurstMilli: 1e9}, AckedVersion: acked},
	}}}}
}

// heldRate is what the ledger counts as held by client's lease on acme.
func heldRate(t *testing.T, f *FSM, client string) int64 {
	t.Helper()
	for _, le := range f.Leases("per-tenant", "acme", 0).GetLeases() {
		if le.GetClientId() == client {
			return le.GetHeldRateMilliPerSec()
		}
	}
	t.Fatalf("no lease of %s", client)
	return 0
}

// convergeScript: a takes all of acme, b arrives, a's renewal halves it,
// then a renews acknowledging version 2 (the halved terms). It returns the
// last renewal's grant.
func convergeScript(t *testing.T, h *harness) *api.Grant {
	t.Helper()
	a1 := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	h.batch(sec+1, acquire(caller("b", 1, 1), tenant("acme")))
	a2 := grantOf(t, h.batch(2*sec, renewAck(caller("a", 1, 2), tenant("acme"), a1.GetLeaseId(), a1.GetVersion())))
	if a2.GetRateMilliPerSec() != 5_000 {
		t.Fatalf("reducing renewal %v", a2)
	}
	// The client acknowledges version 2 whatever the server answered: an
	// older server leaves the field unread.
	return grantOf(t, h.batch(2*sec+sec/10, renewAck(caller("a", 1, 3), tenant("acme"), a1.GetLeaseId(), 2)))
}

// TestAcks: grants and renewals number their terms, an acknowledgement
// drops the superseded versions, new leases renew early once, and
// snapshots keep the versions (baseline switch FeatureAcks).
func TestAcks(t *testing.T) {
	on := newHarness(t)
	if on.f.Features() != BaselineFeatures {
		t.Fatalf("features %#x after the first entry, want the baseline %#x", on.f.Features(), BaselineFeatures)
	}
	g := convergeScript(t, on)
	if g.GetVersion() != 3 || heldRate(t, on.f, "a") != 5_000 {
		t.Fatalf("version %d, held %d; want 3 and 5000", g.GetVersion(), heldRate(t, on.f, "a"))
	}
	// a holds its fair share and nothing superseded: normal interval. b,
	// below its fair share until it renews, is asked to renew early.
	if want := (5 * sec) / 3; g.GetRenewAfterNanos() != want {
		t.Fatalf("converged: renew after %v, want %v", time.Duration(g.GetRenewAfterNanos()), time.Duration(want))
	}
	b := grantOf(t, on.batch(2*sec+sec/5, renewAck(caller("b", 1, 2), tenant("acme"), 2, 1)))
	if b.GetRateMilliPerSec() != 5_000 || b.GetRenewAfterNanos() != (5*sec)/3 {
		t.Fatalf("newcomer after the acknowledgement: %v", b)
	}
	// A new lease is asked to renew early once.
	c := grantOf(t, on.batch(3*sec, acquire(caller("c", 1, 1), tenant("other"))))
	if want := (5 * sec) / 3 / EarlyRenewDivisor; c.GetRenewAfterNanos() != want || c.GetVersion() != 1 {
		t.Fatalf("new lease: %v, want renew after %v and version 1", c, time.Duration(want))
	}
	// Snapshots keep the switches and the versions, under the v2 magic.
	snap := snapshotBytes(t, on.f)
	if !bytes.HasPrefix(snap, []byte(snapshotMagicV2)) {
		t.Fatal("snapshot magic does not follow the feature switches")
	}
	g2 := New(nil)
	if err := g2.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	if g2.Features() != BaselineFeatures || !g2.BaselineOn() || !bytes.Equal(snap, snapshotBytes(t, g2)) {
		t.Fatal("restore lost the switches or the versions")
	}
	// Turning the baseline on again changes nothing but the digest (the
	// window clock above all: it started at the first entry).
	before := on.f.st.export()
	on.apply(CmdSetFeatures, 9*sec, &api.SetFeaturesCommand{Features: BaselineFeatures, WallUnixNanos: wallAtSwitch + 3600*sec})
	after := on.f.st.export()
	before.header.AppliedDigest, after.header.AppliedDigest = nil, nil
	before.header.ClusterTimeNanos, after.header.ClusterTimeNanos = 0, 0
	var x, y bytes.Buffer
	if err := writeSnapshot(&x, before); err != nil {
		t.Fatal(err)
	}
	if err := writeSnapshot(&y, after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		t.Fatal("a second baseline entry changed the state")
	}
}

func TestUnknownFeatureStopsTheServer(t *testing.T) {
	h := newHarness(t)
	mustPanic(t, "unknown feature bit", func() {
		data, _ := Encode(CmdSetFeatures, sec, &api.SetFeaturesCommand{Features: 1 << 40})
		h.f.Apply(&raft.Log{Index: 50, Type: raft.LogCommand, Data: data})
	})
	// A snapshot naming a switch this server does not know is refused.
	d := h.f.st.export()
	d.header.Features = 1 << 40
	var b bytes.Buffer
	if err := writeSnapshot(&b, d); err != nil {
		t.Fatal(err)
	}
	if err := New(nil).Restore(nopCloser{bytes.NewReader(b.Bytes())}); err == nil {
		t.Fatal("a snapshot with an unknown feature switch restored")
	}
}

// TestPreBaselineLogStops: a log from before v0.1.0 (an entry other than
// the baseline's first, a CmdSetFeatures leaving a baseline switch off,
// or one carrying deferred initial policies) stops the server with the
// migration in the message, never applying it otherwise.
func TestPreBaselineLogStops(t *testing.T) {
	apply := func(f *FSM, ct CommandType, msg proto.Message) {
		data, _ := Encode(ct, sec, msg)
		f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data})
	}
	for name, entry := range map[string]func(f *FSM){
		"policies first":   func(f *FSM) { apply(f, CmdApplyPolicies, &api.ApplyPoliciesCommand{}) },
		"expire first":     func(f *FSM) { apply(f, CmdExpire, &api.ExpireCommand{}) },
		"ignorable first":  func(f *FSM) { apply(f, IgnorableFlag|0x3f, &api.ExpireCommand{}) },
		"part of baseline": func(f *FSM) { apply(f, CmdSetFeatures, &api.SetFeaturesCommand{Features: FeatureAcks | FeatureRetire}) },
		"deferred policies": func(f *FSM) {
			apply(f, CmdSetFeatures, &api.SetFeaturesCommand{Features: BaselineFeatures, InitialWindowPolicies: &api.ApplyPoliciesCommand{}})
		},
	} {
		f := New(nil)
		msg := panicMessage(t, name, func() { entry(f) })
		if !strings.Contains(msg, "before v0.1.0") || !strings.Contains(msg, "save a new snapshot") {
			t.Errorf("%s: stop message %q does not name the problem and the migration", name, msg)
		}
		if f.Features() != 0 || f.BaselineOn() {
			t.Errorf("%s: the refused entry turned switches on: %#x", name, f.Features())
		}
	}
	// After the baseline, a later switch entry is fine.
	f := New(nil)
	apply(f, CmdSetFeatures, &api.SetFeaturesCommand{Features: BaselineFeatures})
	apply(f, CmdSetFeatures, &api.SetFeaturesCommand{Features: FeatureAcks})
	if !f.BaselineOn() {
		t.Fatal("baseline off after its entry")
	}
}

// TestPreBaselineSnapshotRefused: a snapshot of a state that applied
// entries with a baseline switch off is refused with the migration in the
// error; an empty state's (nothing applied) restores in every version.
func TestPreBaselineSnapshotRefused(t *testing.T) {
	h := newHarness(t)
	convergeScript(t, h)
	d := h.f.st.export()
	d.header.Features = BaselineFeatures &^ FeatureWindowSpent
	var b bytes.Buffer
	if err := writeSnapshot(&b, d); err != nil {
		t.Fatal(err)
	}
	err := New(nil).Restore(nopCloser{bytes.NewReader(b.Bytes())})
	if !errors.Is(err, ErrPreBaseline) || !strings.Contains(err.Error(), "before v0.1.0 with feature switches 0x800 off") ||
		!strings.Contains(err.Error(), "restore it into a pre-0.1.0 cluster") {
		t.Fatalf("pre-baseline snapshot: %v", err)
	}
	if _, err := PrepareRestore(b.Bytes(), h.f.RestoreBase()); !errors.Is(err, ErrPreBaseline) {
		t.Fatalf("operator restore of a pre-baseline snapshot: %v", err)
	}
	empty := New(nil)
	if err := New(nil).Restore(nopCloser{bytes.NewReader(snapshotBytes(t, empty))}); err != nil {
		t.Fatalf("an empty state's snapshot: %v", err)
	}
}

// clampScript: a takes all of acme (20 tokens), b arrives, a's renewal
// halves its cap, and a renews acknowledging version 2 with a clamp
// report. It returns the last answer for a.
func clampScript(t *testing.T, h *harness, clamped int64) *api.KeyLease {
	t.Helper()
	a1 := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	h.batch(sec+1, acquire(caller("b", 1, 1), tenant("acme")))
	grantOf(t, h.batch(2*sec, renewAck(caller("a", 1, 2), tenant("acme"), a1.GetLeaseId(), a1.GetVersion())))
	op := renewAck(caller("a", 1, 3), tenant("acme"), a1.GetLeaseId(), 2)
	op.GetRenew().GetKeys()[0].ClampedMilli = clamped
	return h.batch(2*sec+sec/10, op)[0].Lease.GetLeases()[0]
}

// TestReturnClamped: rule (i): a cut's clamp returns to the pool, a report
// beyond the cut returns only the cut, a negative one is refused, and a
// raised cap is topped up from the pool.
func TestReturnClamped(t *testing.T) {
	run := func(clamped int64) (*harness, *api.KeyLease) {
		h := newHarness(t)
		return h, clampScript(t, h, clamped)
	}
	pool := func(h *harness) int64 {
		return h.f.st.keys["per-tenant"].at("acme").ledger.PoolMilli()
	}
	on, kl := run(10_000)
	if kl.GetError() != nil || pool(on) != 10_000 {
		t.Fatalf("%v, pool %d; want the 10000 clamped back", kl.GetError(), pool(on))
	}
	if over, _ := run(1 << 40); pool(over) != 10_000 {
		t.Fatalf("a report of 2^40 against a cut of 10000 returned %d", pool(over))
	}
	if _, kl := run(-1); codes.Code(kl.GetError().GetCode()) != codes.InvalidArgument {
		t.Fatalf("a negative clamp report answered %v, want InvalidArgument", kl)
	}
	// b's next renewal raises its cap (a holds 10 of 20 now) and is topped
	// up from the returned tokens.
	b := grantOf(t, on.batch(2*sec+sec/5, renewAck(caller("b", 1, 2), tenant("acme"), 2, 1)))
	if b.GetCapMilli() != 10_000 || b.GetTopUpMilli() != 10_000 || pool(on) != 0 {
		t.Fatalf("b's raising renewal %v, pool %d; want a top-up of 10000 from the pool", b, pool(on))
	}
}

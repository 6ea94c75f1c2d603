package fsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc/codes"
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

func TestAcksFeatureSwitch(t *testing.T) {
	h := newHarness(t)
	if h.f.Features() != 0 {
		t.Fatalf("a new state has features %#x", h.f.Features())
	}
	// Off: no versions, the acknowledgement is ignored (the halved share's
	// predecessor stays held until its expiry), normal renew interval.
	g := convergeScript(t, h)
	if g.GetVersion() != 0 || heldRate(t, h.f, "a") != 10_000 {
		t.Fatalf("switch off: version %d, held %d; want 0 and 10000", g.GetVersion(), heldRate(t, h.f, "a"))
	}
	if want := (5 * sec) / 3; g.GetRenewAfterNanos() != want {
		t.Fatalf("switch off: renew after %v, want the policy's %v", time.Duration(g.GetRenewAfterNanos()), time.Duration(want))
	}

	on := newHarness(t)
	if r := on.apply(CmdSetFeatures, 0, &api.SetFeaturesCommand{Features: FeatureAcks}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if on.f.Features() != FeatureAcks {
		t.Fatalf("features %#x after the switch", on.f.Features())
	}
	g = convergeScript(t, on)
	if g.GetVersion() != 3 || heldRate(t, on.f, "a") != 5_000 {
		t.Fatalf("switch on: version %d, held %d; want 3 and 5000", g.GetVersion(), heldRate(t, on.f, "a"))
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

	// Snapshots keep the switch and the versions, under the v2 magic an
	// older server refuses; a state with no switch keeps the v1 magic.
	snap := snapshotBytes(t, on.f)
	if !bytes.HasPrefix(snap, []byte(snapshotMagicV2)) || !bytes.HasPrefix(snapshotBytes(t, h.f), []byte(snapshotMagic)) {
		t.Fatal("snapshot magic does not follow the feature switches")
	}
	g2 := New(nil)
	if err := g2.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	if g2.Features() != FeatureAcks || !bytes.Equal(snap, snapshotBytes(t, g2)) {
		t.Fatal("restore lost the switch or the versions")
	}
}

// TestAcksIgnoredIdenticallyWhileOff: with the switch off, a log whose
// renewals carry acknowledgements leaves exactly the state (the applied
// digest aside, which hashes the entries' bytes) of the same log without
// them, which is what a server that predates acknowledgements applies.
func TestAcksIgnoredIdenticallyWhileOff(t *testing.T) {
	with, without := newHarness(t), newHarness(t)
	convergeScript(t, with)
	a1 := grantOf(t, without.batch(sec, acquire(caller("a", 1, 1), tenant("acme"))))
	without.batch(sec+1, acquire(caller("b", 1, 1), tenant("acme")))
	without.batch(2*sec, renewAck(caller("a", 1, 2), tenant("acme"), a1.GetLeaseId(), 0))
	without.batch(2*sec+sec/10, renewAck(caller("a", 1, 3), tenant("acme"), a1.GetLeaseId(), 0))
	strip := func(f *FSM) []byte {
		d := f.st.export()
		d.header.AppliedDigest = nil
		var b bytes.Buffer
		if err := writeSnapshot(&b, d); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	if !bytes.Equal(strip(with.f), strip(without.f)) {
		t.Fatal("with the switch off, acknowledgements changed the state")
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
	// An older snapshot (no versions) restores with its terms unversioned.
	old := newHarness(t)
	convergeScript(t, old)
	raw := snapshotBytes(t, old.f)
	r := New(nil)
	if err := r.Restore(nopCloser{bytes.NewReader(raw)}); err != nil {
		t.Fatal(err)
	}
	for _, le := range r.st.keys["per-tenant"].at("acme").ledger.Leases() {
		if le.Current.Version != 0 {
			t.Fatalf("a lease from an unversioned snapshot has version %d", le.Current.Version)
		}
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

// TestReturnClampedSwitch: rule (i) applies only while FeatureReturnClamped
// is on. Off (acknowledgements on), a clamp report, even an invalid one, is
// ignored and leaves exactly the state of the same log without it, which
// is what a server that predates the rule applies; on, a cut's clamp
// returns to the pool, a report beyond the cut returns only the cut, and a
// negative one is refused.
func TestReturnClampedSwitch(t *testing.T) {
	strip := func(f *FSM) []byte {
		d := f.st.export()
		d.header.AppliedDigest = nil
		var b bytes.Buffer
		if err := writeSnapshot(&b, d); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	run := func(features uint64, clamped int64) (*harness, *api.KeyLease) {
		h := newHarness(t)
		h.enableFeatures(features)
		return h, clampScript(t, h, clamped)
	}
	offWith, kl := run(FeatureAcks, -1)
	if kl.GetError() != nil {
		t.Fatalf("switch off: a negative clamp report was checked: %v", kl.GetError())
	}
	offWithout, _ := run(FeatureAcks, 0)
	if _, kl := run(FeatureAcks, 10_000); kl.GetError() != nil || !bytes.Equal(strip(offWith.f), strip(offWithout.f)) {
		t.Fatal("with the switch off, a clamp report changed the state")
	}
	pool := func(h *harness) int64 {
		return h.f.st.keys["per-tenant"].at("acme").ledger.PoolMilli()
	}
	if pool(offWith) != 0 {
		t.Fatalf("switch off: pool %d, want 0", pool(offWith))
	}
	on, kl := run(FeatureAcks|FeatureReturnClamped, 10_000)
	if kl.GetError() != nil || pool(on) != 10_000 {
		t.Fatalf("switch on: %v, pool %d; want the 10000 clamped back", kl.GetError(), pool(on))
	}
	if over, _ := run(FeatureAcks|FeatureReturnClamped, 1<<40); pool(over) != 10_000 {
		t.Fatalf("a report of 2^40 against a cut of 10000 returned %d", pool(over))
	}
	if _, kl := run(FeatureAcks|FeatureReturnClamped, -1); codes.Code(kl.GetError().GetCode()) != codes.InvalidArgument {
		t.Fatalf("switch on: a negative clamp report answered %v, want InvalidArgument", kl)
	}
	// b's next renewal raises its cap (a holds 10 of 20 now) and is topped
	// up from the returned tokens.
	b := grantOf(t, on.batch(2*sec+sec/5, renewAck(caller("b", 1, 2), tenant("acme"), 2, 1)))
	if b.GetCapMilli() != 10_000 || b.GetTopUpMilli() != 10_000 || pool(on) != 0 {
		t.Fatalf("b's raising renewal %v, pool %d; want a top-up of 10000 from the pool", b, pool(on))
	}
}

package fsm

import (
	"bytes"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
	"google.golang.org/grpc/codes"
)

// windowDebtHarness: leased windows on at cluster time 0 (2 s windows,
// L = 10) with FeatureDebt on or off and the policy's max_debt 4.
func windowDebtHarness(t *testing.T, on bool) *harness {
	h := newHarnessAt(t, 0)
	if on {
		h.enableFeatures(KnownFeatures)
	}
	if r := h.apply(CmdApplyPolicies, 0, windowPolicies("10", "    max_debt: 4\n")); r.Err != nil {
		t.Fatal(r.Err)
	}
	return h
}

func wReleaseDebt(c *api.Caller, tenantName string, id uint64, debt int64) *api.LeaseOp {
	op := wRelease(c, tenantName, id, 0)
	op.GetRelease().Keys[0].DebtMilli = debt
	return op
}

func windowKeyInfo(t *testing.T, h *harness, now int64) *api.KeyInfo {
	t.Helper()
	for _, k := range h.f.Leases("daily", "acme", now).GetKeys() {
		return k
	}
	t.Fatal("no key daily/acme listed")
	return nil
}

// TestWindowDebtWaitsForItsSwitch: with FeatureDebt off a fixed window's
// max_debt and a release's debt_milli are ignored, as by a server that
// predates debt on windows; on (docs/design.md §8.6), a chunk carries an
// allowance, the debt its release reports counts in the window (the
// listing's debt_milli), and what goes beyond L is carried into the next
// window, whose grants start that much lower.
func TestWindowDebtWaitsForItsSwitch(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := windowDebtHarness(t, on)
		g := keyLeaseOf(t, h.batch(sec/2, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
		if want := map[bool]int64{false: 0, true: 4_000}[on]; g.GetStartMilli() != 10_000 || g.GetDebtAllowanceMilli() != want {
			t.Fatalf("switch on %v: grant %v, want the whole window and allowance %d", on, g, want)
		}
		// a spent its 10 units and charged 3 more after the work.
		h.batch(sec, wReleaseDebt(caller("a", 1, 2), "acme", g.GetLeaseId(), 3_000))
		ki := windowKeyInfo(t, h, sec)
		if want := map[bool]int64{false: 0, true: 3_000}[on]; ki.GetDebtMilli() != want || ki.GetWindowCountMilli() != 10_000+want {
			t.Fatalf("switch on %v: key %v, want debt %d counted in the window", on, ki, want)
		}
		// The next window starts with the overshoot (rule w3).
		b := keyLeaseOf(t, h.batch(2*sec+sec/2, wAcquire(caller("b", 1, 1), "acme", 100_000))).GetGrant()
		if want := map[bool]int64{false: 10_000, true: 7_000}[on]; b.GetStartMilli() != want {
			t.Fatalf("switch on %v: the next window granted %d, want %d", on, b.GetStartMilli(), want)
		}
		if ki := windowKeyInfo(t, h, 2*sec+sec/2); on && ki.GetDebtMilli() != 3_000 {
			t.Fatalf("the next window's debt %d, want the 3000 carried", ki.GetDebtMilli())
		}
	}
}

// TestWindowDebtOfAnExpiredChunk: a chunk whose holder never releases it
// counts its whole allowance when it expires (its holder may have charged
// it all), and a bad debt_milli is refused precisely.
func TestWindowDebtOfAnExpiredChunk(t *testing.T) {
	h := windowDebtHarness(t, true)
	g := keyLeaseOf(t, h.batch(sec/2, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
	// A second holder's allowance: what D leaves (a holds all of it).
	c := keyLeaseOf(t, h.batch(sec/2, wAcquire(caller("c", 1, 1), "acme", 100_000))).GetGrant()
	if g.GetDebtAllowanceMilli() != 4_000 || c.GetDebtAllowanceMilli() != 0 {
		t.Fatalf("allowances %d and %d, want 4000 and 0", g.GetDebtAllowanceMilli(), c.GetDebtAllowanceMilli())
	}
	ops := h.batch(sec, wReleaseDebt(caller("c", 1, 2), "acme", c.GetLeaseId(), -1))
	if e := ops[0].Release.GetResults()[0].GetError(); e == nil || codes.Code(e.GetCode()) != codes.InvalidArgument {
		t.Fatalf("a negative debt_milli: %v", ops[0].Release)
	}
	h.apply(CmdExpire, 2*sec, &api.ExpireCommand{})
	b := keyLeaseOf(t, h.batch(2*sec+sec/2, wAcquire(caller("b", 1, 1), "acme", 100_000))).GetGrant()
	if b.GetStartMilli() != 6_000 {
		t.Fatalf("after a's chunk expired the next window granted %d, want 6000 (its allowance counted)", b.GetStartMilli())
	}
}

// TestWindowDebtSurvivesSnapshot: a window key's debt and its chunks'
// allowances are in the snapshot: the restored state is the one saved
// (the same hash) and the next window starts in the same debt. The
// negative control, snapshots without them (faultWindowSnapshotDropsDebt,
// -tags ration_faults), restores another state: caught.
func TestWindowDebtSurvivesSnapshot(t *testing.T) {
	for _, broken := range controls(false, true) {
		h := windowDebtHarness(t, true)
		g := keyLeaseOf(t, h.batch(sec/2, wAcquire(caller("a", 1, 1), "acme", 100_000))).GetGrant()
		c := keyLeaseOf(t, h.batch(sec/2, wAcquire(caller("c", 1, 1), "acme", 100_000))).GetGrant()
		h.batch(sec/2, wReleaseDebt(caller("c", 1, 2), "acme", c.GetLeaseId(), 0))
		if g.GetDebtAllowanceMilli() != 4_000 {
			t.Fatalf("grant %v", g)
		}
		if broken {
			h.f.st.fault = faultWindowSnapshotDropsDebt
		}
		snap := snapshotBytes(t, h.f)
		h.f.st.fault = faultNone
		h2 := &harness{t: t, f: New(nil), index: h.index}
		if err := h2.f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
			t.Fatal(err)
		}
		_, hash1 := h.f.StateHash()
		_, hash2 := h2.f.StateHash()
		l1, l2 := h.f.st.win.keys["daily"]["acme"], h2.f.st.win.keys["daily"]["acme"]
		same := hash1 == hash2 && l1.DebtMilli() == l2.DebtMilli() && allowances(l1) == allowances(l2)
		if broken {
			if same {
				t.Fatal("the control (snapshots drop window debt) was not caught")
			}
			t.Logf("control caught: restored debt %d, allowances %d (saved: %d, %d)", l2.DebtMilli(), allowances(l2), l1.DebtMilli(), allowances(l1))
			continue
		}
		if !same {
			t.Fatalf("restored: hash %s (want %s), debt %d (want %d), allowances %d (want %d)", hash2, hash1, l2.DebtMilli(), l1.DebtMilli(), allowances(l2), allowances(l1))
		}
		if after := snapshotBytes(t, h2.f); !bytes.Equal(snap, after) {
			t.Fatal("snapshot -> restore -> snapshot is not byte-identical")
		}
		// a never releases: its whole allowance counts at its expiry, on
		// the restored server as on the saved one.
		for _, x := range []*harness{h, h2} {
			x.apply(CmdExpire, 2*sec, &api.ExpireCommand{})
			b := keyLeaseOf(t, x.batch(2*sec+sec/2, wAcquire(caller("b", 1, 1), "acme", 100_000))).GetGrant()
			if b.GetStartMilli() != 6_000 {
				t.Fatalf("the next window granted %d, want 6000", b.GetStartMilli())
			}
		}
	}
}

func allowances(l *lease.WindowLedger) int64 {
	var sum int64
	for _, le := range l.State().Leases {
		sum += le.DebtAllowanceMilli
	}
	return sum
}

package fsm

import (
	"bytes"
	"testing"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/lease"
)

const debtPolicy = `
policies:
  - name: llm
    algorithm: token-bucket
    rate: 1
    burst: 10
    start: full
    key: [tenant]
    lease: {duration: 5s}
    max_debt: 12
`

func llmKey(t string) *api.Key {
	return &api.Key{Policy: "llm", Attributes: map[string]string{"tenant": t}}
}

// debtLedger is the ledger of llm/ck, live or retired (nil: none).
func debtLedger(h *harness, ck string) *lease.Ledger {
	if m := h.f.st.keys["llm"]; m != nil {
		if kl := m.at(ck); kl != nil {
			return kl.ledger
		}
	}
	if rp := h.f.st.retired["llm"]; rp != nil && rp.keys != nil {
		if kl := rp.keys.at(ck); kl != nil {
			return kl.ledger
		}
	}
	return nil
}

func releaseDebt(c *api.Caller, k *api.Key, id uint64, debt int64) *api.LeaseOp {
	return &api.LeaseOp{Op: &api.LeaseOp_Release{Release: &api.ReleaseRequest{Caller: c, Keys: []*api.ReleaseKey{{Key: k, LeaseId: id, DebtMilli: debt}}}}}
}

// TestDebtWaitsForItsSwitch: with FeatureDebt off, a policy's max_debt
// and a release's debt_milli are ignored, as by a server that predates
// them (no allowance, no key debt, and the state is that of the same log
// without them); on, a grant carries an allowance, a release's debt stays
// in the key's budget and the next holder starts with nothing.
func TestDebtWaitsForItsSwitch(t *testing.T) {
	for _, on := range []bool{false, true} {
		h := newHarness(t)
		if on {
			h.enableFeatures(KnownFeatures)
		}
		h.applyYAML(0, debtPolicy)
		g := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), llmKey("acme"))))
		if want := map[bool]int64{false: 0, true: 6_000}[on]; g.GetDebtAllowanceMilli() != want || g.GetStartMilli() != 10_000 {
			t.Fatalf("switch on %v: grant %v, want allowance %d and a full bucket", on, g, want)
		}
		// a spent its 10 tokens and charged 4 more after the work.
		h.batch(2*sec, releaseDebt(caller("a", 1, 2), llmKey("acme"), g.GetLeaseId(), 4_000))
		l := debtLedger(h, "acme")
		if want := map[bool]int64{false: 0, true: 4_000}[on]; l.DebtMilli() != want {
			t.Fatalf("switch on %v: key debt %d after the release, want %d", on, l.DebtMilli(), want)
		}
		// One second later the pool minted 1 token (999 milli-tokens, at
		// r/(1+ρ)): it paid debt, or (off) it is b's.
		b := grantOf(t, h.batch(3*sec, acquire(caller("b", 1, 1), llmKey("acme"))))
		if want := map[bool]int64{false: 999, true: 0}[on]; b.GetStartMilli() != want {
			t.Fatalf("switch on %v: b starts with %d, want %d", on, b.GetStartMilli(), want)
		}
		if on && (l.DebtMilli() != 3_001 || b.GetDebtAllowanceMilli() != 6_000) {
			t.Fatalf("key debt %d, b's allowance %d: want 3001 and 6000 (half of max_debt 12: one seat kept for a newcomer)", l.DebtMilli(), b.GetDebtAllowanceMilli())
		}
	}
}

// TestDebtOutlivesItsHolder: a holder that never releases (a dead
// replica) leaves its whole allowance as key debt at its expiry; a policy
// delete and re-apply keeps the debt, and so does a snapshot round trip
// (lease.TestHoldAllKeepsDebt: an operator's restore, rule j).
func TestDebtOutlivesItsHolder(t *testing.T) {
	h := newHarness(t)
	h.enableFeatures(KnownFeatures)
	h.applyYAML(0, debtPolicy)
	g := grantOf(t, h.batch(sec, acquire(caller("a", 1, 1), llmKey("acme"))))
	if g.GetDebtAllowanceMilli() != 6_000 {
		t.Fatalf("grant %v", g)
	}
	h.apply(CmdExpire, 6*sec, &api.ExpireCommand{})
	l := debtLedger(h, "acme")
	if l.LeaseCount() != 0 || l.DebtMilli() != 6_000 {
		t.Fatalf("after the expiry: %d leases, key debt %d, want the whole allowance 6000", l.LeaseCount(), l.DebtMilli())
	}
	if r := h.deletePolicy(6*sec, "llm"); r.Err != nil {
		t.Fatal(r.Err)
	}
	h.apply(CmdExpire, 7*sec, &api.ExpireCommand{}) // a retired key in debt is not collected
	h.applyYAML(7*sec, debtPolicy)
	if l := debtLedger(h, "acme"); l == nil || l.DebtMilli() != 5_001 {
		t.Fatalf("after delete and re-apply, 1 s later: ledger %v, want key debt 5001", l)
	}
	before := snapshotBytes(t, h.f)
	g2 := New(nil)
	if err := g2.Restore(nopCloser{bytes.NewReader(before)}); err != nil {
		t.Fatal(err)
	}
	if after := snapshotBytes(t, g2); !bytes.Equal(before, after) {
		t.Fatal("snapshot -> restore -> snapshot is not byte-identical")
	}
	if l := debtLedger(&harness{f: g2}, "acme"); l == nil || l.DebtMilli() != 5_001 {
		t.Fatalf("restored: key debt %v, want 5001", l)
	}
	// A new holder's grant: no tokens while the key is in debt, and its
	// allowance (half of max_debt: one seat kept), which the debt leaves
	// room for.
	b := grantOf(t, h.batch(8*sec, acquire(caller("b", 1, 1), llmKey("acme"))))
	if b.GetStartMilli() != 0 || b.GetDebtAllowanceMilli() != 6_000 {
		t.Fatalf("b's grant with debt 4002 left: %v", b)
	}
	if err := debtLedger(h, "acme").CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

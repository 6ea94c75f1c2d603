package fsm

import (
	"bytes"
	"slices"
	"testing"

	"github.com/ration-dev/ration/api"
)

// TestReplacedTermsSurviveSnapshot: a grant that replaced the same holder's
// live lease keeps the replaced terms held (lease rule h), and a snapshot
// carries them: the restored FSM still refuses the budget they hold.
func TestReplacedTermsSurviveSnapshot(t *testing.T) {
	h := newHarness(t)
	h.batch(sec, acquire(caller("a", 1, 1), tenant("acme")))
	h.batch(2*sec, acquire(caller("a", 1, 2), tenant("acme"))) // replaces the first lease
	le := h.f.st.keys["per-tenant"].at("acme").ledger.Leases()
	if len(le) != 1 || len(le[0].Replaced) != 1 {
		t.Fatalf("leases after the replacing grant = %+v", le)
	}
	before := snapshotBytes(t, h.f)
	g := New(nil)
	if err := g.Restore(nopCloser{bytes.NewReader(before)}); err != nil {
		t.Fatal(err)
	}
	if after := snapshotBytes(t, g); !bytes.Equal(before, after) {
		t.Fatal("snapshot -> restore -> snapshot is not byte-identical")
	}
	got := g.st.keys["per-tenant"].at("acme").ledger.Leases()
	if len(got) != 1 || !slices.Equal(got[0].Replaced, le[0].Replaced) {
		t.Fatalf("restored leases = %+v, want replaced %+v", got, le[0].Replaced)
	}
	// Another client asks at once: the replaced lease still holds all of
	// r and B, so it gets nothing, before and after the restore.
	h2 := &harness{t: t, f: g, index: h.index}
	for _, x := range []*harness{h, h2} {
		ops := x.batch(3*sec, acquire(caller("b", 1, 1), tenant("acme")))
		gr := ops[0].Lease.GetLeases()[0].GetGrant()
		if gr.GetRateMilliPerSec() != 0 || gr.GetCapMilli() != 0 {
			t.Fatalf("a second client got %v beside a replaced lease holding the whole budget", gr)
		}
	}
}

// TestGrantCarriesKeyAttributes: every grant names the policy's key
// attributes, and says so even when there are none (a global policy), so
// the client can tell which of a key's attributes count.
func TestGrantCarriesKeyAttributes(t *testing.T) {
	h := newHarness(t)
	ops := h.batch(sec, acquire(caller("a", 1, 1), &api.Key{Policy: "per-tenant", Attributes: map[string]string{"tenant": "acme", "route": "x"}}, &api.Key{Policy: "global"}))
	keyed, global := ops[0].Lease.GetLeases()[0].GetGrant(), ops[0].Lease.GetLeases()[1].GetGrant()
	if !keyed.GetKeyAttributesSet() || !slices.Equal(keyed.GetKeyAttributes(), []string{"tenant"}) || keyed.GetCanonicalKey() != "acme" {
		t.Fatalf("keyed grant = %v", keyed)
	}
	if !global.GetKeyAttributesSet() || len(global.GetKeyAttributes()) != 0 {
		t.Fatalf("global grant = %v", global)
	}
}

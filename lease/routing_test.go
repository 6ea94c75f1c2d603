package lease

import (
	"fmt"
	"testing"
)

// TestContended: a key is contended while its holders' measured demands,
// each clipped to r, sum above r (a newcomer's unknown demand left out);
// with few holders (the scans) and with many (the index).
func TestContended(t *testing.T) {
	l := newTestLedger(t, 10_000, 100_000)
	if l.Contended() {
		t.Fatal("a key with no holder is contended")
	}
	a := vgrant(t, l, 0, "a", 1<<40, 10_000) // unknown demand: all of r, clipped
	if l.Contended() {
		t.Fatal("one holder asking for all of r (clipped to r) is not above r")
	}
	a = vrenew(t, l, sec, "a", a, 6_000, 10_000, a.Version)
	b := vgrant(t, l, sec+1, "b", 3_000, 10_000)
	if l.Contended() {
		t.Fatal("demands of 6/s and 3/s on r = 10/s: not contended")
	}
	vrenew(t, l, 2*sec, "b", b, 5_000, 10_000, b.Version)
	if !l.Contended() {
		t.Fatal("demands of 6/s and 5/s on r = 10/s: contended")
	}
	vrenew(t, l, 3*sec, "a", a, 0, 0, a.Version)
	if l.Contended() {
		t.Fatal("a idle, b at 5/s: not contended")
	}
	// A newcomer that has not measured its demand (the client's sentinel)
	// is left out until its first renewal says what it is.
	c := vgrant(t, l, 3*sec+1, "c", unknownDemand, unknownDemand)
	if l.Contended() {
		t.Fatal("b at 5/s and a newcomer of unknown demand: not contended")
	}
	vrenew(t, l, 4*sec, "c", c, 6_000, 10_000, c.Version)
	if !l.Contended() {
		t.Fatal("b at 5/s and c at 6/s: contended")
	}

	// Many holders: the index answers.
	m := newTestLedger(t, 10_000, 1_000_000)
	gs := make([]Grant, 2*indexMinLeases)
	for i := range gs {
		gs[i] = vgrant(t, m, int64(i), fmt.Sprintf("h%03d", i), 10_000/int64(len(gs)), 1_000)
	}
	gs[0] = vrenew(t, m, sec, "h000", gs[0], 10_000/int64(len(gs)), 1_000, gs[0].Version)
	if !m.ix.ok {
		t.Fatal("no index with many holders")
	}
	vgrant(t, m, sec+1, "newcomer", unknownDemand, unknownDemand)
	if m.Contended() || m.contendedScan() {
		t.Fatalf("%d holders asking for r/%d each, and a newcomer of unknown demand: not contended", len(gs), len(gs))
	}
	vrenew(t, m, 2*sec, "h000", gs[0], 2*10_000/int64(len(gs)), 1_000, gs[0].Version)
	if !m.Contended() || !m.contendedScan() {
		t.Fatal("one holder asking for one more share: contended")
	}
}

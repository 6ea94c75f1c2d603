package lease

import (
	"flag"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// The differential tests of the per-key indexes (ledger_index.go): the
// indexed ledger against the pre-index one (ledger_ref_test.go), operation
// by operation, on random sequences of grants, renewals (changing demands,
// weights, acknowledgements, clamp reports), releases, expiries,
// reconfigurations, holds (rule j), revocations and snapshot round trips.
// After every operation the two must agree on the answer (Grant, result,
// error), on the full LedgerState, on the queries, and on CheckInvariants;
// and the index must equal one rebuilt from scratch.

type diffPair struct {
	ref *refLedger
	l   *Ledger
	now int64
	seq map[string]uint64
	// checkIndex: compare the index with a fresh rebuild after each step.
	checkIndex bool
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func (p *diffPair) same(t *rapid.T, what string, a, b any, ea, eb error) {
	t.Helper()
	if errText(ea) != errText(eb) {
		t.Fatalf("%s: errors differ: indexed %v, reference %v", what, ea, eb)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: answers differ:\nindexed   %+v\nreference %+v", what, a, b)
	}
	p.compare(t, what)
}

func (p *diffPair) compare(t *rapid.T, what string) {
	t.Helper()
	sl, sr := p.l.State(), p.ref.State()
	if !reflect.DeepEqual(sl, sr) {
		t.Fatalf("%s: states differ:\nindexed   %+v\nreference %+v", what, sl, sr)
	}
	// The live states too, not only their copies (nil and empty slices).
	if !reflect.DeepEqual(p.l.s, p.ref.s) {
		t.Fatalf("%s: live states differ", what)
	}
	e1, f1 := p.l.NextExpiry()
	e2, f2 := p.ref.NextExpiry()
	if e1 != e2 || f1 != f2 {
		t.Fatalf("%s: NextExpiry differs: indexed %d %v, reference %d %v", what, e1, f1, e2, f2)
	}
	hr1, hc1 := p.l.heldTotal()
	hr2, hc2 := p.ref.heldTotal()
	if hr1 != hr2 || hc1 != hc2 {
		t.Fatalf("%s: Held differs: indexed %d %d, reference %d %d", what, hr1, hc1, hr2, hc2)
	}
	if a, b := p.l.PoolFullAt(), p.ref.PoolFullAt(); a != b {
		t.Fatalf("%s: PoolFullAt differs: indexed %d, reference %d", what, a, b)
	}
	if a, b := errText(p.l.CheckInvariants()), errText(p.ref.CheckInvariants()); a != b {
		t.Fatalf("%s: CheckInvariants differs: indexed %s, reference %s", what, a, b)
	}
	if err := p.l.CheckInvariants(); err != nil && p.l.fault == faultNone {
		t.Fatalf("%s: %v", what, err)
	}
	if p.checkIndex {
		if err := p.l.checkIndexAgainstRebuild(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

// checkIndexAgainstRebuild compares an up-to-date index with one built
// from scratch from the same state.
func (l *Ledger) checkIndexAgainstRebuild() error {
	if !l.ix.ok {
		return nil
	}
	fresh := &Ledger{s: cloneState(l.s), fault: l.fault, quietAck: l.quietAck}
	old := indexMinLeases
	indexMinLeases = 0 // an index kept while leases went below the minimum is still exact
	fresh.rebuildIndex()
	indexMinLeases = old
	a, b := &l.ix, &fresh.ix
	n := len(l.s.Leases)
	switch {
	case !slices.Equal(a.held[:n], b.held[:n]) || a.sumRate != b.sumRate || a.sumCap != b.sumCap:
		return fmt.Errorf("index: held terms %v (%d, %d), rebuilt %v (%d, %d)", a.held[:n], a.sumRate, a.sumCap, b.held[:n], b.sumRate, b.sumCap)
	case a.big != b.big && !a.big:
		return fmt.Errorf("index: big %v, rebuilt %v", a.big, b.big)
	case a.nextBreak() != b.nextBreak():
		return fmt.Errorf("index: next break %d, rebuilt %d", a.nextBreak(), b.nextBreak())
	case !slices.Equal(a.breaks.key[:n], b.breaks.key[:n]):
		return fmt.Errorf("index: breaks %v, rebuilt %v", a.breaks.key[:n], b.breaks.key[:n])
	case !slices.Equal(a.verSup[:n], b.verSup[:n]) || a.nVerSup != b.nVerSup || a.sumW != b.sumW:
		return fmt.Errorf("index: superseded flags or weight sum differ")
	case l.Contended() != l.contendedScan():
		return fmt.Errorf("index: contended %v, from the leases %v", l.Contended(), l.contendedScan())
	case !slices.Equal(a.expiry.key[:n], b.expiry.key[:n]):
		return fmt.Errorf("index: hold %v, rebuilt %v", a.expiry.key[:n], b.expiry.key[:n])
	case !slices.Equal(a.rateD[:n], b.rateD[:n]) || !slices.Equal(a.burstD[:n], b.burstD[:n]) ||
		!slices.Equal(a.floor[:n], b.floor[:n]) || !slices.Equal(a.idle[:n], b.idle[:n]) || a.nIdle != b.nIdle || a.nUnknown != b.nUnknown:
		return fmt.Errorf("index: claims differ")
	case !maps.Equal(a.weights, b.weights) || !maps.Equal(a.floors, b.floors):
		return fmt.Errorf("index: weights %v floors %v, rebuilt %v %v", a.weights, a.floors, b.weights, b.floors)
	case a.maxFloor < b.maxFloor:
		return fmt.Errorf("index: max floor %d below the rebuilt %d", a.maxFloor, b.maxFloor)
	case !slices.Equal(a.rateDiv.blocks, b.rateDiv.blocks) || !slices.Equal(a.burstDiv.blocks, b.burstDiv.blocks):
		return fmt.Errorf("index: block sums %v %v, rebuilt %v %v", a.rateDiv.blocks, a.burstDiv.blocks, b.rateDiv.blocks, b.burstDiv.blocks)
	case !slices.Equal(a.rateDiv.vals, b.rateDiv.vals) || a.rateDiv.sum != b.rateDiv.sum || a.rateDiv.total != b.rateDiv.total:
		return fmt.Errorf("index: rate demands %v (Σ %d of %d), rebuilt %v (Σ %d of %d)", a.rateDiv.vals, a.rateDiv.sum, a.rateDiv.total, b.rateDiv.vals, b.rateDiv.sum, b.rateDiv.total)
	case !slices.Equal(a.burstDiv.vals, b.burstDiv.vals) || a.burstDiv.sum != b.burstDiv.sum || a.burstDiv.total != b.burstDiv.total:
		return fmt.Errorf("index: burst demands %v (Σ %d of %d), rebuilt %v (Σ %d of %d)", a.burstDiv.vals, a.burstDiv.sum, a.burstDiv.total, b.burstDiv.vals, b.burstDiv.sum, b.burstDiv.total)
	}
	if as := a.sub; as != nil {
		fresh.buildSubset(as.F)
		bs := b.sub
		switch {
		case as.K != bs.K || !slices.Equal(as.cand, bs.cand) || !slices.Equal(as.inc[:n], bs.inc[:n]) || !slices.Equal(as.member[:n], bs.member[:n]):
			return fmt.Errorf("index: subset order %v (K %d), rebuilt %v (K %d)", as.cand, as.K, bs.cand, bs.K)
		case !slices.Equal(as.rateM[:n], bs.rateM[:n]) || !slices.Equal(as.extraM[:n], bs.extraM[:n]):
			return fmt.Errorf("index: subset members' demands differ")
		case !slices.Equal(as.mRate.vals, bs.mRate.vals) || !slices.Equal(as.mRate.blocks, bs.mRate.blocks) || as.mRate.sum != bs.mRate.sum || as.mRate.total != bs.mRate.total,
			!slices.Equal(as.mExtra.vals, bs.mExtra.vals) || !slices.Equal(as.mExtra.blocks, bs.mExtra.blocks) || as.mExtra.sum != bs.mExtra.sum || as.mExtra.total != bs.mExtra.total:
			return fmt.Errorf("index: subset sums differ")
		}
	}
	for _, h := range []*posHeap{&a.expiry, &a.breaks} {
		if len(h.heap) != n || len(h.key) != n {
			return fmt.Errorf("index: heap of %d for %d leases", len(h.heap), n)
		}
		for k := range h.heap {
			if int(h.pos[h.heap[k]]) != k || (k > 0 && h.less(k, (k-1)/2)) {
				return fmt.Errorf("index: heap broken at %d", k)
			}
		}
	}
	return nil
}

var diffClients = []string{"a", "b", "c", "d", "e", "f", "g", "\x00", "ü-long-client-name"}

var diffManyClients = func() []string {
	out := slices.Clone(diffClients)
	for j := 0; j < 150; j++ {
		out = append(out, fmt.Sprintf("replica-%03d", j))
	}
	return out
}()

func drawDiffConfig(t *rapid.T, label string) LedgerConfig {
	return LedgerConfig{
		RateMilliPerSec: rapid.SampledFrom([]int64{0, 1, 999, 10_000, 1_000_000, 10_000_000, MaxRateMilliPerSec}).Draw(t, label+"rate"),
		CapacityMilli:   rapid.SampledFrom([]int64{0, 1, 1000, 2500, 10_000, 1_000_000, 10_000_000, MaxCapacityMilli}).Draw(t, label+"cap"),
		StartFull:       rapid.Bool().Draw(t, label+"full"),
		MaxLeases:       rapid.SampledFrom([]int{0, 2, 5}).Draw(t, label+"max"),
		DriftPPM:        rapid.SampledFrom([]int64{0, 1000}).Draw(t, label+"drift"),
		RatePeriodNanos: rapid.SampledFrom([]int64{0, 0, NanosPerSecond / 3, 60 * NanosPerSecond}).Draw(t, label+"period"),
	}
}

func drawDemand(t *rapid.T, label string) (rate, burst, maxCost int64) {
	pick := rapid.SampledFrom([]int64{0, 0, 1, 500, 1000, 1500, 3000, 10_000, 2_000_000, unknownDemand})
	return pick.Draw(t, label+"rate"), pick.Draw(t, label+"burst"), rapid.SampledFrom([]int64{0, 0, 1000, 2000, 5000}).Draw(t, label+"maxcost")
}

// runDiffHook sees each ledger a run drops (a restore replaces it) or
// ends with: the coverage test counts how its shares were computed.
var runDiffHook = func(*Ledger) {}

func runDiff(t *rapid.T, fault Fault) {
	// Index every ledger, or those of a few leases and more.
	old := indexMinLeases
	indexMinLeases = rapid.SampledFrom([]int{0, 0, 1, 4}).Draw(t, "indexmin")
	defer func() { indexMinLeases = old }()
	var p *diffPair
	defer func() {
		if p != nil {
			runDiffHook(p.l)
		}
	}()
	cfg := drawDiffConfig(t, "cfg.")
	// A hot key: enough holders for the sorted demands to span several
	// blocks and the subset order to be long.
	many := rapid.IntRange(0, 5).Draw(t, "many") == 0
	if many {
		cfg.MaxLeases = 0
	}
	start := rapid.Int64Range(0, 10*NanosPerSecond).Draw(t, "start")
	ref, err1 := newRefLedger(cfg, start)
	l, err2 := newLedger(cfg, start)
	if errText(err1) != errText(err2) {
		t.Fatalf("newLedger: %v vs %v", err2, err1)
	}
	if err1 != nil {
		return
	}
	l.injectFault(fault)
	ref.fault = faultNone
	p = &diffPair{ref: ref, l: l, now: start, seq: map[string]uint64{}, checkIndex: fault == faultNone}
	// Most keys have one weight for every holder (the index's fast
	// division); some mix them (its fallback).
	weights := []int64{rapid.SampledFrom([]int64{0, 1, 3}).Draw(t, "weight")}
	if rapid.Bool().Draw(t, "mixed") {
		weights = []int64{0, 1, 2, 7, 1 << 20}
	}
	ttls := []int64{NanosPerSecond, 5 * NanosPerSecond, 30 * NanosPerSecond}
	steps := rapid.IntRange(1, 120).Draw(t, "steps")
	clients := diffClients
	if many {
		clients, steps = diffManyClients, rapid.IntRange(100, 400).Draw(t, "longsteps")
		ttls = ttls[2:]
	}
	for step := 0; step < steps; step++ {
		dts := []int64{0, 1, 1000, NanosPerSecond / 10, NanosPerSecond, 3 * NanosPerSecond, 40 * NanosPerSecond}
		if many {
			dts = dts[:4] // the leases live long enough to pile up
		}
		p.now += rapid.SampledFrom(dts).Draw(t, "dt")
		if rapid.IntRange(0, 40).Draw(t, "back") == 0 && !many {
			p.now -= NanosPerSecond // time going backwards: both must refuse alike
		}
		now := p.now
		op := rapid.IntRange(0, 19).Draw(t, "op")
		what := fmt.Sprintf("step %d op %d at %d", step, op, now)
		switch {
		case op < 5: // grant
			id := rapid.SampledFrom(clients).Draw(t, "client")
			inc := rapid.Uint64Range(1, 3).Draw(t, "inc")
			key := fmt.Sprintf("%s/%d", id, inc)
			seq := p.seq[key] + 1
			if rapid.IntRange(0, 9).Draw(t, "stale") == 0 {
				seq--
			}
			p.seq[key] = max(p.seq[key], seq)
			r, b, mc := drawDemand(t, "g.")
			req := GrantRequest{ClientID: id, Incarnation: inc, Seq: seq, Weight: rapid.SampledFrom(weights).Draw(t, "w"),
				DemandRateMilliPerSec: r, DemandBurstMilli: b, DemandMaxCostMilli: mc,
				TTLNanos: rapid.SampledFrom(ttls).Draw(t, "ttl"), LeftoverBurst: rapid.Bool().Draw(t, "lb")}
			g1, e1 := p.l.Grant(now, req)
			g2, e2 := p.ref.Grant(now, req)
			p.same(t, what+" grant", g1, g2, e1, e2)
		case op < 12: // renew, mostly a live lease
			req := RenewRequest{ClientID: "a", Incarnation: 1, LeaseID: 1, TTLNanos: NanosPerSecond}
			if n := len(p.ref.s.Leases); n > 0 && rapid.IntRange(0, 9).Draw(t, "bogus") > 0 {
				le := p.ref.s.Leases[rapid.IntRange(0, n-1).Draw(t, "which")]
				req = RenewRequest{ClientID: le.ClientID, Incarnation: le.Incarnation, LeaseID: le.ID,
					Weight: le.Weight, DemandRateMilliPerSec: le.DemandRateMilliPerSec, DemandBurstMilli: le.DemandBurstMilli,
					DemandMaxCostMilli: le.DemandMaxCostMilli, TTLNanos: rapid.SampledFrom(ttls).Draw(t, "ttl"),
					LeftoverBurst: rapid.Bool().Draw(t, "lb"), QuietAck: rapid.IntRange(0, 7).Draw(t, "quiet") > 0}
				if rapid.IntRange(0, 3).Draw(t, "change") > 0 {
					req.DemandRateMilliPerSec, req.DemandBurstMilli, req.DemandMaxCostMilli = drawDemand(t, "r.")
				}
				if rapid.IntRange(0, 5).Draw(t, "rew") == 0 {
					req.Weight = rapid.SampledFrom(weights).Draw(t, "w")
				}
				req.AckedVersion = le.Current.Version - uint64(rapid.IntRange(-1, 2).Draw(t, "ackback"))
				req.ClampedMilli = rapid.SampledFrom([]int64{0, 1, 700, 5000, 1 << 40}).Draw(t, "clamped")
			} else if n > 0 {
				req.LeaseID = LeaseID(rapid.IntRange(0, 40).Draw(t, "bogusid"))
				req.DemandRateMilliPerSec = rapid.SampledFrom([]int64{-1, 0, 5}).Draw(t, "bogusrate")
			}
			g1, e1 := p.l.Renew(now, req)
			g2, e2 := p.ref.Renew(now, req)
			p.same(t, what+" renew", g1, g2, e1, e2)
		case op < 14: // release
			req := ReleaseRequest{ClientID: "b", Incarnation: 2, LeaseID: 3}
			if n := len(p.ref.s.Leases); n > 0 && rapid.IntRange(0, 9).Draw(t, "bogus") > 0 {
				le := p.ref.s.Leases[rapid.IntRange(0, n-1).Draw(t, "which")]
				req = ReleaseRequest{ClientID: le.ClientID, Incarnation: le.Incarnation, LeaseID: le.ID}
			}
			req.UnspentMilli = rapid.SampledFrom([]int64{0, 1, 1000, 1 << 40}).Draw(t, "unspent")
			r1, e1 := p.l.Release(now, req)
			r2, e2 := p.ref.Release(now, req)
			p.same(t, what+" release", r1, r2, e1, e2)
		case op < 16: // expire
			through := now - rapid.SampledFrom([]int64{0, 0, 1, NanosPerSecond}).Draw(t, "margin")
			r1, e1 := p.l.ExpireThrough(now, through)
			r2, e2 := p.ref.ExpireThrough(now, through)
			p.same(t, what+" expire", r1, r2, e1, e2)
		case op == 16: // reconfigure
			c := drawDiffConfig(t, "re.")
			if rapid.Bool().Draw(t, "sameperiod") {
				c.RatePeriodNanos = p.ref.s.Config.RatePeriodNanos
			}
			e1 := p.l.Reconfigure(now, c)
			e2 := p.ref.Reconfigure(now, c)
			p.same(t, what+" reconfigure", nil, nil, e1, e2)
		case op == 17: // rule (j), a restore's hold
			until := now + rapid.SampledFrom([]int64{0, NanosPerSecond, 10 * NanosPerSecond}).Draw(t, "hold")
			e1 := p.l.HoldAll(now, until)
			e2 := p.ref.HoldAll(now, until)
			p.same(t, what+" hold", nil, nil, e1, e2)
		case op == 18: // revoke
			id := rapid.SampledFrom(diffClients).Draw(t, "client")
			inc := rapid.Uint64Range(1, 4).Draw(t, "inc")
			r1, e1 := p.l.Revoke(now, id, inc)
			r2, e2 := p.ref.Revoke(now, id, inc)
			p.same(t, what+" revoke", r1, r2, e1, e2)
		default: // a snapshot round trip: the index is rebuilt from the state
			l2, e1 := NewLedgerFromState(p.l.State())
			r2, e2 := newRefLedgerFromState(p.ref.State())
			if errText(e1) != errText(e2) {
				t.Fatalf("%s restore: %v vs %v", what, e1, e2)
			}
			if e1 == nil {
				runDiffHook(p.l)
				l2.injectFault(fault)
				p.l, p.ref = l2, r2
				p.compare(t, what+" restore")
			}
		}
	}
}

// TestLedgerIndexDifferential: the indexed ledger is the reference ledger,
// bit for bit, on every operation sequence.
// It also checks that the sequences exercise both the index's division
// and the full one.
func TestLedgerIndexDifferential(t *testing.T) {
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		withRapidFlags(t, map[string]string{"rapid.checks": "1000"})
	}
	var fast, full int
	runDiffHook = func(l *Ledger) { fast, full = fast+l.ix.fastTerms, full+l.ix.fullTerms }
	t.Cleanup(func() { runDiffHook = func(*Ledger) {} })
	rapid.Check(t, func(t *rapid.T) { runDiff(t, faultNone) })
	if fast == 0 || full == 0 {
		t.Fatalf("shares from the index %d times, from the full division %d: the sequences no longer exercise both", fast, full)
	}
	t.Logf("shares from the index %d times, from the full division %d", fast, full)
}

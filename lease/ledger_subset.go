package lease

import (
	"cmp"
	"slices"
)

// subsetIndex is divideBudget's step 2 (fair caps below the floor: full
// caps to a subset) kept up to date for a key whose holders have one
// weight and whose candidates (claims with a burst demand) have one floor
// F. Then the greedy membership is a prefix: every candidate takes F, so
// the first K = min(candidates, B/F) in the step's order (incumbents
// first, then rate demand, burst demand, both descending, then position)
// are the members, and their rates and extra caps are water-fillings over
// the members only (two sortedSums). A renewal moves its lease in the
// order and swaps at most one lease across the boundary.
//
// It is built when a renewal first needs it and dropped by anything it
// does not follow (a grant, a release, a rebuild, a claim that stops or
// starts being a candidate, a floor other than F).
type subsetIndex struct {
	F, K   int64
	cand   []int32 // candidate positions in the step's order
	inc    []bool  // by position: the lease holds a cap of at least its floor
	member []bool  // by position
	// By position: a member's rate demand and burst above F, else 0.
	rateM, extraM []int64
	mRate, mExtra sortedSum
}

// faultSubsetKeepsBoundary is a test-only fault: a candidate moving into
// the first K does not push the K-th out, so the subset has one member too
// many (TestLedgerIndexNegativeControl).
const faultSubsetKeepsBoundary Fault = 201

var _ = registerFault(faultSubsetKeepsBoundary, "faultSubsetKeepsBoundary")

func (l *Ledger) incumbent(j int) bool {
	c := l.s.Leases[j].Current.CapMilli
	return c > 0 && c >= l.ix.floor[j]
}

// candCmp is the step's order: incumbents first, then rate demand and
// burst demand, both descending, then position (the stable sort's).
func (l *Ledger) candCmp(a, b int32) int {
	ix, s := &l.ix, l.ix.sub
	if ia, ib := s.inc[a], s.inc[b]; ia != ib {
		if ia {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(ix.rateD[b], ix.rateD[a]); c != 0 {
		return c
	}
	if c := cmp.Compare(ix.burstD[b], ix.burstD[a]); c != 0 {
		return c
	}
	return cmp.Compare(a, b)
}

func (l *Ledger) buildSubset(f int64) {
	ix := &l.ix
	n := len(l.s.Leases)
	cfg := l.s.Config
	s := &subsetIndex{F: f, inc: make([]bool, n), member: make([]bool, n), rateM: make([]int64, n), extraM: make([]int64, n)}
	ix.sub = s
	for j := 0; j < n; j++ {
		s.inc[j] = l.incumbent(j)
		if ix.burstD[j] > 0 {
			s.cand = append(s.cand, int32(j))
		}
	}
	slices.SortFunc(s.cand, l.candCmp)
	s.K = min(int64(len(s.cand)), cfg.CapacityMilli/f)
	s.mRate.reset(cfg.RateMilliPerSec)
	s.mExtra.reset(cfg.CapacityMilli - s.K*f)
	for _, j := range s.cand[:s.K] {
		s.member[j] = true
		s.rateM[j] = ix.rateD[j]
		s.extraM[j] = ix.burstD[j] - f
		s.mRate.vals = append(s.mRate.vals, s.rateM[j])
		s.mExtra.vals = append(s.mExtra.vals, s.extraM[j])
	}
	s.mRate.sortAndSum()
	s.mExtra.sortAndSum()
}

func (l *Ledger) subJoin(j int32) {
	ix, s := &l.ix, l.ix.sub
	s.member[j] = true
	s.rateM[j], s.extraM[j] = ix.rateD[j], ix.burstD[j]-s.F
	s.mRate.insert(s.rateM[j])
	s.mExtra.insert(s.extraM[j])
}

func (l *Ledger) subLeave(j int32) {
	s := l.ix.sub
	s.mRate.remove(s.rateM[j])
	s.mExtra.remove(s.extraM[j])
	s.member[j], s.rateM[j], s.extraM[j] = false, 0, 0
}

// subRemove takes candidate j out of the order (its claim and incumbency
// still as the order has them); the members stay the first K.
func (l *Ledger) subRemove(j int) {
	s := l.ix.sub
	a, found := slices.BinarySearchFunc(s.cand, int32(j), l.candCmp)
	if !found {
		panic("lease: index: subset order lost a candidate")
	}
	s.cand = slices.Delete(s.cand, a, a+1)
	if s.member[j] {
		l.subLeave(int32(j))
		if int64(len(s.cand)) >= s.K {
			l.subJoin(s.cand[s.K-1])
		}
	}
}

// subInsert puts candidate j (its new claim and incumbency) back.
func (l *Ledger) subInsert(j int) {
	s := l.ix.sub
	b, _ := slices.BinarySearchFunc(s.cand, int32(j), l.candCmp)
	s.cand = slices.Insert(s.cand, b, int32(j))
	if int64(b) < s.K {
		l.subJoin(int32(j))
		if int64(len(s.cand)) > s.K && !l.has(faultSubsetKeepsBoundary) {
			l.subLeave(s.cand[s.K])
		}
	}
}

// subsetShares is divideBudget's rate and cap for lease i in step 2 with
// one floor f, followed by step 3 (the idle claims' split).
func (l *Ledger) subsetShares(i int, f int64) (rate, capMilli int64) {
	ix := &l.ix
	if ix.sub == nil || ix.sub.F != f {
		l.buildSubset(f)
	}
	s := ix.sub
	cfg := l.s.Config
	if s.member[i] {
		q, rem, unsat, all := s.mRate.level()
		rate = share(s.rateM, i, q, rem, unsat, all)
		q, rem, unsat, all = s.mExtra.level()
		capMilli = f + share(s.extraM, i, q, rem, unsat, all)
	}
	if ix.idle[i] {
		leftRate := cfg.RateMilliPerSec - min(cfg.RateMilliPerSec, s.mRate.sum)
		leftCap := s.mExtra.total - min(s.mExtra.total, s.mExtra.sum)
		r, c := l.idleSplit(i, leftRate, leftCap)
		rate, capMilli = rate+r, capMilli+c
	}
	return rate, capMilli
}

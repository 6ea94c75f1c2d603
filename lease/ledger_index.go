package lease

import (
	"math"
	"slices"
)

// A ledger's derived indexes (docs/scaling.md, "The order of work", item
// 1): what an operation on one lease needs of all the others, kept up to
// date by the operations so that a renewal on a key with thousands of
// holders does not rebuild held sums and the fair division from every
// lease.
//
// Nothing here is state: LedgerState and snapshots do not carry it, a
// restored ledger rebuilds it, and every answer it gives is the one the
// scans over l.s.Leases give (ledger_diff_test.go checks that against the
// pre-index ledger, kept in ledger_ref_test.go, after every operation).
// Whenever an index cannot answer exactly (it is out of date, a sum could
// overflow, the holders' weights differ, the subset step meets several
// floors), the ledger falls back to the scans and the full division.
//
// Upkeep: Renew updates the index in place for its one lease, Grant and
// Release insert or remove one entry; Expire (when it removes leases),
// Revoke, Reconfigure, HoldAll and an advance across an entry's expiry
// mark it stale, and the next renewal rebuilds it (O(n log n)).
type ledgerIndex struct {
	ok bool // describes l.s; otherwise unused until rebuilt

	// Held terms: held[j] is lease j's heldAt(t) for every t from the
	// ledger's time up to nextBreak; sumRate and sumCap their exact sums
	// (big: some term is too large for the sums to be exact in int64).
	held            []heldPair
	sumRate, sumCap int64
	big             bool
	// breaks orders the leases by their earliest superseded or replaced
	// entry's expiry (math.MaxInt64: none; math.MinInt64: an entry the
	// next advance must prune). Until its minimum (nextBreak) advance has
	// no break to mint across and nothing to prune.
	breaks posHeap

	// verSup[j]: lease j holds a versioned superseded version; nVerSup
	// counts them. sumW is Σ max(weight, 1) (Grant.RenewSoon).
	verSup  []bool
	nVerSup int
	sumW    int64

	// expiry orders the leases by holdUntil (NextExpiry, Expire).
	expiry posHeap

	// The fair division's inputs (divideBudget's claims without the
	// incumbency, which only its subset step reads), by lease position.
	rateD, burstD []int64 // demands clipped to r and B
	floor         []int64 // capFloor
	idle          []bool  // no rate and no burst demand
	nIdle         int
	nUnknown      int           // leases whose demand is still unknown (Contended)
	weights       map[int64]int // max(weight, 1) -> leases
	floors        map[int64]int // capFloor -> leases with a burst demand
	maxFloor      int64         // >= every key of floors
	rateDiv       sortedSum
	burstDiv      sortedSum
	// sumsExact: n·r and n·B fit in int64, so the sorted sums are exact.
	sumsExact bool
	// sub: divideBudget's subset step, while it applies (ledger_subset.go).
	sub *subsetIndex

	// Counters for tests: renewals and grants whose shares came from the
	// index or from the full division.
	fastTerms, fullTerms int
	rebuilds             int
}

type heldPair struct{ rate, capMilli int64 }

// heldExactLimit bounds every held term the index sums: with at most
// maxLeasesLimit (2^16) of them and a budget below 2^50, the sums stay
// below 2^63, so they equal the saturating sums of the scans.
const heldExactLimit = int64(1) << 46

// faultIndexHeldNotReduced is a test-only fault: a renewal adds its
// lease's new held terms to the index's sums without taking its old ones
// out. The differential tests must catch it (TestLedgerIndexNegativeControl).
const faultIndexHeldNotReduced Fault = 200

var _ = registerFault(faultIndexHeldNotReduced, "faultIndexHeldNotReduced")

// sortedSum is the multiset of one division's positive demands, in
// ascending order, with the sums of its blocks of sumBlock consecutive
// values: an insertion or removal shifts the values after it by one, so
// each later block gains one value at its start and loses one at its end
// (O(n/sumBlock) updates beside the move), and a prefix sum is a walk
// over the blocks plus one within a block.
type sortedSum struct {
	total  int64   // the amount divided
	vals   []int64 // ascending
	blocks []int64 // blocks[b] = Σ vals[b*sumBlock : (b+1)*sumBlock]
	sum    int64
}

const sumBlock = 64

func (s *sortedSum) reset(total int64) {
	s.total, s.vals, s.blocks, s.sum = total, s.vals[:0], s.blocks[:0], 0
}

// sortAndSum sorts vals (filled by the caller) and rebuilds the sums.
func (s *sortedSum) sortAndSum() {
	s.vals = slices.DeleteFunc(s.vals, func(v int64) bool { return v <= 0 })
	slices.Sort(s.vals)
	s.sum = 0
	s.blocks = s.blocks[:0]
	for k, v := range s.vals {
		if k%sumBlock == 0 {
			s.blocks = append(s.blocks, 0)
		}
		s.blocks[len(s.blocks)-1] += v
		s.sum += v
	}
}

func (s *sortedSum) insert(v int64) {
	if v <= 0 {
		return
	}
	k, _ := slices.BinarySearch(s.vals, v)
	s.vals = slices.Insert(s.vals, k, v)
	s.sum += v
	m := len(s.vals)
	if nb := (m + sumBlock - 1) / sumBlock; len(s.blocks) < nb {
		s.blocks = append(s.blocks, 0)
	}
	b := k / sumBlock
	s.blocks[b] += v
	// Each later boundary now holds what was the last value of the block
	// before it.
	for ; (b+1)*sumBlock < m; b++ {
		x := s.vals[(b+1)*sumBlock]
		s.blocks[b] -= x
		s.blocks[b+1] += x
	}
}

// replace changes one value old to new, moving only the values between
// their places (and the block sums those moves cross).
func (s *sortedSum) replace(old, new int64) {
	switch {
	case old == new:
		return
	case old <= 0 || new <= 0:
		s.remove(old)
		s.insert(new)
		return
	}
	v := s.vals
	s.sum += new - old
	if new > old {
		a, _ := slices.BinarySearch(v, old+1)
		a-- // the last old
		if a < 0 || v[a] != old {
			panic("lease: index: replacing a demand it does not hold")
		}
		e, _ := slices.BinarySearch(v, new) // the values in (a, e) move down one
		copy(v[a:e-1], v[a+1:e])
		v[e-1] = new
		s.blocks[a/sumBlock] -= old
		for b := (a/sumBlock + 1) * sumBlock; b < e; b += sumBlock {
			x := v[b-1] // was at b, the first of its block
			s.blocks[b/sumBlock] -= x
			s.blocks[b/sumBlock-1] += x
		}
		s.blocks[(e-1)/sumBlock] += new
		return
	}
	a, found := slices.BinarySearch(v, old) // the first old
	if !found {
		panic("lease: index: replacing a demand it does not hold")
	}
	e, _ := slices.BinarySearch(v, new+1) // the values in [e, a) move up one
	copy(v[e+1:a+1], v[e:a])
	v[e] = new
	s.blocks[a/sumBlock] -= old
	for b := (e/sumBlock + 1) * sumBlock; b <= a; b += sumBlock {
		x := v[b] // was at b-1, the last of its block
		s.blocks[(b-1)/sumBlock] -= x
		s.blocks[b/sumBlock] += x
	}
	s.blocks[e/sumBlock] += new
}

func (s *sortedSum) remove(v int64) {
	if v <= 0 {
		return
	}
	k, found := slices.BinarySearch(s.vals, v)
	if !found {
		panic("lease: index: removing a demand it does not hold")
	}
	s.vals = slices.Delete(s.vals, k, k+1)
	s.sum -= v
	m := len(s.vals)
	b := k / sumBlock
	s.blocks[b] -= v
	// Each later block's first value moved to the end of the block before.
	for ; (b+1)*sumBlock <= m; b++ {
		x := s.vals[(b+1)*sumBlock-1]
		s.blocks[b] += x
		s.blocks[b+1] -= x
	}
	s.blocks = s.blocks[:(m+sumBlock-1)/sumBlock]
}

// level is fairShares' water level for equal weights: every claim whose
// demand is at most q is satisfied; the others get q, and the first rem
// of them (in claim order) one more. all: every claim is satisfied.
//
// fairShares' rounds satisfy a prefix of the claims sorted by demand, and
// they stop at the first prefix k after which the next claim does not fit
// under the level of what is left, (total - Σ vals[:k]) / (m - k): levels
// only rise while claims that fit leave, so no earlier prefix stops
// them; and once a claim does not fit, none after it does (the level
// falls as it leaves), so the test is monotone in k: the first block
// whose last value stops holds the first k that does.
func (s *sortedSum) level() (q, rem, unsat int64, all bool) {
	m := len(s.vals)
	var pre int64 // Σ of the blocks before b
	for b, bs := range s.blocks {
		lo, hi := b*sumBlock, min((b+1)*sumBlock, m)
		if !s.stops(hi-1, pre+bs-s.vals[hi-1], m) {
			pre += bs
			continue
		}
		for k := lo; k < hi; k++ {
			if s.stops(k, pre, m) {
				c := int64(m - k)
				left := s.total - pre
				return left / c, left % c, c, false
			}
			pre += s.vals[k]
		}
		panic("lease: index: level not in its block")
	}
	return 0, 0, 0, true
}

// stops: claim k does not fit under the level left after the first k,
// whose sum is pre.
func (s *sortedSum) stops(k int, pre int64, m int) bool {
	left := s.total - pre
	if left < 0 {
		return true
	}
	return s.vals[k] > left/int64(m-k)
}

// share is fairShares' share of claim i (demand d[i]) given the level.
// unsat is the number of unsatisfied claims.
func share(d []int64, i int, q, rem, unsat int64, all bool) int64 {
	v := d[i]
	if all || v <= q {
		return v
	}
	if rem == 0 {
		return q
	}
	// The first rem unsatisfied claims in claim order get one more: count
	// those before i, or those after it if that is shorter. (Branch-free:
	// q - x < 0 exactly when x > q; demands are below 2^62.)
	var before int64
	if i <= len(d)/2 {
		for _, x := range d[:i] {
			before += int64(uint64(q-x) >> 63)
		}
	} else {
		var after int64
		for _, x := range d[i+1:] {
			after += int64(uint64(q-x) >> 63)
		}
		before = unsat - 1 - after
	}
	if before < rem {
		return q + 1
	}
	return q
}

// shareClaim is lease j's claim in the division, but for Incumbent.
func (l *Ledger) shareClaim(j int) budgetClaim {
	le := &l.s.Leases[j]
	c := budgetClaim{Weight: le.Weight, RateMilliPerSec: le.DemandRateMilliPerSec, BurstMilli: le.DemandBurstMilli, MaxCostMilli: le.DemandMaxCostMilli}
	if p := l.s.Config.RatePeriodNanos; p != 0 {
		// Demands are per second; the budget's rates per its period.
		c.RateMilliPerSec = MulDiv(c.RateMilliPerSec, p, NanosPerSecond)
	}
	return c
}

// ensureIndex rebuilds the index if it is stale.
func (l *Ledger) ensureIndex() {
	if !l.ix.ok {
		l.rebuildIndex()
	}
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4+1)
	}
	return s[:n]
}

// indexMinLeases: a ledger with fewer leases keeps no index. Its scans
// cost a few microseconds, and a million keys with a lease or two each
// then keep no index memory. (A variable for the differential tests,
// which index every ledger.)
var indexMinLeases = 32

func (l *Ledger) rebuildIndex() {
	ix := &l.ix
	if len(l.s.Leases) < indexMinLeases {
		if ix.held != nil || ix.ok {
			*ix = ledgerIndex{fastTerms: ix.fastTerms, fullTerms: ix.fullTerms, rebuilds: ix.rebuilds}
		}
		return
	}
	ix.rebuilds++
	ix.sub = nil
	n := len(l.s.Leases)
	cfg := l.s.Config
	now := l.s.NowNanos
	ix.held = grow(ix.held, n)
	ix.verSup = grow(ix.verSup, n)
	ix.expiry.resize(n)
	ix.breaks.resize(n)
	ix.rateD = grow(ix.rateD, n)
	ix.burstD = grow(ix.burstD, n)
	ix.floor = grow(ix.floor, n)
	ix.idle = grow(ix.idle, n)
	ix.sumRate, ix.sumCap, ix.big = 0, 0, false
	ix.nVerSup, ix.sumW, ix.nIdle, ix.nUnknown = 0, 0, 0, 0
	ix.weights = make(map[int64]int, 1)
	ix.floors = make(map[int64]int, 1)
	ix.maxFloor = 0
	ix.rateDiv.reset(cfg.RateMilliPerSec)
	ix.burstDiv.reset(cfg.CapacityMilli)
	ix.sumsExact = n < maxLeasesLimit && max(cfg.RateMilliPerSec, cfg.CapacityMilli) <= (int64(1)<<62)/int64(n+1)
	for j := range l.s.Leases {
		le := &l.s.Leases[j]
		r, c := le.heldAt(now)
		ix.held[j] = heldPair{r, c}
		ix.sumRate += r
		ix.sumCap += c
		if r > heldExactLimit || c > heldExactLimit {
			ix.big = true
		}
		ix.breaks.key[j] = firstBreak(le, true)
		ix.verSup[j] = l.holdsSuperseded(j)
		if ix.verSup[j] {
			ix.nVerSup++
		}
		ix.sumW += max(le.Weight, 1)
		ix.expiry.key[j] = le.holdUntil()
		l.addClaim(j)
	}
	ix.rateDiv.vals = append(ix.rateDiv.vals[:0], ix.rateD[:n]...)
	ix.rateDiv.sortAndSum()
	ix.burstDiv.vals = append(ix.burstDiv.vals[:0], ix.burstD[:n]...)
	ix.burstDiv.sortAndSum()
	ix.expiry.init()
	ix.breaks.init()
	ix.ok = true
}

// addClaim records lease j's claim in the per-lease arrays and multisets
// (not in the sorted sums).
func (l *Ledger) addClaim(j int) {
	ix := &l.ix
	cfg := l.s.Config
	c := l.shareClaim(j)
	ix.rateD[j] = min(c.RateMilliPerSec, cfg.RateMilliPerSec)
	ix.burstD[j] = min(c.BurstMilli, cfg.CapacityMilli)
	ix.floor[j] = capFloor(c, cfg.CapacityMilli)
	ix.idle[j] = c.RateMilliPerSec == 0 && c.BurstMilli == 0
	if ix.idle[j] {
		ix.nIdle++
	}
	if unmeasured(&l.s.Leases[j]) {
		ix.nUnknown++
	}
	ix.weights[max(c.Weight, 1)]++
	if ix.burstD[j] > 0 {
		ix.floors[ix.floor[j]]++
		ix.maxFloor = max(ix.maxFloor, ix.floor[j])
	}
}

func (l *Ledger) dropClaim(j int) {
	ix := &l.ix
	if ix.idle[j] {
		ix.nIdle--
	}
	if unmeasured(&l.s.Leases[j]) {
		ix.nUnknown--
	}
	w := max(l.s.Leases[j].Weight, 1)
	if ix.weights[w]--; ix.weights[w] == 0 {
		delete(ix.weights, w)
	}
	if ix.burstD[j] > 0 {
		f := ix.floor[j]
		if ix.floors[f]--; ix.floors[f] == 0 {
			delete(ix.floors, f) // maxFloor stays an upper bound
		}
	}
}

// setClaim re-records lease j's claim after its weight or demands change
// to the given ones; call it with the lease still holding the old ones.
func (l *Ledger) setClaim(j int, weight, rate, burst, maxCost int64) {
	ix := &l.ix
	le := &l.s.Leases[j]
	if le.Weight == weight && le.DemandRateMilliPerSec == rate && le.DemandBurstMilli == burst && le.DemandMaxCostMilli == maxCost {
		return // the claim is unchanged
	}
	if !ix.ok {
		le.Weight, le.DemandRateMilliPerSec, le.DemandBurstMilli, le.DemandMaxCostMilli = weight, rate, burst, maxCost
		return
	}
	if ix.sub != nil {
		if ix.burstD[j] > 0 {
			l.subRemove(j)
		} else {
			ix.sub = nil // it may become a candidate
		}
	}
	l.dropClaim(j)
	oldRate, oldBurst := ix.rateD[j], ix.burstD[j]
	ix.sumW += max(weight, 1) - max(le.Weight, 1)
	le.Weight, le.DemandRateMilliPerSec, le.DemandBurstMilli, le.DemandMaxCostMilli = weight, rate, burst, maxCost
	l.addClaim(j)
	ix.rateDiv.replace(oldRate, ix.rateD[j])
	ix.burstDiv.replace(oldBurst, ix.burstD[j])
	if ix.sub != nil {
		if ix.burstD[j] > 0 && ix.floor[j] == ix.sub.F {
			l.subInsert(j)
		} else {
			ix.sub = nil
		}
	}
}

// updateHeld re-records lease j's held terms, superseded versions and
// expiry after an operation at the ledger's time changed them.
func (l *Ledger) updateHeld(j int) {
	ix := &l.ix
	if !ix.ok {
		return
	}
	le := &l.s.Leases[j]
	r, c := le.heldAt(l.s.NowNanos)
	if !l.has(faultIndexHeldNotReduced) {
		ix.sumRate -= ix.held[j].rate
		ix.sumCap -= ix.held[j].capMilli
	}
	ix.held[j] = heldPair{r, c}
	ix.sumRate += r
	ix.sumCap += c
	if r > heldExactLimit || c > heldExactLimit {
		ix.big = true
	}
	// The operation pruned the lease at the ledger's time: none of its
	// entries is dominated or expired.
	ix.breaks.fix(j, firstBreak(le, false))
	v := l.holdsSuperseded(j)
	if v != ix.verSup[j] {
		ix.verSup[j] = v
		if v {
			ix.nVerSup++
		} else {
			ix.nVerSup--
		}
	}
	ix.expiry.fix(j, le.holdUntil())
	if s := ix.sub; s != nil {
		if inc := l.incumbent(j); inc != s.inc[j] {
			if ix.burstD[j] > 0 {
				l.subRemove(j)
				s.inc[j] = inc
				l.subInsert(j)
			} else {
				s.inc[j] = inc
			}
		}
	}
}

// firstBreak is the earliest expiry of le's superseded and replaced
// entries (math.MaxInt64: none), or math.MinInt64 if checkDominated and
// a superseded version is dominated by the current terms (the next
// advance prunes it).
func firstBreak(le *Lease, checkDominated bool) int64 {
	first := int64(math.MaxInt64)
	for _, s := range le.Superseded {
		first = min(first, s.ExpiresNanos)
		if checkDominated && s.RateMilliPerSec <= le.Current.RateMilliPerSec && s.CapMilli <= le.Current.CapMilli {
			return math.MinInt64
		}
	}
	for _, s := range le.Replaced {
		first = min(first, s.ExpiresNanos)
	}
	return first
}

// nextBreak: no superseded or replaced entry of any lease expires before
// it, and none is left to prune.
func (ix *ledgerIndex) nextBreak() int64 {
	if m, ok := ix.breaks.min(); ok {
		return m
	}
	return math.MaxInt64
}

// heldFast is heldExcept from the index, if it can answer at nowNanos.
func (l *Ledger) heldFast(skip int, nowNanos int64) (rate, capMilli int64, ok bool) {
	ix := &l.ix
	if !ix.ok || ix.big || nowNanos < l.s.NowNanos || nowNanos >= ix.nextBreak() {
		return 0, 0, false
	}
	if nowNanos < l.s.HoldAllUntilNanos {
		rate, capMilli = l.s.Config.RateMilliPerSec, l.s.Config.CapacityMilli
	}
	rate += ix.sumRate
	capMilli += ix.sumCap
	if skip >= 0 {
		rr, rc := l.s.Leases[skip].replacedAt(nowNanos)
		rate += rr - ix.held[skip].rate
		capMilli += rc - ix.held[skip].capMilli
	}
	return rate, capMilli, true
}

// fastShares is divideBudget's rate and cap for lease i, from the index,
// when it can tell them exactly: equal weights (fairShares' remainder
// then goes to the first unsatisfied claims in order), exact sums, and
// no claim's fair cap below its floor (no subset step).
//
// leftoverBurst: DivideOptions.LeftoverBurst, step 3 of B over every
// lease (outside the subset step).
func (l *Ledger) fastShares(i int, leftoverBurst bool) (rate, capMilli int64, ok bool) {
	ix := &l.ix
	if !ix.ok || !ix.sumsExact || len(ix.weights) > 1 || l.has(faultSliverShares) {
		return 0, 0, false
	}
	bq, brem, bn, ball := ix.burstDiv.level()
	if !ball && ix.maxFloor > bq {
		// Some claim with a burst demand may get a cap below its floor:
		// tighten the bound.
		ix.maxFloor = 0
		for f := range ix.floors {
			ix.maxFloor = max(ix.maxFloor, f)
		}
		if ix.maxFloor > bq {
			if len(ix.floors) != 1 {
				return 0, 0, false // several floors: the full division
			}
			// One floor F: the unsatisfied claims' caps are bq+1 for the
			// first brem of them and bq for the others, so some cap is
			// below F unless F is bq+1 and every one got the extra unit.
			if f := ix.maxFloor; f > bq+1 || bn > brem {
				rate, capMilli = l.subsetShares(i, f)
				return rate, capMilli, true
			}
		}
	}
	rq, rrem, rn, rall := ix.rateDiv.level()
	rate = share(ix.rateD, i, rq, rrem, rn, rall)
	capMilli = share(ix.burstD, i, bq, brem, bn, ball)
	leftRate, leftCap := ix.rateDiv.total-min(ix.rateDiv.total, ix.rateDiv.sum), ix.burstDiv.total-min(ix.burstDiv.total, ix.burstDiv.sum)
	if leftoverBurst && ix.nIdle == 0 {
		// No lease is idle (idle ones keep it all, as without the
		// option): every lease and the pool's seat get an equal part of the burst
		// no demand claims, the remainder to the leases by position (with
		// weights 1 every part's fraction is equal, and fairShares breaks
		// the tie by position, the pool's seat last). Other weights: the
		// full division.
		if _, one := ix.weights[1]; !one {
			return 0, 0, false
		}
		if m := int64(len(l.s.Leases)) + 1; leftCap > 0 {
			capMilli += leftCap / m
			if int64(i) < leftCap%m {
				capMilli++
			}
		}
		leftCap = 0
	}
	if ix.idle[i] {
		r, c := l.idleSplit(i, leftRate, leftCap)
		rate, capMilli = rate+r, capMilli+c
	}
	return rate, capMilli, true
}

// idleSplit is idle lease i's part of what no demand claims (step 3 of
// divideBudget): equal parts, the remainder by position.
func (l *Ledger) idleSplit(i int, leftRate, leftCap int64) (rate, capMilli int64) {
	ix := &l.ix
	before := int64(0)
	for j := 0; j < i; j++ {
		if ix.idle[j] {
			before++
		}
	}
	m := int64(ix.nIdle)
	if leftRate > 0 {
		rate = leftRate / m
		if before < leftRate%m {
			rate++
		}
	}
	if leftCap > 0 {
		capMilli = leftCap / m
		if before < leftCap%m {
			capMilli++
		}
	}
	return rate, capMilli
}

// posHeap is a binary min-heap of lease positions by a key per position,
// with each position's place in the heap, so that one lease's key can
// change in O(log n).
type posHeap struct {
	key  []int64 // by lease position
	heap []int32 // lease positions
	pos  []int32 // pos[heap[k]] == k
}

func (h *posHeap) resize(n int) {
	h.key, h.heap, h.pos = grow(h.key, n), grow(h.heap, n), grow(h.pos, n)
}

// init orders the heap once every key is set.
func (h *posHeap) init() {
	for j := range h.heap {
		h.heap[j], h.pos[j] = int32(j), int32(j)
	}
	for k := len(h.heap)/2 - 1; k >= 0; k-- {
		h.down(k)
	}
}

func (h *posHeap) min() (int64, bool) {
	if len(h.heap) == 0 {
		return 0, false
	}
	return h.key[h.heap[0]], true
}

// fix sets position j's key.
func (h *posHeap) fix(j int, key int64) {
	old := h.key[j]
	if key == old {
		return
	}
	h.key[j] = key
	if key < old {
		h.up(int(h.pos[j]))
	} else {
		h.down(int(h.pos[j]))
	}
}

func (h *posHeap) less(a, b int) bool { return h.key[h.heap[a]] < h.key[h.heap[b]] }

func (h *posHeap) swap(a, b int) {
	h.heap[a], h.heap[b] = h.heap[b], h.heap[a]
	h.pos[h.heap[a]], h.pos[h.heap[b]] = int32(a), int32(b)
}

func (h *posHeap) up(k int) {
	for k > 0 {
		p := (k - 1) / 2
		if !h.less(k, p) {
			return
		}
		h.swap(k, p)
		k = p
	}
}

func (h *posHeap) down(k int) {
	n := len(h.heap)
	for {
		c := 2*k + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, k) {
			return
		}
		h.swap(k, c)
		k = c
	}
}

// minHold is the earliest holdUntil (found: there is a lease), if the
// index is up to date (ok).
func (l *Ledger) minHold() (next int64, found, ok bool) {
	if !l.ix.ok {
		return 0, false, false
	}
	next, found = l.ix.expiry.min()
	return next, found, true
}

// insertAt records the lease now at position j, the leases from j on
// having moved up one (Grant). Its cost is a few moves of the per-lease
// arrays and a renumbering of the heaps, no sort.
func (l *Ledger) insertAt(j int) {
	ix := &l.ix
	ix.sub = nil
	le := &l.s.Leases[j]
	now := l.s.NowNanos
	cfg := l.s.Config
	n := len(l.s.Leases)
	r, c := le.heldAt(now)
	ix.held = slices.Insert(ix.held, j, heldPair{r, c})
	ix.sumRate += r
	ix.sumCap += c
	if r > heldExactLimit || c > heldExactLimit {
		ix.big = true
	}
	v := l.holdsSuperseded(j)
	ix.verSup = slices.Insert(ix.verSup, j, v)
	if v {
		ix.nVerSup++
	}
	ix.sumW += max(le.Weight, 1)
	ix.expiry.insertAt(j, le.holdUntil())
	ix.breaks.insertAt(j, firstBreak(le, true))
	ix.rateD = slices.Insert(ix.rateD, j, 0)
	ix.burstD = slices.Insert(ix.burstD, j, 0)
	ix.floor = slices.Insert(ix.floor, j, 0)
	ix.idle = slices.Insert(ix.idle, j, false)
	l.addClaim(j)
	ix.rateDiv.insert(ix.rateD[j])
	ix.burstDiv.insert(ix.burstD[j])
	ix.sumsExact = n < maxLeasesLimit && max(cfg.RateMilliPerSec, cfg.CapacityMilli) <= (int64(1)<<62)/int64(n+1)
}

// removeAt forgets the lease at position j, which is still there and is
// about to be removed from l.s.Leases (Release, Grant's replacement).
func (l *Ledger) removeAt(j int) {
	ix := &l.ix
	ix.sub = nil
	le := &l.s.Leases[j]
	ix.sumRate -= ix.held[j].rate
	ix.sumCap -= ix.held[j].capMilli
	ix.held = slices.Delete(ix.held, j, j+1)
	if ix.verSup[j] {
		ix.nVerSup--
	}
	ix.verSup = slices.Delete(ix.verSup, j, j+1)
	ix.sumW -= max(le.Weight, 1)
	ix.expiry.deleteAt(j)
	ix.breaks.deleteAt(j)
	l.dropClaim(j)
	ix.rateDiv.remove(ix.rateD[j])
	ix.burstDiv.remove(ix.burstD[j])
	ix.rateD = slices.Delete(ix.rateD, j, j+1)
	ix.burstD = slices.Delete(ix.burstD, j, j+1)
	ix.floor = slices.Delete(ix.floor, j, j+1)
	ix.idle = slices.Delete(ix.idle, j, j+1)
}

// insertAt adds position j with key, positions from j on moving up one.
func (h *posHeap) insertAt(j int, key int64) {
	for k, p := range h.heap {
		if int(p) >= j {
			h.heap[k] = p + 1
		}
	}
	h.pos = slices.Insert(h.pos, j, int32(len(h.heap)))
	h.key = slices.Insert(h.key, j, key)
	h.heap = append(h.heap, int32(j))
	h.up(len(h.heap) - 1)
}

// deleteAt removes position j, positions after it moving down one.
func (h *posHeap) deleteAt(j int) {
	k := int(h.pos[j])
	last := len(h.heap) - 1
	if k != last {
		h.swap(k, last)
	}
	h.heap = h.heap[:last]
	if k != last {
		h.down(k)
		h.up(k)
	}
	h.pos = slices.Delete(h.pos, j, j+1)
	h.key = slices.Delete(h.key, j, j+1)
	for k, p := range h.heap {
		if int(p) > j {
			h.heap[k] = p - 1
		}
	}
}

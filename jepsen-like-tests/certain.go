//go:build jepsen && linux

package jepsen

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"time"
)

// CertainExcess is a window [FromNanos, ToNanos] in which the requests
// certainly admitted (whole decision interval inside it) exceed the bound.
type CertainExcess struct {
	FromNanos, ToNanos int64
	AdmittedMilli      int64 // certainly admitted inside
	AllowedMilli       int64 // B + r·(To−From) + slack, rounded down
}

var errCertainRange = errors.New("history too long or too fast for the int64 certain-window check")

// certainViolation is the exact any-length check over decision intervals:
// is there a window [a, b] where the requests whose whole interval
// [TMonoNanos, after] lies inside admitted more than B + r·(b−a) + slack?
// Some worst window starts at a request's start and ends at a request's
// end, so it tries every b = after_j in increasing order, keeping for
// every candidate start a_i the value 1e9·(admitted in [a_i, b]) + r·a_i in
// a segment tree (adding request k adds its cost to every a_i <= its
// start), and asks for the largest value among the a_i <= b. O(n log n).
func certainViolation(recs []Record, b BoundSpec) (*CertainExcess, error) {
	n := len(recs)
	if n == 0 {
		return nil, nil
	}
	byStart := slices.Clone(recs)
	slices.SortStableFunc(byStart, func(x, y Record) int { return cmp.Compare(x.TMonoNanos, y.TMonoNanos) })
	t0 := byStart[0].TMonoNanos
	var total int64
	span := int64(0)
	for _, r := range byStart {
		total += r.CostMilli
		span = max(span, r.after()-t0)
	}
	const limit = math.MaxInt64 / 4
	if total > limit/1_000_000_000 || (b.RateMilliPerSec > 0 && span > limit/b.RateMilliPerSec) {
		return nil, errCertainRange
	}
	allow := (b.CapacityMilli + b.SlackMilli()) * 1_000_000_000
	starts := make([]int64, n)
	for i, r := range byStart {
		starts[i] = r.TMonoNanos - t0
	}
	tr := newMaxTree(n)
	for i, a := range starts {
		tr.set(i, b.RateMilliPerSec*a)
	}
	order := make([]int, n) // indexes into byStart, by end time
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(byStart[x].after(), byStart[y].after()) })
	for _, k := range order {
		rk := byStart[k]
		// Every start a_i <= rk's start now counts rk: the prefix of
		// starts up to the last one equal to rk's.
		p, _ := slices.BinarySearch(starts, rk.TMonoNanos-t0+1)
		tr.add(0, p, rk.CostMilli*1_000_000_000)
		end := rk.after() - t0
		q, _ := slices.BinarySearch(starts, end+1) // starts <= end
		v, i := tr.max(0, q)
		if v-b.RateMilliPerSec*end > allow {
			from := starts[i] + t0
			adm := certainIn(byStart, from, end+t0)
			return &CertainExcess{FromNanos: from, ToNanos: end + t0, AdmittedMilli: adm,
				AllowedMilli: b.AllowedMilli(time.Duration(end + t0 - from))}, nil
		}
	}
	return nil, nil
}

// maxTree: range add, range max with the index of the max.
type maxTree struct {
	n    int
	mx   []int64
	idx  []int
	lazy []int64
}

func newMaxTree(n int) *maxTree {
	t := &maxTree{n: n, mx: make([]int64, 4*n), idx: make([]int, 4*n), lazy: make([]int64, 4*n)}
	t.build(1, 0, n)
	return t
}

func (t *maxTree) build(node, lo, hi int) {
	if hi-lo == 1 {
		t.idx[node] = lo
		return
	}
	mid := (lo + hi) / 2
	t.build(2*node, lo, mid)
	t.build(2*node+1, mid, hi)
	t.pull(node)
}

func (t *maxTree) pull(node int) {
	l, r := 2*node, 2*node+1
	if t.mx[l] >= t.mx[r] {
		t.mx[node], t.idx[node] = t.mx[l]+t.lazy[node], t.idx[l]
	} else {
		t.mx[node], t.idx[node] = t.mx[r]+t.lazy[node], t.idx[r]
	}
}

func (t *maxTree) set(i int, v int64) { t.add(i, i+1, v) }

// add adds v to positions [from, to).
func (t *maxTree) add(from, to int, v int64) { t.addRec(1, 0, t.n, from, to, v) }

func (t *maxTree) addRec(node, lo, hi, from, to int, v int64) {
	if to <= lo || hi <= from {
		return
	}
	if from <= lo && hi <= to {
		t.mx[node] += v
		t.lazy[node] += v
		return
	}
	mid := (lo + hi) / 2
	t.addRec(2*node, lo, mid, from, to, v)
	t.addRec(2*node+1, mid, hi, from, to, v)
	t.pull(node)
}

// max returns the largest value in [from, to) and its position.
func (t *maxTree) max(from, to int) (int64, int) { return t.maxRec(1, 0, t.n, from, to) }

func (t *maxTree) maxRec(node, lo, hi, from, to int) (int64, int) {
	if to <= lo || hi <= from {
		return math.MinInt64, -1
	}
	if from <= lo && hi <= to {
		return t.mx[node], t.idx[node]
	}
	mid := (lo + hi) / 2
	lv, li := t.maxRec(2*node, lo, mid, from, to)
	rv, ri := t.maxRec(2*node+1, mid, hi, from, to)
	if rv > lv {
		lv, li = rv, ri
	}
	if li < 0 {
		return lv, li
	}
	return lv + t.lazy[node], li
}

// Package quotacheck decides whether a history of admissions kept ration's
// promise: the work admitted in every time window of length W is at most
// B + r·W (+ any named slack a relaxation adds).
//
// # Design
//
// The check is exact, not sampled. For admissions sorted by time
// t_1 <= ... <= t_n with costs c_k, the promise over every window is
// equivalent to: for all i <= j, Σ_{k=i..j} c_k <= B + r·(t_j - t_i), because
// the tightest window holding admissions i..j is [t_i, t_j]. With prefix sums
// P, that is (P_j·1e9 - r·t_j) - (P_{i-1}·1e9 - r·t_i) <= B·1e9 (scaled to
// milli-tokens·ns/s so everything is an integer), so one pass keeping the
// running minimum of the second term checks all O(n²) windows in O(n).
// Products exceed int64 for long histories, so they are done in math/big.
// The property tests cross-check this against the O(n²) definition.
package quotacheck

import (
	"fmt"
	"math/big"
	"sort"
)

// Admission is one admitted unit of work.
type Admission struct {
	AtNanos   int64 // when it was admitted, on the reference clock
	CostMilli int64 // > 0
	Who       string
}

// Bound is the promise being checked.
type Bound struct {
	CapacityMilli   int64 // B
	RateMilliPerSec int64 // r
	// SlackMilli is the sum of the named extra terms of any relaxation in
	// force (fail-open, late charging, ...); 0 for the strict bound.
	SlackMilli int64
}

// Violation describes the worst window, when it breaks the bound.
type Violation struct {
	FromNanos, ToNanos int64 // the window [From, To]
	AdmittedMilli      int64 // admitted inside it
	AllowedMilli       int64 // B + r·W + slack, rounded down
	First, Last        int   // indices into the sorted history
}

func (v Violation) Error() string {
	return fmt.Sprintf("quota bound broken: %d milli-tokens admitted in [%d, %d] ns (window %d ns), bound allows %d",
		v.AdmittedMilli, v.FromNanos, v.ToNanos, v.ToNanos-v.FromNanos, v.AllowedMilli)
}

const nanosPerSecond = 1_000_000_000

// Check sorts h by time (stably) and reports the worst window if any window
// admits more than the bound allows. It returns nil when the promise held.
func Check(h []Admission, b Bound) *Violation {
	if len(h) == 0 {
		return nil
	}
	s := append([]Admission(nil), h...)
	sort.SliceStable(s, func(a, c int) bool { return s[a].AtNanos < s[c].AtNanos })

	scale := big.NewInt(nanosPerSecond)
	rate := big.NewInt(b.RateMilliPerSec)
	limit := new(big.Int).Mul(big.NewInt(b.CapacityMilli+b.SlackMilli), scale)

	var prefix int64 // P_{j-1}, then P_j
	minTerm := new(big.Int)
	minIdx := 0
	tmp, term, cur := new(big.Int), new(big.Int), new(big.Int)
	var worst *Violation
	worstExcess := new(big.Int)
	for j, a := range s {
		// Candidate start i = j: term = P_{j-1}·1e9 - r·t_j.
		term.Mul(big.NewInt(prefix), scale)
		term.Sub(term, tmp.Mul(rate, big.NewInt(a.AtNanos)))
		if j == 0 || term.Cmp(minTerm) < 0 {
			minTerm.Set(term)
			minIdx = j
		}
		prefix += a.CostMilli
		cur.Mul(big.NewInt(prefix), scale)
		cur.Sub(cur, tmp.Mul(rate, big.NewInt(a.AtNanos)))
		cur.Sub(cur, minTerm) // admitted·1e9 - r·W over the best window ending at j
		if cur.Cmp(limit) > 0 {
			excess := new(big.Int).Sub(cur, limit)
			if worst == nil || excess.Cmp(worstExcess) > 0 {
				worstExcess = excess
				worst = window(s, minIdx, j, b)
			}
		}
	}
	return worst
}

func window(s []Admission, i, j int, b Bound) *Violation {
	var admitted int64
	for k := i; k <= j; k++ {
		admitted += s[k].CostMilli
	}
	w := s[j].AtNanos - s[i].AtNanos
	allowed := new(big.Int).Mul(big.NewInt(b.RateMilliPerSec), big.NewInt(w))
	allowed.Quo(allowed, big.NewInt(nanosPerSecond))
	return &Violation{
		FromNanos: s[i].AtNanos, ToNanos: s[j].AtNanos, AdmittedMilli: admitted,
		AllowedMilli: b.CapacityMilli + b.SlackMilli + allowed.Int64(), First: i, Last: j,
	}
}

// CheckBruteForce is the O(n²) definition, for cross-checking Check in tests.
// It returns whether any window breaks the bound.
func CheckBruteForce(h []Admission, b Bound) bool {
	s := append([]Admission(nil), h...)
	sort.SliceStable(s, func(a, c int) bool { return s[a].AtNanos < s[c].AtNanos })
	scale := big.NewInt(nanosPerSecond)
	for i := range s {
		var sum int64
		for j := i; j < len(s); j++ {
			sum += s[j].CostMilli
			lhs := new(big.Int).Mul(big.NewInt(sum), scale)
			rhs := new(big.Int).Mul(big.NewInt(b.CapacityMilli+b.SlackMilli), scale)
			rhs.Add(rhs, new(big.Int).Mul(big.NewInt(b.RateMilliPerSec), big.NewInt(s[j].AtNanos-s[i].AtNanos)))
			if lhs.Cmp(rhs) > 0 {
				return true
			}
		}
	}
	return false
}

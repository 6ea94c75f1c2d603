package lease

import (
	"fmt"
	"math/bits"
	"sort"
)

// Claim is one client's demand in a fair division.
type Claim struct {
	// ID orders claims deterministically; the integer remainder of a
	// division goes to the lowest IDs first, and equal IDs keep their order
	// in the slice.
	ID string
	// Demand is the most this client wants. Nobody gets more than it asks.
	Demand int64
	// Weight scales the client's share (>= 1; 0 is treated as 1).
	Weight int64
}

// FairShares divides total among claims by weighted max-min fairness using
// iterative water-filling: every round gives each unsatisfied claim the same
// amount per unit of weight; claims whose demand fits under that level are
// satisfied exactly and leave, and their unused share is redistributed to the
// rest. The loop ends when no claim leaves in a round, so it takes at most
// len(claims)+1 rounds, never a fixed number.
//
// The result is integer-exact: shares[i] <= claims[i].Demand; the sum is
// min(total, sum of demands); and the integer remainder is handed out one
// unit at a time to the largest fractional parts (ties by ID).
// shares[i] corresponds to claims[i].
// Each share is within one unit of the exact rational max-min share.
func FairShares(total int64, claims []Claim) ([]int64, error) {
	if total < 0 {
		return nil, fmt.Errorf("%w: fair-share total %d is negative", ErrInvalidConfig, total)
	}
	shares := make([]int64, len(claims))
	active := make([]int, 0, len(claims))
	for i, c := range claims {
		if c.Demand < 0 {
			return nil, fmt.Errorf("%w: claim %q demand %d is negative", ErrInvalidConfig, c.ID, c.Demand)
		}
		if c.Weight < 0 || c.Weight > 1<<20 {
			return nil, fmt.Errorf("%w: claim %q weight %d is outside [0, %d]", ErrInvalidConfig, c.ID, c.Weight, 1<<20)
		}
		if c.Demand > 0 {
			active = append(active, i)
		}
	}
	weight := func(i int) int64 {
		if claims[i].Weight == 0 {
			return 1
		}
		return claims[i].Weight
	}
	remaining := total
	for len(active) > 0 && remaining > 0 {
		var sumW int64
		for _, i := range active {
			sumW += weight(i)
		}
		// A claim is satisfied this round iff demand <= weight*remaining/sumW
		// (exact rational comparison: demand*sumW <= weight*remaining, in
		// 128 bits).
		next := active[:0:0]
		satisfied := false
		for _, i := range active {
			if mulLE(claims[i].Demand, sumW, weight(i), remaining) {
				shares[i] = claims[i].Demand
				satisfied = true
			} else {
				next = append(next, i)
			}
		}
		if satisfied {
			for _, i := range active {
				if shares[i] == claims[i].Demand {
					remaining -= shares[i]
				}
			}
			active = next
			continue
		}
		// Nobody fits under the water level: each claim gets the floor of
		// its exact share w_i*remaining/sumW, and the leftover (fewer units
		// than active claims) goes one unit each to the largest fractional
		// parts, ties by ID. Every active claim's demand exceeds its exact
		// share, so the extra unit always fits under its demand.
		frac := make(map[int]uint64, len(active))
		given := int64(0)
		for _, i := range active {
			hi, lo := mul128(weight(i), remaining)
			q, r := bits.Div64(hi, lo, uint64(sumW)) // q <= remaining: no overflow
			shares[i] = int64(q)
			frac[i] = r
			given += shares[i]
		}
		leftover := remaining - given
		sort.SliceStable(active, func(a, b int) bool {
			fa, fb := frac[active[a]], frac[active[b]]
			if fa != fb {
				return fa > fb
			}
			return claims[active[a]].ID < claims[active[b]].ID
		})
		for _, i := range active {
			if leftover == 0 {
				break
			}
			if shares[i] < claims[i].Demand {
				shares[i]++
				leftover--
			}
		}
		break
	}
	return shares, nil
}

// mulLE reports a*b <= c*d for non-negative operands, exactly.
func mulLE(a, b, c, d int64) bool {
	h1, l1 := mul128(a, b)
	h2, l2 := mul128(c, d)
	return h1 < h2 || (h1 == h2 && l1 <= l2)
}
